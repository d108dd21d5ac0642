//! The agent as the container runtime's NRI plugin (`--nri`): a new container is
//! created with nodemem's values in its spec, so runc writes them before the
//! container's first instruction (and, on the systemd driver, records them as the
//! scope's properties), instead of the reaction writing them milliseconds after its
//! cgroup appeared. A pod's cgroup is written when its sandbox runs, before any of its
//! containers exist.
//!
//! * [`plugin`]: the answers, from the creation table every pass publishes (the same
//!   computation the pass writes from), and the news they give the agent's loop.
//! * [`link`]: registration with the runtime, again whenever it restarts, and the path
//!   the node's status reports.
//!
//! The plugin never blocks a pod: a container whose pod is not known within a second is
//! created without nodemem's values (counted, warned) and the reaction writes them.

pub mod link;
pub mod plugin;

use std::path::PathBuf;

use nodemem_api::config::ContainerValuesPath;
use nodemem_model::values::cgroup_layout::ContainerId;

/// `--nri`: whether new containers get their values from the runtime.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum NriMode {
    /// NRI where the runtime's socket answers, the reaction elsewhere.
    #[default]
    Auto,
    /// NRI only: the runtime's records are not read (the reaction still repairs, once
    /// the kubelet reports a container).
    On,
    /// The reaction only.
    Off,
}

/// Where and how the plugin registers.
#[derive(Clone, Debug)]
pub struct NriConfig {
    pub mode: NriMode,
    pub socket: PathBuf,
    /// NRI calls plugins in index order: after resource-policy plugins (which place
    /// containers on CPUs and NUMA nodes first).
    pub index: String,
}

impl Default for NriConfig {
    fn default() -> Self {
        NriConfig {
            mode: NriMode::Off,
            socket: PathBuf::from(nodemem_nri::DEFAULT_SOCKET),
            index: DEFAULT_INDEX.to_string(),
        }
    }
}

/// The default plugin index.
pub const DEFAULT_INDEX: &str = "90";

/// What the plugin tells the agent's loop.
#[derive(Debug)]
pub enum NriNews {
    /// A container is being created: its ID (before the kubelet reports it), and the
    /// files its spec sets from nodemem's values (claimed, so leaving gives them back).
    Created {
        pod_uid: String,
        name: String,
        id: ContainerId,
        path: String,
        files: Vec<&'static str>,
    },
    /// A container created with nodemem's values has started: the runtime has written
    /// them; from now on a different value is someone else's.
    Started { path: String },
    /// A pod's sandbox runs: its cgroup is written now; `done` once it was.
    SandboxRunning {
        path: String,
        done: tokio::sync::oneshot::Sender<()>,
    },
    /// The runtime listed its containers (a new registration) or went away: a
    /// whole-node pass repairs whatever differs and reports the path.
    Resync,
}

/// How new containers get their values now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NriState {
    Off,
    Connecting,
    Registered { runtime: String },
    Unavailable { reason: &'static str },
}

impl NriState {
    /// As `status.node.containerValues` reports it.
    pub fn status(&self) -> ContainerValuesPath {
        let reaction = |reason: &str| ContainerValuesPath {
            path: "Reaction".into(),
            runtime: None,
            reason: Some(reason.to_string()),
        };
        match self {
            NriState::Registered { runtime } => ContainerValuesPath {
                path: "NRI".into(),
                runtime: Some(runtime.clone()),
                reason: None,
            },
            NriState::Off => reaction("Off"),
            NriState::Connecting => reaction("Connecting"),
            NriState::Unavailable { reason } => reaction(reason),
        }
    }
}
