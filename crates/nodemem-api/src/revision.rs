//! A policy revision: a short stable hash of the settings that reach nodes. Selector,
//! priority and rollout parameters are excluded, so tuning a rollout does not start a
//! new one.

use serde::Serialize;

use crate::policy::{
    Enforcement, MemoryManagerSpec, MemoryQosSpec, NodeReservedSpec, NodeSettings, ReclaimSpec,
    WorkloadClassSpec,
};

/// The hashed document. Its own type (not `NodeSettings` itself) so the hash input
/// stays fixed when `NodeSettings` gains serde attributes: a changed hash would start
/// a rollout on every pool after an upgrade.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Hashed<'a> {
    #[serde(rename = "memoryQoS")]
    memory_qos: &'a MemoryQosSpec,
    memory_manager: &'a MemoryManagerSpec,
    node_reserved: &'a Option<NodeReservedSpec>,
    enforcement: &'a Enforcement,
    /// Left out when absent: a policy without reclaim keeps the revision it had
    /// before reclaim existed.
    #[serde(skip_serializing_if = "Option::is_none")]
    reclaim: &'a Option<ReclaimSpec>,
    /// Left out when empty: a policy without classes keeps the revision it had
    /// before classes existed.
    #[serde(skip_serializing_if = "<[WorkloadClassSpec]>::is_empty")]
    classes: &'a [WorkloadClassSpec],
}

/// 64-bit FNV-1a over the canonical JSON of the settings, as 16 hex digits. FNV is
/// fixed forever (unlike `DefaultHasher`), so revisions survive upgrades.
pub fn revision(settings: &NodeSettings) -> String {
    let hashed = Hashed {
        memory_qos: &settings.memory_qos,
        memory_manager: &settings.memory_manager,
        node_reserved: &settings.node_reserved,
        enforcement: &settings.enforcement,
        reclaim: &settings.reclaim,
        classes: &settings.classes,
    };
    // Struct fields serialize in declaration order and maps are BTreeMaps: canonical.
    let json = serde_json::to_vec(&hashed).expect("settings always serialize");
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
    use crate::policy::{NodeMemoryPolicySpec, ReservationPolicy};

    #[test]
    fn a_class_is_part_of_the_revision_and_no_class_keeps_the_old_one() {
        use crate::policy::{ClassProtection, WorkloadClassSpec};
        let base = NodeMemoryPolicySpec::default();
        let r0 = revision(&base.settings);
        let mut classed = base.clone();
        classed.settings.classes = vec![WorkloadClassSpec {
            name: "batch".into(),
            throttling_factor: Some(0.5),
            ..WorkloadClassSpec::default()
        }];
        let r1 = revision(&classed.settings);
        assert_ne!(r1, r0);
        classed.settings.classes[0].throttling_factor = Some(0.6);
        let r2 = revision(&classed.settings);
        assert_ne!(r2, r1, "a class's factor changed is a new revision");
        classed.settings.classes[0].protection = Some(ClassProtection::None);
        assert_ne!(revision(&classed.settings), r2);
        classed.settings.classes.clear();
        assert_eq!(revision(&classed.settings), r0);
    }

    #[test]
    fn revision_tracks_node_settings_only() {
        let base = NodeMemoryPolicySpec::default();
        let r0 = revision(&base.settings);
        assert_eq!(r0.len(), 16);
        assert_eq!(r0, revision(&base.clone().settings), "stable");
        // Pinned: a change of the hash or of the settings' serialization would start a
        // rollout on every cluster after an upgrade.
        assert_eq!(r0, "f46c4865d690dda5");

        let mut rollout_only = base.clone();
        rollout_only.rollout.paused = true;
        rollout_only.priority = 7;
        assert_eq!(revision(&rollout_only.settings), r0);

        let mut tiered = base.clone();
        tiered.settings.memory_qos.reservation_policy = ReservationPolicy::TieredReservation;
        assert_ne!(revision(&tiered.settings), r0);
        let mut factor = base.clone();
        factor.settings.memory_qos.throttling_factor = 0.8;
        assert_ne!(revision(&factor.settings), r0);

        // Reclaim is a setting that reaches nodes: each change of it is a revision
        // (found: it was not hashed, and a policy turning it on rolled nothing out).
        let mut observing = base.clone();
        observing.settings.reclaim = Some(ReclaimSpec::default());
        let r1 = revision(&observing.settings);
        assert_ne!(r1, r0);
        observing.settings.reclaim.as_mut().unwrap().mode = crate::policy::ReclaimModeSpec::Active;
        assert_ne!(revision(&observing.settings), r1);
        observing
            .settings
            .reclaim
            .as_mut()
            .unwrap()
            .interval_seconds = 2;
        assert_ne!(revision(&observing.settings), r1);
    }
}
