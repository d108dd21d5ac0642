//! The `nodemem` command: thin wiring of the library crates into subcommands.

pub mod agent;
pub mod controller;
pub mod crds_cmd;
pub mod endpoints;
pub mod error;
pub mod kubeclient;
pub mod manifests;
pub mod plugin;
#[cfg(feature = "sandbox")]
pub mod sandbox;
pub mod simulate;

use clap::{Parser, Subcommand};

pub use error::CliError;

/// Node memory QoS and NUMA memory policy for Kubernetes clusters.
#[derive(Debug, Parser)]
#[command(name = "nodemem", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print, write or check the CustomResourceDefinitions.
    Crds(crds_cmd::CrdsArgs),
    /// Show the cgroup values nodemem would set on a node for its pods.
    Simulate(simulate::SimulateArgs),
    /// The node agent: `--once` applies one node from files (no apiserver).
    Agent(Box<agent::AgentArgs>),
    /// The cluster controller: NodeMemoryConfigs per node, rolled out per pool.
    Controller(controller::ControllerArgs),
    /// nodemem on a local control plane with simulated node pools, live (Ctrl-C stops).
    #[cfg(feature = "sandbox")]
    Sandbox(sandbox::SandboxArgs),
}

/// What a command leaves: its output, problems for stderr, and the exit code.
#[derive(Debug, Default)]
pub struct Outcome {
    pub stdout: String,
    pub stderr: Vec<String>,
    pub code: u8,
}

impl Outcome {
    pub fn ok(stdout: String) -> Self {
        Outcome {
            stdout,
            ..Outcome::default()
        }
    }
}

/// Runs a parsed command line. `Err` is bad input: one line per problem, exit 1.
pub fn run(cli: &Cli) -> Result<Outcome, CliError> {
    match &cli.command {
        Command::Crds(args) => crds_cmd::run(args).map(Outcome::ok),
        Command::Simulate(args) => simulate::run(args).map(Outcome::ok),
        Command::Agent(args) => agent::run(args),
        Command::Controller(args) => controller::run(args),
        #[cfg(feature = "sandbox")]
        Command::Sandbox(args) => sandbox::run(args),
    }
}
