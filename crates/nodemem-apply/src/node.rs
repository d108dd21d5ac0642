//! The node as discovered: the cgroup file system and what discovery found in it, the
//! state directory, the agent's own cgroup, where the kubelet keeps its configuration
//! and whether systemd's record of the units is kept. The agent owns it and lends it to
//! the engine ([`crate::applier::NodeApplier`]) and to its own readers (observation,
//! relief, reclaim, health, Kubelet mode, the last-known record): none of them keeps a
//! copy, so what each reads is the one node.

use std::path::PathBuf;

use nodemem_cgroup::discover::{discover, Discovery};
use nodemem_cgroup::{CgroupFs, Roots};
use nodemem_model::node::NodeFacts;
use nodemem_model::numa::Scope;
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_model::values::memory_qos::NodeMemoryFacts;

use crate::applier::ApplyError;
use crate::kubelet::KubeletFiles;
use crate::state::StateDir;

/// Where the node's files are: what [`Node::discover`] reads.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// The cgroup file system's, sysfs's and procfs's roots.
    pub roots: Roots,
    /// The cgroup driver when known; discovery finds it otherwise.
    pub cgroup_driver: Option<CgroupDriver>,
    /// The agent's state directory (its records).
    pub state_dir: PathBuf,
    /// The kubelet's `topologyManagerScope`.
    pub topology_scope: Scope,
    /// The kubelet's configuration file (read-only host mount) and drop-in directory.
    pub kubelet: KubeletFiles,
    /// The agent's own view of cgroup2 (`/sys/fs/cgroup` in its container): the cgroup
    /// it shows is the agent's own, which the kernel does not let it write
    /// (`nodemem_cgroup::own`).
    pub own_cgroup_mount: PathBuf,
    /// Whether the values are set as unit properties too on a systemd-driver node (the
    /// agent reaches systemd's bus): each pass then leaves a
    /// [`crate::applier::UnitHandoff`].
    pub systemd_units: bool,
}

/// One node as discovered, read-only after discovery.
pub struct Node {
    fs: CgroupFs,
    discovery: Discovery,
    state: StateDir,
    /// The agent's own container cgroup (relative), never written.
    own_cgroup: Option<String>,
    kubelet_files: KubeletFiles,
    topology_scope: Scope,
    /// Whether passes leave values for systemd's record of the units (a systemd-driver
    /// node whose systemd the agent reaches).
    holds_units: bool,
}

impl Node {
    /// Discovers the node (cgroup v2, its controllers, driver, NUMA topology, kernel)
    /// and opens its state directory.
    pub fn discover(config: &NodeConfig) -> Result<Node, ApplyError> {
        nodemem_cgroup::fs::raise_open_file_limit();
        let discovery =
            discover(&config.roots, config.cgroup_driver).map_err(ApplyError::Discovery)?;
        let state = StateDir::open(&config.state_dir).map_err(ApplyError::State)?;
        // The agent's own container: left to its runtime (the kernel refuses the writes).
        let own_cgroup =
            nodemem_cgroup::own::cgroup_shown_at(&config.roots.cgroup, &config.own_cgroup_mount)
                .filter(|c| !c.is_empty());
        if let Some(own) = &own_cgroup {
            tracing::info!(cgroup = %own, "the agent's own container cgroup is left to its runtime: the kernel refuses writes to a cgroup namespace's root from inside it");
        }
        let holds_units = config.systemd_units && discovery.cgroup_driver == CgroupDriver::Systemd;
        Ok(Node {
            fs: CgroupFs::new(&config.roots.cgroup),
            discovery,
            state,
            own_cgroup,
            kubelet_files: config.kubelet.clone(),
            topology_scope: config.topology_scope,
            holds_units,
        })
    }

    /// What discovery found: controllers, driver, topology, kernel, page size.
    pub fn discovery(&self) -> &Discovery {
        &self.discovery
    }

    /// The cgroup tree, for the writes and for reads beside them (samples, signals).
    pub fn cgroup_fs(&self) -> &CgroupFs {
        &self.fs
    }

    /// The state directory: the engine's records and the agent's own (the last known
    /// config, the kubelet's drop-in record).
    pub fn state(&self) -> &StateDir {
        &self.state
    }

    /// The agent's own container cgroup (relative), which nodemem never writes.
    pub fn own_cgroup(&self) -> Option<&str> {
        self.own_cgroup.as_deref()
    }

    /// Where the kubelet's configuration is read from.
    pub fn kubelet_files(&self) -> &KubeletFiles {
        &self.kubelet_files
    }

    /// Whether passes leave values for systemd's record of the units.
    pub fn holds_units(&self) -> bool {
        self.holds_units
    }

    /// The facts discovery gives the node computation; the Node object's figures and
    /// the kubelet's are set on them per pass.
    pub fn facts(&self) -> NodeFacts {
        let d = &self.discovery;
        NodeFacts {
            memory: NodeMemoryFacts {
                page_size: d.page_size,
                kernel_version: Some(d.kernel_version.clone()),
                ..NodeMemoryFacts::default()
            },
            cgroup_driver: d.cgroup_driver,
            topology: d.topology.clone(),
            topology_scope: self.topology_scope,
        }
    }
}
