//! The Memory Manager state as versioned JSON (like the kubelet's
//! `/var/lib/kubelet/memory_manager_state`), and the check that a restored state still
//! fits the configuration: a state that no longer matches is reported, never applied.

use serde::{Deserialize, Serialize};

use super::machine::MachineState;
use super::manager::{MemoryManager, REUSED};

/// The format of the Memory Manager's record nodemem writes.
pub const STATE_VERSION: u32 = 1;

/// The Memory Manager's record in the agent's state directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryManagerState {
    /// Its format, [`STATE_VERSION`].
    pub version: u32,
    /// `Static`, as the kubelet names it in its own file.
    pub policy_name: String,
    /// The state.
    pub manager: MemoryManager,
}

impl MemoryManagerState {
    /// The record of `manager`.
    pub fn capture(manager: &MemoryManager) -> Self {
        MemoryManagerState {
            version: STATE_VERSION,
            policy_name: "Static".into(),
            manager: manager.clone(),
        }
    }

    /// Restores a saved state against the machine the current configuration yields
    /// (`fresh`, with no assignments). Every mismatch is reported.
    pub fn restore(self, fresh: &MachineState) -> Result<MemoryManager, Vec<String>> {
        let mut problems = Vec::new();
        if self.version != STATE_VERSION {
            problems.push(format!(
                "state version {} is not the supported version {STATE_VERSION}",
                self.version
            ));
        }
        if self.policy_name != "Static" {
            problems.push(format!(
                "state was written by policy {:?}, configuration says Static",
                self.policy_name
            ));
        }
        let saved = &self.manager.machine;
        for id in fresh.nodes.keys() {
            if !saved.nodes.contains_key(id) {
                problems.push(format!("NUMA node {id} is not in the saved state"));
            }
        }
        for (id, node) in &saved.nodes {
            let Some(now) = fresh.nodes.get(id) else {
                problems.push(format!(
                    "NUMA node {id} in the saved state no longer exists"
                ));
                continue;
            };
            for (kind, t) in &node.memory_map {
                match now.memory_map.get(kind) {
                    None => problems.push(format!(
                        "NUMA node {id}: memory type {kind} no longer exists"
                    )),
                    Some(n) if n.total != t.total => problems.push(format!(
                        "NUMA node {id} {kind}: total changed from {} to {}",
                        t.total, n.total
                    )),
                    Some(n) if n.system_reserved != t.system_reserved => problems.push(format!(
                        "NUMA node {id} {kind}: reserved memory changed from {} to {}",
                        t.system_reserved, n.system_reserved
                    )),
                    Some(_) => {}
                }
            }
        }
        // The node map must account for exactly what the assignments hold.
        let mut held = std::collections::BTreeMap::new();
        for containers in self.manager.assignments.values() {
            for blocks in containers.values() {
                for b in blocks {
                    for (id, size) in &b.per_node {
                        if *id != REUSED {
                            *held.entry((*id, b.kind.clone())).or_insert(0i64) += size;
                        }
                    }
                }
            }
        }
        for (id, node) in &saved.nodes {
            for (kind, t) in &node.memory_map {
                let h = held.get(&(*id, kind.clone())).copied().unwrap_or(0);
                if h != t.reserved {
                    problems.push(format!(
                        "NUMA node {id} {kind}: {} reserved but assignments hold {h}",
                        t.reserved
                    ));
                }
            }
        }
        problems.extend(saved.invariant_violations());
        if problems.is_empty() {
            Ok(self.manager)
        } else {
            Err(problems)
        }
    }
}
