//! Why a pass did not apply: a bounded set of categories (a condition reason and a
//! metric label each), the error with its source kept, and what a node cannot carry out.

use nodemem_cgroup::discover::DiscoveryError;
use nodemem_model::node::NodeError;
use nodemem_model::problem::Problem;

use crate::kubelet::KubeletFileError;
use crate::numa_state::NumaStateError;
use crate::state::StateError;

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
    /// The condition reason and metric label of the category.
    pub fn reason(self) -> &'static str {
        match self {
            Category::Discovery => "NodeNotSupported",
            Category::Unsatisfiable => "CannotSatisfy",
            Category::State => "StateUnusable",
            Category::WriteFailed => "WriteFailed",
        }
    }
}

/// Why a pass did not apply, with its source kept; [`ApplyError::category`] gives the
/// condition reason and metric label.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The node could not be discovered as nodemem needs it (cgroup v2, kubepods).
    #[error("discovery: {0}")]
    Discovery(#[source] DiscoveryError),
    /// The kubelet's configuration could not be read (its eviction threshold and
    /// Memory Manager are part of the computation).
    #[error(transparent)]
    KubeletFiles(KubeletFileError),
    /// The state directory could not be read or written.
    #[error(transparent)]
    State(StateError),
    /// The record of what the pass would write could not be saved before it: the pass
    /// stopped before its first write.
    #[error("{0}; the record of what nodemem would write could not be saved first, so nothing was written (the node keeps its values)")]
    RecordNotSaved(#[source] StateError),
    /// The saved Memory Manager state does not fit the node or the settings.
    #[error(transparent)]
    MemoryManagerState(NumaStateError),
    /// Settings this node cannot carry out, each named; nothing was written.
    #[error("{}", joined(.0))]
    Unsatisfiable(Vec<Unsatisfiable>),
}

/// What the node cannot carry out of its settings.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unsatisfiable {
    /// The memory controller is not enabled at kubepods.
    #[error("the memory controller is not available at kubepods (cgroup.controllers); Memory QoS cannot be applied")]
    NoMemoryController,
    /// Static Memory Manager without the cpuset controller.
    #[error("the Static memoryManager policy needs the cpuset controller at kubepods (cgroup.controllers), which this node does not offer")]
    StaticWithoutCpuset,
    /// Static Memory Manager on a node without NUMA nodes in sysfs.
    #[error("the Static memoryManager policy needs NUMA nodes in sysfs (devices/system/node), and this node shows none")]
    StaticWithoutNuma,
    /// A reservedMemory this node's NUMA nodes cannot hold.
    #[error("this node cannot satisfy it: {0}")]
    ReservedMemory(Problem),
}

impl ApplyError {
    /// The bounded category of the error: its condition reason and metric label.
    pub fn category(&self) -> Category {
        match self {
            ApplyError::Discovery(_) | ApplyError::KubeletFiles(_) => Category::Discovery,
            ApplyError::State(_)
            | ApplyError::RecordNotSaved(_)
            | ApplyError::MemoryManagerState(_) => Category::State,
            ApplyError::Unsatisfiable(_) => Category::Unsatisfiable,
        }
    }

    /// One line per problem (the CLI prints each on its own).
    pub fn problems(&self) -> Vec<String> {
        match self {
            ApplyError::Unsatisfiable(problems) => {
                problems.iter().map(ToString::to_string).collect()
            }
            other => vec![other.to_string()],
        }
    }

    pub(crate) fn reserved_memory(NodeError::ReservedMemory(problems): NodeError) -> Self {
        ApplyError::Unsatisfiable(
            problems
                .into_iter()
                .map(Unsatisfiable::ReservedMemory)
                .collect(),
        )
    }
}

fn joined(problems: &[Unsatisfiable]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unsatisfiable_node_says_each_problem_and_its_category() {
        let e = ApplyError::Unsatisfiable(vec![
            Unsatisfiable::NoMemoryController,
            Unsatisfiable::StaticWithoutNuma,
        ]);
        assert_eq!(e.category(), Category::Unsatisfiable);
        assert_eq!(e.category().reason(), "CannotSatisfy");
        let problems = e.problems();
        assert_eq!(problems.len(), 2);
        assert!(problems[1].starts_with("the Static memoryManager policy needs NUMA nodes"));
        assert_eq!(e.to_string(), problems.join("; "));
        let state = ApplyError::MemoryManagerState(NumaStateError::State(StateError::Io {
            path: "/state/numa.json".into(),
            source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied"),
        }));
        assert_eq!(state.category(), Category::State);
        assert_eq!(state.problems(), vec![state.to_string()]);
        assert!(
            std::error::Error::source(&state).is_some(),
            "the source is kept"
        );
    }
}
