//! The `nodemem` command: the subcommands wired to the crates that implement them.
//!
//! * `nodemem agent`: the node agent (`nodemem_agent`).
//! * `nodemem controller`: the cluster controller (`nodemem_controller`); `nodemem
//!   stand-down`, the chart's pre-delete hook, lets go of every policy before an
//!   uninstall.
//! * `kubectl nodemem`: this binary run as `kubectl-nodemem` (`nodemem_plugin`).
//! * `nodemem simulate` ([`simulate`]) and `nodemem crds` ([`crds_cmd`]): offline tools
//!   over the pure rules and the API types.
//! * `nodemem sandbox` ([`sandbox`]): nodemem live on a local control plane.

pub mod crds_cmd;
#[cfg(feature = "sandbox")]
pub mod sandbox;
pub mod simulate;

use clap::{Parser, Subcommand};
use nodemem_plumbing::{CliError, Outcome};

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
    Agent(Box<nodemem_agent::AgentArgs>),
    /// The cluster controller: NodeMemoryConfigs per node, rolled out per pool.
    Controller(Box<nodemem_controller::ControllerArgs>),
    /// Whether the controller leads and is ready (the chart's `helm test`).
    Check(nodemem_controller::CheckArgs),
    /// Before an uninstall (the chart's pre-delete hook): scale the controller to zero
    /// and remove its handoff finalizer from every policy, so none is left Terminating.
    StandDown(nodemem_controller::StandDownArgs),
    /// nodemem on a local control plane with simulated node pools, live (Ctrl-C stops).
    #[cfg(feature = "sandbox")]
    Sandbox(sandbox::SandboxArgs),
}

/// Runs a parsed command line. `Err` is bad input: one line per problem, exit 1.
pub fn run(cli: &Cli) -> Result<Outcome, CliError> {
    match &cli.command {
        Command::Crds(args) => crds_cmd::run(args).map(Outcome::ok),
        Command::Simulate(args) => simulate::run(args).map(Outcome::ok),
        Command::Agent(args) => nodemem_agent::run(args),
        Command::Controller(args) => nodemem_controller::run(args),
        Command::Check(args) => nodemem_controller::check_command(args),
        Command::StandDown(args) => nodemem_controller::stand_down_command(args),
        #[cfg(feature = "sandbox")]
        Command::Sandbox(args) => sandbox::run(args),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Each flag the chart's `agent.extraArgs` may add is one the agent's command line
    /// takes: the controller's list cannot name a flag the agent lost or renamed.
    #[test]
    fn every_extra_agent_flag_is_one_the_agent_takes() {
        let cli = super::Cli::command();
        let agent = cli.find_subcommand("agent").expect("nodemem agent").clone();
        let flags: Vec<String> = agent
            .get_arguments()
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect();
        for flag in nodemem_controller::agents::pod::EXTRA_ARGS {
            assert!(
                flags.iter().any(|f| f == flag),
                "{flag} is not in {flags:?}"
            );
        }
        for own in ["--cgroup-root", "--kubelet-writes", "--nri-socket"] {
            assert!(flags.iter().any(|f| f == own), "{own}");
            assert!(!nodemem_controller::agents::pod::EXTRA_ARGS.contains(&own));
        }
    }
}
