//! The Memory Manager's state in the state directory (like the kubelet's
//! `memory_manager_state`), checked against the node at start. Where the kubelet
//! crash-loops on a mismatch, nodemem reports what differs and leaves the decision to
//! its caller.

use nodemem_model::numa::{MachineState, MemoryManager, MemoryManagerState, Scope};

use crate::state::{StateDir, StateError};

/// The Memory Manager's record in the state directory.
pub const NUMA_STATE_FILE: &str = "memory-manager.json";
const KIND: &str = "memory-manager";

/// Why the Memory Manager's record could not be used.
#[derive(Debug, thiserror::Error)]
pub enum NumaStateError {
    /// The record could not be read or written.
    #[error(transparent)]
    State(#[from] StateError),
    /// The record does not fit this node's topology or the settings' reservedMemory.
    #[error("{path}: the saved Memory Manager state does not match this node: {}; remove the file to admit every pod again from an empty node map", .problems.join("; "))]
    Mismatch {
        /// The record's path.
        path: String,
        /// Each mismatch.
        problems: Vec<String>,
    },
}

/// The saved state, checked against the node map the current topology and
/// reservedMemory give (`fresh`) and the scope in use; None when there is none.
pub fn load(
    state: &StateDir,
    fresh: &MachineState,
    scope: Scope,
) -> Result<Option<MemoryManager>, NumaStateError> {
    let Some(saved) = state.load::<MemoryManagerState>(NUMA_STATE_FILE, KIND)? else {
        return Ok(None);
    };
    let saved_scope = saved.manager.scope;
    let mismatch = |problems| NumaStateError::Mismatch {
        path: state.path(NUMA_STATE_FILE).display().to_string(),
        problems,
    };
    let manager = saved.restore(fresh).map_err(mismatch)?;
    if saved_scope != scope {
        return Err(mismatch(vec![format!(
            "topology manager scope changed from {saved_scope:?} to {scope:?}"
        )]));
    }
    Ok(Some(manager))
}

/// Saves the Memory Manager's record.
pub fn save(state: &StateDir, manager: &MemoryManager) -> Result<(), StateError> {
    state.save(NUMA_STATE_FILE, KIND, &MemoryManagerState::capture(manager))
}

/// Forgets the saved state (the policy is no longer Static).
pub fn clear(state: &StateDir) -> Result<(), StateError> {
    state.remove(NUMA_STATE_FILE)
}
