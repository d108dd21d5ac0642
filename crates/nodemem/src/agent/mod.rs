//! `nodemem agent`: the node agent. `--once` computes and applies one node from files
//! (no apiserver); the in-cluster mode builds on the same engine.

pub mod engine;
pub mod once;
mod output;

use std::path::PathBuf;

use nodemem_model::cgroup_layout::CgroupDriver;

use crate::error::CliError;
use crate::simulate::ScopeArg;
use crate::Outcome;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DriverArg {
    Systemd,
    Cgroupfs,
}

impl From<DriverArg> for CgroupDriver {
    fn from(d: DriverArg) -> Self {
        match d {
            DriverArg::Systemd => CgroupDriver::Systemd,
            DriverArg::Cgroupfs => CgroupDriver::Cgroupfs,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnceFormat {
    Table,
    Json,
}

/// Arguments of `nodemem agent`.
#[derive(Clone, Debug, clap::Args)]
pub struct AgentArgs {
    /// Compute and apply the node once from files, then exit (no apiserver).
    #[arg(long)]
    pub once: bool,
    /// The NodeMemoryConfig to enforce (YAML).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// This node's core/v1 Node (allocatable memory; name).
    #[arg(long)]
    pub node: Option<PathBuf>,
    /// The pods on this node, as `kubectl get pods -A -o yaml --field-selector
    /// spec.nodeName=NODE` prints them (container IDs from status).
    #[arg(long)]
    pub pods: Option<PathBuf>,
    /// The cgroup v2 mount.
    #[arg(long, default_value = "/sys/fs/cgroup")]
    pub cgroup_root: PathBuf,
    /// Where sysfs is mounted (NUMA nodes).
    #[arg(long, default_value = "/sys")]
    pub sys_root: PathBuf,
    /// Where procfs is mounted (kernel version).
    #[arg(long, default_value = "/proc")]
    pub proc_root: PathBuf,
    /// The agent's state: what nodemem set and what it held before, NUMA assignments.
    #[arg(long, default_value = "/var/lib/nodemem")]
    pub state_dir: PathBuf,
    /// Override the cgroup driver detected from the tree.
    #[arg(long, value_enum)]
    pub cgroup_driver: Option<DriverArg>,
    /// The kubelet's topologyManagerScope.
    #[arg(long, value_enum, default_value_t = ScopeArg::Container)]
    pub topology_manager_scope: ScopeArg,
    /// Print the writes without performing them; the state is not changed.
    #[arg(long)]
    pub dry_run: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OnceFormat::Table)]
    pub output: OnceFormat,
}

pub fn run(args: &AgentArgs) -> Result<Outcome, CliError> {
    if !args.once {
        return Err(CliError::one(
            "the in-cluster agent (watching the apiserver) is not part of this build; run `nodemem agent --once` to apply one node from files",
        ));
    }
    once::run(args)
}
