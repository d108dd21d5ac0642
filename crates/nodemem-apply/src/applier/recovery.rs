//! A state record the applier could not trust, and what it did instead of stopping.

use std::fmt;

/// A state record the applier could not trust, and what it did instead of stopping
/// (reported as the `StateRecovered` condition and a Warning Event).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// The record's path.
    pub record: String,
    /// What was wrong with it.
    pub problem: String,
    /// What was done instead of stopping.
    pub action: RecoveryAction,
}

/// What the agent did with a record it could not trust.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecoveryAction {
    /// Found at start: set aside, and what nodemem owns re-derived from the current
    /// settings (each file's value before nodemem taken as the kernel's default).
    OwnershipRederived {
        /// Where the record was moved.
        set_aside: String,
    },
    /// Found at start: set aside, and the Memory Manager's assignments re-derived by
    /// admitting the node's pods again in their admission order.
    MemoryManagerRederived {
        /// Where the record was moved.
        set_aside: String,
    },
    /// Found while running: written again from what the agent holds in memory.
    Rewritten,
    /// The last known config and pods, found at start: not used; read from the
    /// apiserver instead and the record written again.
    LastKnownReadAgain,
}

impl Recovery {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self.action {
            RecoveryAction::OwnershipRederived { .. }
            | RecoveryAction::MemoryManagerRederived { .. } => "StateRederived",
            RecoveryAction::Rewritten | RecoveryAction::LastKnownReadAgain => "StateRewritten",
        }
    }
}

impl fmt::Display for Recovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.action {
            RecoveryAction::OwnershipRederived { set_aside } => write!(
                f,
                "{}; set aside as {set_aside}; what nodemem owns is re-derived from the current settings (each file's value before nodemem is taken as the kernel's default: memory.min and memory.low 0, memory.high max, cpuset.mems the parent's; files only an earlier config set are not known)",
                self.problem
            ),
            RecoveryAction::MemoryManagerRederived { set_aside } => write!(
                f,
                "{}; set aside as {set_aside}; the Memory Manager's NUMA assignments are re-derived by admitting the node's pods again in their admission order",
                self.problem
            ),
            RecoveryAction::Rewritten => write!(
                f,
                "{}; written again from what the agent holds",
                self.problem
            ),
            RecoveryAction::LastKnownReadAgain => write!(
                f,
                "{}; not used: the config and pods are read from the apiserver and the record written again",
                self.problem
            ),
        }
    }
}

pub(crate) fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
