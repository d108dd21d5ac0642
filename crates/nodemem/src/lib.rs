//! The `nodemem` command: thin wiring of the library crates into subcommands.

pub mod crds_cmd;
pub mod error;
pub mod manifests;
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
}

/// Runs a parsed command line and returns what to print on stdout.
pub fn run(cli: &Cli) -> Result<String, CliError> {
    match &cli.command {
        Command::Crds(args) => crds_cmd::run(args),
        Command::Simulate(args) => simulate::run(args),
    }
}
