//! One node's enforcement, shared by `agent --once` and the in-cluster agent:
//! discovery once, then on every change the node computation, the apply engine and the
//! state directory (what nodemem owns, the Memory Manager's state).

use std::fmt;

use nodemem_agent::numa_state;
use nodemem_agent::state::StateDir;
use nodemem_agent::{apply_scoped, ApplyOptions, ApplyReport, Ownership};
use nodemem_cgroup::discover::{discover, Discovery};
use nodemem_cgroup::{CgroupFs, Roots};
use nodemem_model::cgroup_layout::CgroupDriver;
use nodemem_model::memory_qos::NodeMemoryFacts;
use nodemem_model::node::{desired_node, DesiredNode, NodeError, NodeFacts, NodeInput, NodePod};
use nodemem_model::numa::{MachineState, MemoryManager, Scope};
use nodemem_model::policy::{MemoryManagerPolicy, PolicySettings};

const OWNERSHIP_FILE: &str = "ownership.json";
const OWNERSHIP_KIND: &str = "ownership";

/// The bounded set of reasons a node's settings are not (fully) applied; each names a
/// condition reason, a metric label and whether retrying can help.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    /// The node is not what nodemem needs (cgroup v1, no kubepods).
    Discovery,
    /// The settings cannot be carried out on this node (reserved memory on a NUMA node
    /// it lacks, Static without cpuset, no memory controller).
    Unsatisfiable,
    /// The state directory holds a record nodemem cannot trust.
    State,
    /// Some writes failed; the rest were applied.
    WriteFailed,
}

impl Category {
    pub fn reason(self) -> &'static str {
        match self {
            Category::Discovery => "NodeNotSupported",
            Category::Unsatisfiable => "CannotSatisfy",
            Category::State => "StateUnusable",
            Category::WriteFailed => "WriteFailed",
        }
    }
}

/// A failure of one enforcement pass: its category and one line per problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineError {
    pub category: Category,
    pub problems: Vec<String>,
}

impl EngineError {
    fn one(category: Category, problem: impl Into<String>) -> Self {
        EngineError {
            category,
            problems: vec![problem.into()],
        }
    }
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.problems.join("; "))
    }
}

/// Where the engine runs and keeps its state.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub roots: Roots,
    pub cgroup_driver: Option<CgroupDriver>,
    pub state_dir: std::path::PathBuf,
    pub topology_scope: Scope,
    /// The kubelet's configuration file (read-only host mount) and drop-in directory.
    pub kubelet_config: std::path::PathBuf,
    pub kubelet_config_dir: Option<std::path::PathBuf>,
}

/// The node's kubelet enforces some of what nodemem would write; under
/// `enforcement: Agent` nodemem leaves those files to it rather than fight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletConflict {
    pub reason: &'static str,
    pub message: String,
    pub files: &'static [&'static str],
}

const MEMORY_QOS_FILES: &[&str] = &["memory.min", "memory.low", "memory.high"];
const MEMORY_MANAGER_FILES: &[&str] = &["cpuset.mems"];
const ALL_FILES: &[&str] = &["memory.min", "memory.low", "memory.high", "cpuset.mems"];

/// What to leave to the kubelet, from its settings and what nodemem is asked to do.
pub fn kubelet_conflict(
    kubelet: &nodemem_cgroup::discover::KubeletSettings,
    settings: &PolicySettings,
) -> Option<KubeletConflict> {
    if settings.enforcement != nodemem_model::policy::Enforcement::Agent {
        return None;
    }
    let qos = kubelet.memory_qos && settings.memory_qos.enabled;
    let mm = kubelet.static_memory_manager
        && settings.memory_manager.policy == MemoryManagerPolicy::Static;
    let sources: Vec<String> = kubelet
        .sources
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let (reason, what, files) = match (qos, mm) {
        (false, false) => return None,
        (true, false) => (
            "KubeletMemoryQoS",
            "featureGates.MemoryQoS: true",
            MEMORY_QOS_FILES,
        ),
        (false, true) => (
            "KubeletMemoryManager",
            "memoryManagerPolicy: Static",
            MEMORY_MANAGER_FILES,
        ),
        (true, true) => (
            "KubeletMemoryQoSAndMemoryManager",
            "featureGates.MemoryQoS: true and memoryManagerPolicy: Static",
            ALL_FILES,
        ),
    };
    Some(KubeletConflict {
        reason,
        message: format!(
            "the kubelet enforces this itself ({what} in {}); nodemem leaves {} to it: turn it off in the kubelet or use enforcement: Kubelet",
            sources.join(", "),
            files.join(", ")
        ),
        files,
    })
}

pub struct NodeEngine {
    kubelet_config: std::path::PathBuf,
    kubelet_config_dir: Option<std::path::PathBuf>,
    /// What the last pass left to the kubelet.
    conflict: Option<KubeletConflict>,
    /// Writes the kernel refused, retried with capped exponential backoff.
    backoff: nodemem_agent::WriteBackoff,
    started: std::time::Instant,
    fs: CgroupFs,
    discovery: Discovery,
    state: StateDir,
    owned: Ownership,
    scope: Scope,
}

impl NodeEngine {
    /// Discovers the node and loads what nodemem owns from the state directory.
    pub fn open(config: &EngineConfig) -> Result<Self, EngineError> {
        nodemem_cgroup::fs::raise_open_file_limit();
        let discovery = discover(&config.roots, config.cgroup_driver)
            .map_err(|e| EngineError::one(Category::Discovery, format!("discovery: {e}")))?;
        let state = StateDir::open(&config.state_dir)
            .map_err(|e| EngineError::one(Category::State, e.to_string()))?;
        let owned = state
            .load(OWNERSHIP_FILE, OWNERSHIP_KIND)
            .map_err(|e| EngineError::one(Category::State, e.to_string()))?
            .unwrap_or_default();
        Ok(NodeEngine {
            kubelet_config: config.kubelet_config.clone(),
            kubelet_config_dir: config.kubelet_config_dir.clone(),
            conflict: None,
            backoff: nodemem_agent::WriteBackoff::default(),
            started: std::time::Instant::now(),
            fs: CgroupFs::new(&config.roots.cgroup),
            discovery,
            state,
            owned,
            scope: config.topology_scope,
        })
    }

    pub fn discovery(&self) -> &Discovery {
        &self.discovery
    }

    /// memory.events and memory.pressure of these cgroups (the managed pods); a cgroup
    /// whose files cannot be read or parsed is left out.
    pub fn read_signals<'a>(
        &self,
        cgroups: impl Iterator<Item = &'a str>,
    ) -> std::collections::BTreeMap<String, super::health::Reading> {
        use nodemem_cgroup::parse::{memory_events, pressure};
        let mut out = std::collections::BTreeMap::new();
        for path in cgroups {
            let Ok(p) = nodemem_cgroup::CgroupPath::new(path) else {
                continue;
            };
            let events = self
                .fs
                .read(&p, "memory.events")
                .ok()
                .and_then(|t| memory_events("memory.events", &t).ok());
            let Some(events) = events else { continue };
            let full = self
                .fs
                .read(&p, "memory.pressure")
                .ok()
                .and_then(|t| pressure("memory.pressure", &t).ok())
                .and_then(|p| p.full)
                .map_or(0.0, |f| f.avg60);
            out.insert(
                path.to_string(),
                super::health::Reading {
                    high: events.high,
                    oom_kill: events.oom_kill,
                    full_avg60: full,
                },
            );
        }
        out
    }

    /// What the last pass left to the kubelet, if anything.
    pub fn conflict(&self) -> Option<&KubeletConflict> {
        self.conflict.as_ref()
    }

    /// The state directory, for the agent's other records (the last known config).
    pub fn state(&self) -> &StateDir {
        &self.state
    }

    /// Computes the node and applies it (or, with `dry_run`, only plans). Settings the
    /// node cannot carry out are refused before anything is written.
    pub fn enforce<'p>(
        &mut self,
        settings: &PolicySettings,
        allocatable: Option<i64>,
        pods: &'p [NodePod],
        dry_run: bool,
    ) -> Result<(DesiredNode<'p>, ApplyReport), EngineError> {
        self.enforce_scoped(settings, allocatable, pods, dry_run, None)
    }

    /// [`NodeEngine::enforce`] writing only the cgroups in `scope` (the ones that just
    /// appeared); the whole node is still computed, since that costs microseconds.
    pub fn enforce_scoped<'p>(
        &mut self,
        settings: &PolicySettings,
        allocatable: Option<i64>,
        pods: &'p [NodePod],
        dry_run: bool,
        scope: Option<&std::collections::BTreeSet<String>>,
    ) -> Result<(DesiredNode<'p>, ApplyReport), EngineError> {
        self.enforce_in(settings, allocatable, pods, dry_run, PassScope::from(scope))
    }

    /// [`NodeEngine::enforce`] for the pods with these UIDs (and the node-level cgroups
    /// whose sums they change): a pod event plans, reads and writes that pod and its
    /// parents only.
    pub fn enforce_pods<'p>(
        &mut self,
        settings: &PolicySettings,
        allocatable: Option<i64>,
        pods: &'p [NodePod],
        uids: &std::collections::BTreeSet<String>,
    ) -> Result<(DesiredNode<'p>, ApplyReport), EngineError> {
        self.enforce_in(settings, allocatable, pods, false, PassScope::Pods(uids))
    }

    fn enforce_in<'p>(
        &mut self,
        settings: &PolicySettings,
        allocatable: Option<i64>,
        pods: &'p [NodePod],
        dry_run: bool,
        scope: PassScope<'_>,
    ) -> Result<(DesiredNode<'p>, ApplyReport), EngineError> {
        check_node_can_satisfy(settings, &self.discovery)?;
        let d = &self.discovery;
        let facts = NodeFacts {
            memory: NodeMemoryFacts {
                allocatable_memory: allocatable,
                page_size: d.page_size,
                kernel_version: Some(d.kernel_version.clone()),
            },
            cgroup_driver: d.cgroup_driver,
            topology: d.topology.clone(),
            topology_scope: self.scope,
        };
        let static_policy = settings.memory_manager.policy == MemoryManagerPolicy::Static;
        let saved = if static_policy {
            self.load_memory_manager(settings, &facts)?
        } else {
            None
        };
        let desired = desired_node(NodeInput {
            settings,
            facts: &facts,
            pods,
            memory_manager: saved,
        })
        .map_err(|NodeError::ReservedMemory(problems)| EngineError {
            category: Category::Unsatisfiable,
            problems: problems
                .iter()
                .map(|p| format!("this node cannot satisfy it: {p}"))
                .collect(),
        })?;
        let kubelet = nodemem_cgroup::discover::kubelet_settings(
            &self.kubelet_config,
            self.kubelet_config_dir.as_deref(),
        )
        .map_err(|e| EngineError::one(Category::Discovery, e.to_string()))?;
        self.conflict = kubelet_conflict(&kubelet, settings);
        let leave_alone = self.conflict.as_ref().map_or(&[][..], |c| c.files);
        let now = self.started.elapsed();
        let pod_scope;
        let scope = match scope {
            PassScope::All => None,
            PassScope::Paths(p) => Some(p),
            PassScope::Pods(uids) => {
                let driver = desired.cgroup_driver;
                let mut paths: std::collections::BTreeSet<String> = [
                    nodemem_model::cgroup_layout::kubepods(driver),
                    nodemem_model::cgroup_layout::qos_dir(
                        driver,
                        nodemem_model::qos::QosClass::Burstable,
                    ),
                    nodemem_model::cgroup_layout::qos_dir(
                        driver,
                        nodemem_model::qos::QosClass::BestEffort,
                    ),
                ]
                .into_iter()
                .map(str::to_string)
                .collect();
                for p in desired.pods.iter().filter(|p| uids.contains(p.uid)) {
                    paths.insert(p.path.clone());
                    paths.extend(p.containers.iter().filter_map(|c| c.path.clone()));
                }
                pod_scope = paths;
                Some(&pod_scope)
            }
        };
        let report = apply_scoped(
            &self.fs,
            &desired.cgroups(),
            &mut self.owned,
            ApplyOptions {
                dry_run,
                page_size: d.page_size,
                leave_alone,
            },
            Some((&mut self.backoff, now)),
            scope,
        );
        if !dry_run {
            self.save_state(&desired, static_policy)?;
        }
        release_free_memory();
        Ok((desired, report))
    }

    fn save_state(
        &self,
        desired: &DesiredNode<'_>,
        static_policy: bool,
    ) -> Result<(), EngineError> {
        let err = |e: nodemem_agent::StateError| EngineError::one(Category::State, e.to_string());
        self.state
            .save(OWNERSHIP_FILE, OWNERSHIP_KIND, &self.owned)
            .map_err(err)?;
        match (&desired.memory_manager, static_policy) {
            (Some(manager), _) => numa_state::save(&self.state, manager).map_err(err),
            (None, false) => numa_state::clear(&self.state).map_err(err),
            (None, true) => Ok(()),
        }
    }

    /// The saved Memory Manager state, checked against this node's topology and the
    /// settings' reservedMemory. A mismatch stops the pass: nothing is written.
    fn load_memory_manager(
        &self,
        settings: &PolicySettings,
        facts: &NodeFacts,
    ) -> Result<Option<MemoryManager>, EngineError> {
        let Some(topology) = &facts.topology else {
            return Ok(None);
        };
        // A reservedMemory that does not fit is reported by the node computation.
        let Ok(fresh) = MachineState::new(topology, &settings.memory_manager.reserved_memory)
        else {
            return Ok(None);
        };
        numa_state::load(&self.state, &fresh, facts.topology_scope)
            .map_err(|e| EngineError::one(Category::State, e.to_string()))
    }
}

/// What a pass writes.
enum PassScope<'s> {
    All,
    Paths(&'s std::collections::BTreeSet<String>),
    Pods(&'s std::collections::BTreeSet<String>),
}

impl<'s> From<Option<&'s std::collections::BTreeSet<String>>> for PassScope<'s> {
    fn from(s: Option<&'s std::collections::BTreeSet<String>>) -> Self {
        s.map_or(PassScope::All, PassScope::Paths)
    }
}

/// Gives memory freed by a pass back to the kernel: the agent idles for minutes
/// between passes, and an idle agent should be small (mimalloc otherwise keeps its
/// free pages for reuse).
fn release_free_memory() {
    // SAFETY: mi_collect only walks mimalloc's own free lists.
    unsafe { libmimalloc_sys::mi_collect(true) };
}

/// Settings this node cannot carry out.
fn check_node_can_satisfy(settings: &PolicySettings, d: &Discovery) -> Result<(), EngineError> {
    let mut problems = Vec::new();
    if settings.memory_qos.enabled && !d.has_controller("memory") {
        problems.push("the memory controller is not available at kubepods (cgroup.controllers); Memory QoS cannot be applied".to_string());
    }
    if settings.memory_manager.policy == MemoryManagerPolicy::Static {
        if !d.has_controller("cpuset") {
            problems.push("the Static memoryManager policy needs the cpuset controller at kubepods (cgroup.controllers), which this node does not offer".to_string());
        }
        if d.topology.is_none() {
            problems.push("the Static memoryManager policy needs NUMA nodes in sysfs (devices/system/node), and this node shows none".to_string());
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(EngineError {
            category: Category::Unsatisfiable,
            problems,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemem_cgroup::discover::KubeletSettings;

    #[test]
    fn only_what_both_enforce_is_left_to_the_kubelet() {
        let mut kubelet = KubeletSettings {
            memory_qos: true,
            static_memory_manager: false,
            sources: vec!["/var/lib/kubelet/config.yaml".into()],
        };
        let mut settings = PolicySettings::default();
        let c = kubelet_conflict(&kubelet, &settings).unwrap();
        assert_eq!((c.reason, c.files), ("KubeletMemoryQoS", MEMORY_QOS_FILES));
        assert!(c.message.starts_with("the kubelet enforces this itself (featureGates.MemoryQoS: true in /var/lib/kubelet/config.yaml); nodemem leaves memory.min, memory.low, memory.high to it"), "{}", c.message);
        settings.memory_qos.enabled = false;
        assert_eq!(
            kubelet_conflict(&kubelet, &settings),
            None,
            "nodemem does not do Memory QoS here"
        );
        kubelet.static_memory_manager = true;
        settings.memory_manager.policy = MemoryManagerPolicy::Static;
        assert_eq!(
            kubelet_conflict(&kubelet, &settings).unwrap().files,
            MEMORY_MANAGER_FILES
        );
        settings.memory_qos.enabled = true;
        assert_eq!(
            kubelet_conflict(&kubelet, &settings).unwrap().files,
            ALL_FILES
        );
        settings.enforcement = nodemem_model::policy::Enforcement::Kubelet;
        assert_eq!(
            kubelet_conflict(&kubelet, &settings),
            None,
            "the kubelet is meant to enforce"
        );
    }
}
