//! What the engine keeps in the node's state directory: the record of what nodemem owns
//! and the Memory Manager's record, each beside the copy last saved, so that a pass that
//! changed nothing writes nothing, and a record found unusable is set aside and
//! re-derived rather than stopping the agent.

use nodemem_model::cluster::policy::ReservedMemory;
use nodemem_model::node::NodeFacts;
use nodemem_model::numa::{MachineState, MemoryManager};
use nodemem_model::settings::NodeSettings;

use super::recovery::unix_seconds;
use super::{ApplyError, Recovery, RecoveryAction};
use crate::numa_state;
use crate::plan::Ownership;
use crate::state::{StateDir, StateError};

const OWNERSHIP_FILE: &str = "ownership.json";
const OWNERSHIP_KIND: &str = "ownership";

/// What nodemem owns (each file it set and what the file held before), as held in
/// memory and as last saved.
pub(super) struct OwnershipRecord {
    pub(super) owned: Ownership,
    saved: Ownership,
    /// The record was lost at start: the first whole-node pass claims what the settings
    /// manage.
    pub(super) rederive: bool,
}

impl OwnershipRecord {
    /// The saved record; an unusable one is set aside (the agent must not keep a node
    /// unenforced over a torn file) and noted in `recoveries`. An I/O error stops.
    pub(super) fn load(
        state: &StateDir,
        recoveries: &mut Vec<Recovery>,
    ) -> Result<Self, ApplyError> {
        let owned: Ownership = match state.load(OWNERSHIP_FILE, OWNERSHIP_KIND) {
            Ok(owned) => owned.unwrap_or_default(),
            Err(e) if e.is_unusable() => {
                let set_aside = state
                    .set_aside(OWNERSHIP_FILE, unix_seconds())
                    .map_err(ApplyError::State)?;
                let recovery = Recovery {
                    record: state.path(OWNERSHIP_FILE).display().to_string(),
                    problem: e.to_string(),
                    action: RecoveryAction::OwnershipRederived {
                        set_aside: set_aside.display().to_string(),
                    },
                };
                tracing::warn!(%recovery, "state record unusable");
                recoveries.push(recovery);
                return Ok(OwnershipRecord {
                    owned: Ownership::default(),
                    saved: Ownership::default(),
                    rederive: true,
                });
            }
            Err(e) => return Err(ApplyError::State(e)),
        };
        Ok(OwnershipRecord {
            saved: owned.clone(),
            owned,
            rederive: false,
        })
    }

    /// Saves the record when it changed (each save is an fsync).
    pub(super) fn save(&mut self, state: &StateDir) -> Result<(), StateError> {
        save_owned(state, &mut self.saved, &self.owned)
    }

    /// The record's two halves for one pass: what it owns, to change, and a save of a
    /// given ownership against the copy last saved.
    pub(super) fn split(
        &mut self,
    ) -> (
        &mut Ownership,
        impl FnMut(&StateDir, &Ownership) -> Result<(), StateError> + '_,
    ) {
        let saved = &mut self.saved;
        (&mut self.owned, move |state, owned| {
            save_owned(state, saved, owned)
        })
    }

    /// On a whole-node pass: the file still holds what the agent last wrote; if it was
    /// damaged or removed while the agent ran, it is written again from memory, and the
    /// recovery returned.
    pub(super) fn check(&self, state: &StateDir) -> Result<Option<Recovery>, ApplyError> {
        let problem = match state.load::<Ownership>(OWNERSHIP_FILE, OWNERSHIP_KIND) {
            Ok(Some(o)) if o == self.saved => return Ok(None),
            Ok(None) if self.saved.is_empty() => return Ok(None),
            Ok(Some(_)) => "does not hold what the agent last wrote".to_string(),
            Ok(None) => "was removed".to_string(),
            Err(e) if e.is_unusable() => e.to_string(),
            Err(e) => return Err(ApplyError::State(e)),
        };
        state
            .save(OWNERSHIP_FILE, OWNERSHIP_KIND, &self.saved)
            .map_err(ApplyError::State)?;
        let record = state.path(OWNERSHIP_FILE).display().to_string();
        let problem = if problem.starts_with(&record) {
            problem
        } else {
            format!("{record}: {problem}")
        };
        Ok(Some(Recovery {
            record,
            problem,
            action: RecoveryAction::Rewritten,
        }))
    }
}

/// Saves `owned` when it differs from `saved`, the copy on disk.
fn save_owned(
    state: &StateDir,
    saved: &mut Ownership,
    owned: &Ownership,
) -> Result<(), StateError> {
    if owned != saved {
        state.save(OWNERSHIP_FILE, OWNERSHIP_KIND, owned)?;
        *saved = owned.clone();
    }
    Ok(())
}

/// The Memory Manager as the last pass left it with the reservedMemory it was built
/// for (the state file is read once, then kept in memory), and as last saved.
#[derive(Default)]
pub(super) struct ManagerRecord {
    current: Option<(Vec<ReservedMemory>, MemoryManager)>,
    saved: Option<MemoryManager>,
}

impl ManagerRecord {
    /// The Memory Manager to compute with: the one the last pass left when the
    /// reservedMemory is the same, otherwise the saved state, checked against this
    /// node's topology and the settings' reservedMemory (a mismatch stops the pass:
    /// nothing is written). An unusable file is set aside and noted in `recoveries`.
    pub(super) fn load(
        &mut self,
        state: &StateDir,
        facts: &NodeFacts,
        settings: &NodeSettings,
        recoveries: &mut Vec<Recovery>,
    ) -> Result<Option<MemoryManager>, ApplyError> {
        let reserved = &settings.memory_manager.reserved_memory;
        if let Some((for_reserved, m)) = &self.current {
            if for_reserved == reserved {
                return Ok(Some(m.clone()));
            }
        }
        let Some(topology) = &facts.topology else {
            return Ok(None);
        };
        // A reservedMemory that does not fit is reported by the node computation.
        let Ok(fresh) = MachineState::new(topology, reserved) else {
            return Ok(None);
        };
        let loaded = match numa_state::load(state, &fresh, facts.topology_scope) {
            Ok(loaded) => loaded,
            Err(numa_state::NumaStateError::State(e)) if e.is_unusable() => {
                let file = numa_state::NUMA_STATE_FILE;
                let set_aside = state
                    .set_aside(file, unix_seconds())
                    .map_err(ApplyError::State)?;
                let recovery = Recovery {
                    record: state.path(file).display().to_string(),
                    problem: e.to_string(),
                    action: RecoveryAction::MemoryManagerRederived {
                        set_aside: set_aside.display().to_string(),
                    },
                };
                tracing::warn!(%recovery, "state record unusable");
                recoveries.push(recovery);
                None
            }
            Err(e) => return Err(ApplyError::MemoryManagerState(e)),
        };
        self.saved = loaded.clone();
        Ok(loaded)
    }

    /// The Memory Manager a pass left, kept for the next.
    pub(super) fn keep(&mut self, settings: &NodeSettings, manager: Option<&MemoryManager>) {
        self.current = manager
            .cloned()
            .map(|m| (settings.memory_manager.reserved_memory.clone(), m));
    }

    /// Saves the Memory Manager when it changed; with no manager the file is removed
    /// unless the policy is Static (whose manager a failed computation did not give).
    pub(super) fn save(
        &mut self,
        state: &StateDir,
        manager: Option<&MemoryManager>,
        static_policy: bool,
    ) -> Result<(), StateError> {
        if manager != self.saved.as_ref() {
            match (manager, static_policy) {
                (Some(manager), _) => numa_state::save(state, manager)?,
                (None, false) => numa_state::clear(state)?,
                (None, true) => {}
            }
            self.saved = manager.cloned();
        }
        Ok(())
    }
}
