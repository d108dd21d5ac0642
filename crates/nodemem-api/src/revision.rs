//! A policy revision: a short stable hash of the settings that reach nodes. Selector,
//! priority and rollout parameters are excluded, so tuning a rollout does not start a
//! new one.

use serde::Serialize;

use crate::policy::{
    Enforcement, MemoryManagerSpec, MemoryQosSpec, NodeMemoryPolicySpec, NodeReservedSpec,
};

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EffectiveSettings<'a> {
    #[serde(rename = "memoryQoS")]
    memory_qos: &'a MemoryQosSpec,
    memory_manager: &'a MemoryManagerSpec,
    node_reserved: &'a Option<NodeReservedSpec>,
    enforcement: &'a Enforcement,
}

/// 64-bit FNV-1a over the canonical JSON of the effective settings, as 16 hex digits.
/// FNV is fixed forever (unlike `DefaultHasher`), so revisions survive upgrades.
pub fn revision(spec: &NodeMemoryPolicySpec) -> String {
    let effective = EffectiveSettings {
        memory_qos: &spec.memory_qos,
        memory_manager: &spec.memory_manager,
        node_reserved: &spec.node_reserved,
        enforcement: &spec.enforcement,
    };
    // Struct fields serialize in declaration order and maps are BTreeMaps: canonical.
    let json = serde_json::to_vec(&effective).expect("settings always serialize");
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in json {
        hash ^= byte as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::ReservationPolicy;

    #[test]
    fn revision_tracks_node_settings_only() {
        let base = NodeMemoryPolicySpec::default();
        let r0 = revision(&base);
        assert_eq!(r0.len(), 16);
        assert_eq!(r0, revision(&base.clone()), "stable");

        let mut rollout_only = base.clone();
        rollout_only.rollout.paused = true;
        rollout_only.priority = 7;
        assert_eq!(revision(&rollout_only), r0);

        let mut tiered = base.clone();
        tiered.memory_qos.reservation_policy = ReservationPolicy::TieredReservation;
        assert_ne!(revision(&tiered), r0);
        let mut factor = base;
        factor.memory_qos.throttling_factor = 0.8;
        assert_ne!(revision(&factor), r0);
    }
}
