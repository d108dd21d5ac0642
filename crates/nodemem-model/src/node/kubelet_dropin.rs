//! `enforcement: Kubelet`: the KubeletConfiguration drop-in (for the kubelet's
//! `--config-dir`) that asks the node's kubelet to do what the settings say, rendered
//! only with fields the node's kubelet version understands, and refused with a typed
//! reason when that version cannot express the settings. (A kubelet does not refuse a
//! field it does not know in a drop-in: it decodes drop-ins leniently and drops it, as
//! the v1.36.3 and v1.37.2 kubelets do in the apiserver tier's validation test, so a
//! setting it cannot express would be lost without a word; hence the refusal.)
//!
//! Which kubelet does what (from the kubelet's code; see the seeds):
//! - v1.22 added the `MemoryQoS` feature gate and `memoryThrottlingFactor`; v1.22 also
//!   made the Memory Manager beta (gate on by default), so `memoryManagerPolicy` and
//!   `reservedMemory` work from v1.22 without a gate.
//! - Before v1.36 the `MemoryQoS` gate sets memory.min for every container with a memory
//!   request (the KEP's HardReservation), with no way to turn reservation off.
//! - v1.36 added `memoryReservationPolicy`, accepting `None` and `TieredReservation` only
//!   (verified against the v1.36.3 kubelet's validation), so `HardReservation` cannot be
//!   rendered on any version (admission refuses it with `enforcement: Kubelet`).

use std::fmt::Write;

use crate::cluster::policy::{
    sum_rule_problem, MemoryManagerPolicy, MemoryManagerSettings, NodeReserved,
    DEFAULT_EVICTION_HARD_MEMORY,
};

use crate::kubelet::version::{KubeletVersion, MEMORY_QOS_ON_BY_DEFAULT};
use crate::quantity::{format_bytes, Quantity};
use crate::settings::NodeSettings;
use crate::values::memory_qos::ReservationPolicy;

/// The drop-in's file name: `.conf` (the kubelet reads nothing else), and a name that
/// sorts after the names sites give their drop-ins, so that its fields win (the kubelet
/// applies its drop-ins in name order, by bytes, each over the ones before): `~` comes
/// after every digit, letter and other printable ASCII character but itself, so only a
/// name that starts with `~` followed by a later byte, or with a byte beyond ASCII,
/// sorts after it. Until 2026-11-30 it was `99-nodemem.conf`, which `zz-site.conf` or
/// `kubelet-site.conf` overrode (issue 58); a drop-in that does override nodemem's is
/// named either way (`KubeletDropInOverridden`).
pub const DROPIN_FILE: &str = "~nodemem.conf";

/// The names nodemem's drop-in had before [`DROPIN_FILE`]. Such a file is still
/// nodemem's own: never one of the kubelet's drop-ins when nodemem asks what the
/// kubelet runs without its own, moved to [`DROPIN_FILE`] where no other drop-in sorts
/// between the two names (the kubelet then runs the same fields: no restart), and
/// removed once [`DROPIN_FILE`] is written.
pub const LEGACY_DROPIN_FILES: &[&str] = &["99-nodemem.conf"];

/// The first kubelet with the MemoryQoS gate, memoryThrottlingFactor and a beta Memory
/// Manager.
pub const OLDEST_KUBELET: KubeletVersion = KubeletVersion::v1(22);
/// The first kubelet with memoryReservationPolicy.
pub const RESERVATION_POLICY_KUBELET: KubeletVersion = KubeletVersion::v1(36);

/// Why settings are not rendered for a node's kubelet.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KubeletRefusal {
    /// The Node's kubelet version cannot be read.
    #[error("the node reports kubelet version {0:?}, which is not vMAJOR.MINOR.PATCH; nodemem cannot tell which fields that kubelet accepts, so nothing is rendered")]
    UnknownVersion(String),
    /// Older than the first kubelet with the MemoryQoS gate.
    #[error("kubelet {0} is older than {OLDEST_KUBELET}, the first with the MemoryQoS gate and the beta Memory Manager; upgrade the kubelet or use enforcement: Agent")]
    TooOld(KubeletVersion),
    /// The kubelet cannot express the reservation policy.
    #[error("kubelet {0} cannot express memoryQoS with reservationPolicy {1:?}: before {RESERVATION_POLICY_KUBELET} its MemoryQoS gate sets memory.min for every container with a memory request and has no memoryReservationPolicy; upgrade the kubelet to {RESERVATION_POLICY_KUBELET} or later, or use enforcement: Agent")]
    NoReservationPolicy(KubeletVersion, ReservationPolicy),
    /// No kubelet takes `memoryReservationPolicy: HardReservation`.
    #[error("kubelet {0} cannot express memoryQoS with reservationPolicy HardReservation: from {RESERVATION_POLICY_KUBELET} its memoryReservationPolicy takes None or TieredReservation only (before {RESERVATION_POLICY_KUBELET} the MemoryQoS gate is HardReservation); use enforcement: Agent")]
    HardReservation(KubeletVersion),
    /// The kubelet cannot leave memory.high unset.
    #[error("kubelet {0} cannot leave memory.high unset (memoryHigh: None): before {MEMORY_QOS_ON_BY_DEFAULT} an unset memoryThrottlingFactor means 0.9; upgrade the kubelet to {MEMORY_QOS_ON_BY_DEFAULT} or later, set a throttlingFactor, or use enforcement: Agent")]
    NoUnsetFactor(KubeletVersion),
    /// reservedMemory breaks the kubelet's sum rule.
    #[error("the kubelet would refuse to start: {0}")]
    SumRule(String),
}

impl KubeletRefusal {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            KubeletRefusal::UnknownVersion(_) => "KubeletVersionUnknown",
            KubeletRefusal::TooOld(_) => "KubeletTooOld",
            KubeletRefusal::NoReservationPolicy(..)
            | KubeletRefusal::HardReservation(_)
            | KubeletRefusal::NoUnsetFactor(_) => "KubeletCannotExpress",
            KubeletRefusal::SumRule(_) => "ReservedMemorySumRule",
        }
    }
}

/// What the kubelet's own configuration (its file and the other drop-ins) reserves,
/// for the KEP-1769 sum rule when the settings name no `nodeReserved`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KubeletReserved {
    /// `kubeReserved` memory.
    pub kube_reserved: Option<Quantity>,
    /// `systemReserved` memory.
    pub system_reserved: Option<Quantity>,
    /// The `memory.available` hard eviction threshold in bytes; None when it is a
    /// percentage (the sum rule is then left to the kubelet).
    pub eviction_hard: Option<Quantity>,
}

impl Default for KubeletReserved {
    fn default() -> Self {
        KubeletReserved {
            kube_reserved: None,
            system_reserved: None,
            eviction_hard: Some(Quantity::from_units(DEFAULT_EVICTION_HARD_MEMORY)),
        }
    }
}

/// A rendered drop-in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DropIn {
    /// The file's contents.
    pub text: String,
    /// The Memory Manager the kubelet runs with once it reads the drop-in: when this
    /// changes, its `memory_manager_state` must go before it restarts.
    pub memory_manager: MemoryManagerSettings,
}

/// Who the drop-in is for, named in its header.
#[derive(Clone, Copy, Debug)]
pub struct DropInOwner<'a> {
    /// The node's name.
    pub node: &'a str,
    /// The revision the drop-in carries.
    pub revision: &'a str,
}

/// Renders `settings` for a kubelet of `version`; `kubelet_reserved` is what the
/// kubelet's own configuration reserves (used when the settings name no nodeReserved).
/// Every reason the settings cannot be rendered is returned.
pub fn render(
    settings: &NodeSettings,
    version: &str,
    kubelet_reserved: &KubeletReserved,
    owner: DropInOwner<'_>,
) -> Result<DropIn, Vec<KubeletRefusal>> {
    let version =
        KubeletVersion::parse(version).map_err(|e| vec![KubeletRefusal::UnknownVersion(e.0)])?;
    if version < OLDEST_KUBELET {
        return Err(vec![KubeletRefusal::TooOld(version)]);
    }
    let mut refusals = Vec::new();
    let qos = &settings.memory_qos;
    if qos.enabled {
        // Before v1.36 the MemoryQoS gate has one behaviour, HardReservation's (memory.min
        // for every memory request, v1.35.4 kuberuntime_container_linux.go 158-160) and
        // no field to choose another; from v1.36 the field takes None or
        // TieredReservation only.
        let no_policy_field = version < RESERVATION_POLICY_KUBELET;
        match qos.reservation_policy {
            ReservationPolicy::HardReservation if no_policy_field => {}
            ReservationPolicy::HardReservation => {
                refusals.push(KubeletRefusal::HardReservation(version))
            }
            other if no_policy_field => {
                refusals.push(KubeletRefusal::NoReservationPolicy(version, other))
            }
            _ => {}
        }
        if qos.throttling_factor.is_none() && version < MEMORY_QOS_ON_BY_DEFAULT {
            refusals.push(KubeletRefusal::NoUnsetFactor(version));
        }
    }
    let mm = &settings.memory_manager;
    if mm.policy == MemoryManagerPolicy::Static {
        let reserved = settings.node_reserved.clone().unwrap_or(NodeReserved {
            kube_reserved: kubelet_reserved.kube_reserved,
            system_reserved: kubelet_reserved.system_reserved,
            eviction_hard: kubelet_reserved.eviction_hard,
        });
        let eviction_known =
            settings.node_reserved.is_some() || kubelet_reserved.eviction_hard.is_some();
        if eviction_known {
            if let Some(problem) = sum_rule_problem(mm, &reserved) {
                refusals.push(KubeletRefusal::SumRule(problem));
            }
        }
    }
    if !refusals.is_empty() {
        return Err(refusals);
    }
    Ok(DropIn {
        text: render_text(settings, version, owner),
        memory_manager: mm.clone(),
    })
}

/// The YAML, written by hand so that it is stable byte for byte (an unchanged drop-in
/// is never rewritten, and a rewrite means a kubelet restart). The version is named in
/// the header: a kubelet upgrade that changes what may be rendered rewrites the file.
fn render_text(settings: &NodeSettings, version: KubeletVersion, owner: DropInOwner<'_>) -> String {
    let mut y = String::new();
    let _ = writeln!(
        y,
        "# Written by the nodemem agent for NodeMemoryConfig {:?} revision {} (kubelet {version}).",
        owner.node, owner.revision
    );
    y.push_str("# Do not edit: the agent rewrites it. It goes away when the node's policy leaves enforcement: Kubelet.\n");
    y.push_str("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n");
    let qos = &settings.memory_qos;
    let _ = writeln!(y, "featureGates:\n  MemoryQoS: {}", qos.enabled);
    if qos.enabled {
        match qos.throttling_factor {
            Some(factor) => {
                let _ = writeln!(y, "memoryThrottlingFactor: {factor}");
            }
            // A JSON merge patch's null removes a factor the kubelet's own file may
            // set; unset is the v1.37 kubelet's default (older ones are refused above).
            None => y.push_str("memoryThrottlingFactor: null\n"),
        }
        // Before v1.36 there is no such field: the gate is HardReservation (any other
        // policy is refused above). From v1.36 HardReservation is refused above.
        if version >= RESERVATION_POLICY_KUBELET {
            let policy = match qos.reservation_policy {
                ReservationPolicy::TieredReservation => "TieredReservation",
                ReservationPolicy::None | ReservationPolicy::HardReservation => "None",
            };
            let _ = writeln!(y, "memoryReservationPolicy: {policy}");
        }
    }
    let mm = &settings.memory_manager;
    match mm.policy {
        MemoryManagerPolicy::None => y.push_str("memoryManagerPolicy: None\n"),
        MemoryManagerPolicy::Static => {
            y.push_str("memoryManagerPolicy: Static\nreservedMemory:\n");
            let mut entries: Vec<_> = mm.reserved_memory.iter().collect();
            entries.sort_by_key(|r| r.numa_node);
            for r in entries {
                let _ = writeln!(y, "- numaNode: {}\n  limits:", r.numa_node);
                for (name, q) in &r.limits {
                    let _ = writeln!(y, "    {name}: \"{}\"", quantity(*q));
                }
            }
        }
    }
    if let Some(reserved) = &settings.node_reserved {
        if let Some(q) = reserved.kube_reserved {
            let _ = writeln!(y, "kubeReserved:\n  memory: \"{}\"", quantity(q));
        }
        if let Some(q) = reserved.system_reserved {
            let _ = writeln!(y, "systemReserved:\n  memory: \"{}\"", quantity(q));
        }
        if let Some(q) = reserved.eviction_hard {
            // The map is merged with the kubelet's own; note that a kubelet whose own
            // configuration sets no evictionHard keeps only what the maps name.
            let _ = writeln!(y, "evictionHard:\n  memory.available: \"{}\"", quantity(q));
        }
    }
    y
}

/// A quantity as the kubelet reads it: binary suffix when exact, else plain bytes.
fn quantity(q: Quantity) -> String {
    let bytes = q.value();
    let text = format_bytes(bytes);
    if text.contains('.') {
        bytes.to_string()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::policy::ReservedMemory;
    use crate::values::factor::ThrottlingFactor;

    const OWNER: DropInOwner<'static> = DropInOwner {
        node: "n1",
        revision: "abc",
    };

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    fn tiered() -> NodeSettings {
        let mut s = NodeSettings {
            enforcement: crate::cluster::policy::Enforcement::Kubelet,
            ..NodeSettings::default()
        };
        s.memory_qos.reservation_policy = ReservationPolicy::TieredReservation;
        s.memory_qos.throttling_factor = Some(ThrottlingFactor::from_f64(0.8).unwrap());
        s
    }

    fn static_numa(s: &mut NodeSettings) {
        s.memory_manager.policy = MemoryManagerPolicy::Static;
        s.memory_manager.reserved_memory = vec![
            ReservedMemory {
                numa_node: 1,
                limits: [("memory".to_string(), q("1Gi"))].into(),
            },
            ReservedMemory {
                numa_node: 0,
                limits: [
                    ("memory".to_string(), q("1124Mi")),
                    ("hugepages-2Mi".to_string(), q("4Mi")),
                ]
                .into(),
            },
        ];
        s.node_reserved = Some(NodeReserved {
            kube_reserved: Some(q("1Gi")),
            system_reserved: Some(q("1Gi")),
            eviction_hard: Some(q("100Mi")),
        });
    }

    /// A v1.38 kubelet refuses to start on a gate it removed: the drop-in nodemem
    /// writes names only MemoryQoS, for every version, Memory QoS on and off.
    #[test]
    fn no_version_is_given_a_gate_it_removed() {
        for version in ["v1.35.4", "v1.36.3", "v1.37.2", "v1.38.0-beta.0", "v1.38.0"] {
            for enabled in [true, false] {
                let mut s = tiered();
                s.memory_qos.enabled = enabled;
                if version.starts_with("v1.35") {
                    // What v1.35 can express: its gate is HardReservation.
                    s.memory_qos.reservation_policy = ReservationPolicy::HardReservation;
                }
                let d = render(&s, version, &KubeletReserved::default(), OWNER).unwrap();
                let gates: Vec<&str> = d
                    .text
                    .split("featureGates:\n")
                    .nth(1)
                    .unwrap()
                    .lines()
                    .take_while(|l| l.starts_with("  "))
                    .map(|l| l.trim().split(':').next().unwrap())
                    .collect();
                assert_eq!(gates, ["MemoryQoS"], "{version}: {}", d.text);
                let removed = crate::kubelet::gates::removed_among(gates.iter().copied());
                assert!(removed.is_empty(), "{version}: {removed:?}");
            }
        }
    }

    #[test]
    fn renders_every_field_in_a_stable_order() {
        let mut s = tiered();
        static_numa(&mut s);
        let d = render(&s, "v1.36.3", &KubeletReserved::default(), OWNER).unwrap();
        assert_eq!(
            d.text,
            "# Written by the nodemem agent for NodeMemoryConfig \"n1\" revision abc (kubelet v1.36.3).\n\
             # Do not edit: the agent rewrites it. It goes away when the node's policy leaves enforcement: Kubelet.\n\
             apiVersion: kubelet.config.k8s.io/v1beta1\n\
             kind: KubeletConfiguration\n\
             featureGates:\n  MemoryQoS: true\n\
             memoryThrottlingFactor: 0.8\n\
             memoryReservationPolicy: TieredReservation\n\
             memoryManagerPolicy: Static\n\
             reservedMemory:\n\
             - numaNode: 0\n  limits:\n    hugepages-2Mi: \"4Mi\"\n    memory: \"1124Mi\"\n\
             - numaNode: 1\n  limits:\n    memory: \"1Gi\"\n\
             kubeReserved:\n  memory: \"1Gi\"\n\
             systemReserved:\n  memory: \"1Gi\"\n\
             evictionHard:\n  memory.available: \"100Mi\"\n"
        );
        assert_eq!(d.memory_manager, s.memory_manager);
        assert_eq!(
            render(&s, "v1.36.3", &KubeletReserved::default(), OWNER)
                .unwrap()
                .text,
            d.text,
            "same input, same bytes"
        );
    }

    #[test]
    fn memory_qos_off_turns_the_gate_off_and_names_no_qos_field() {
        let mut s = tiered();
        s.memory_qos.enabled = false;
        let d = render(&s, "v1.30.0", &KubeletReserved::default(), OWNER).unwrap();
        assert!(
            d.text.contains("featureGates:\n  MemoryQoS: false\n"),
            "{}",
            d.text
        );
        assert!(!d.text.contains("memoryThrottlingFactor"));
        assert!(
            !d.text.contains("memoryReservationPolicy"),
            "a v1.30 kubelet would drop it without a word"
        );
        assert!(d.text.ends_with("memoryManagerPolicy: None\n"));
    }

    #[test]
    fn what_a_kubelet_version_cannot_express_is_refused_with_the_reason() {
        let s = tiered();
        let refused = render(&s, "v1.35.2", &KubeletReserved::default(), OWNER).unwrap_err();
        assert_eq!(
            refused,
            vec![KubeletRefusal::NoReservationPolicy(
                KubeletVersion::parse("v1.35.2").unwrap(),
                ReservationPolicy::TieredReservation
            )]
        );
        assert_eq!(refused[0].reason(), "KubeletCannotExpress");
        assert!(refused[0].to_string().starts_with("kubelet v1.35.2 cannot express memoryQoS with reservationPolicy TieredReservation: before v1.36.0"));
        // Even None cannot be said before v1.36: the gate alone reserves memory.min.
        let mut none = tiered();
        none.memory_qos.reservation_policy = ReservationPolicy::None;
        assert!(render(&none, "v1.35.9", &KubeletReserved::default(), OWNER).is_err());
        assert!(render(&none, "v1.36.0-rc.1", &KubeletReserved::default(), OWNER).is_ok());
        assert!(render(&none, "v1.37.1", &KubeletReserved::default(), OWNER).is_ok());

        let mut hard = tiered();
        hard.memory_qos.reservation_policy = ReservationPolicy::HardReservation;
        assert_eq!(
            render(&hard, "v1.36.3", &KubeletReserved::default(), OWNER),
            Err(vec![KubeletRefusal::HardReservation(
                KubeletVersion::parse("v1.36.3").unwrap()
            )])
        );
        // Before v1.36 the gate is HardReservation: rendered, without the field the
        // kubelet does not have.
        let v135 = render(&hard, "v1.35.4", &KubeletReserved::default(), OWNER).unwrap();
        assert!(
            v135.text.contains("featureGates:\n  MemoryQoS: true\n"),
            "{}",
            v135.text
        );
        assert!(
            !v135.text.contains("memoryReservationPolicy"),
            "{}",
            v135.text
        );

        let old = render(&s, "v1.21.14", &KubeletReserved::default(), OWNER).unwrap_err();
        assert_eq!(old[0].reason(), "KubeletTooOld");
        let garbage = render(&s, "unknown", &KubeletReserved::default(), OWNER).unwrap_err();
        assert_eq!(garbage[0].reason(), "KubeletVersionUnknown");
    }

    #[test]
    fn an_unset_factor_is_a_null_from_v1_37_and_refused_before() {
        let mut s = tiered();
        s.memory_qos.throttling_factor = None;
        let d = render(&s, "v1.37.2", &KubeletReserved::default(), OWNER).unwrap();
        assert!(
            d.text.contains(
                "\nmemoryThrottlingFactor: null\nmemoryReservationPolicy: TieredReservation\n"
            ),
            "{}",
            d.text
        );
        let refused = render(&s, "v1.36.3", &KubeletReserved::default(), OWNER).unwrap_err();
        assert_eq!(
            refused,
            vec![KubeletRefusal::NoUnsetFactor(
                KubeletVersion::parse("v1.36.3").unwrap()
            )]
        );
        assert_eq!(refused[0].reason(), "KubeletCannotExpress");
        // Off, the factor is not rendered at all: nothing to refuse.
        s.memory_qos.enabled = false;
        assert!(render(&s, "v1.36.3", &KubeletReserved::default(), OWNER).is_ok());
    }

    #[test]
    fn the_sum_rule_uses_the_kubelets_own_reservations_when_the_settings_name_none() {
        let mut s = tiered();
        static_numa(&mut s);
        s.node_reserved = None;
        // 1124Mi + 1Gi reserved; the kubelet's defaults (100Mi eviction only) differ.
        let refused = render(&s, "v1.36.3", &KubeletReserved::default(), OWNER).unwrap_err();
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].reason(), "ReservedMemorySumRule");
        assert!(
            refused[0].to_string().contains(
                "must equal kubeReserved + systemReserved + evictionHard = 0 + 0 + 100Mi"
            ),
            "{}",
            refused[0]
        );
        let kubelet = KubeletReserved {
            kube_reserved: Some(q("1Gi")),
            system_reserved: Some(q("1Gi")),
            eviction_hard: Some(q("100Mi")),
        };
        let d = render(&s, "v1.36.3", &kubelet, OWNER).unwrap();
        assert!(
            !d.text.contains("kubeReserved"),
            "the kubelet's own reservations are left as they are"
        );
        // A percentage threshold cannot be summed here: left to the kubelet.
        let percent = KubeletReserved {
            eviction_hard: None,
            ..kubelet
        };
        assert!(render(&s, "v1.36.3", &percent, OWNER).is_ok());
    }

    #[test]
    fn all_refusals_are_reported_together() {
        let mut s = tiered();
        static_numa(&mut s);
        s.node_reserved = None;
        let refused = render(&s, "v1.35.0", &KubeletReserved::default(), OWNER).unwrap_err();
        let reasons: Vec<_> = refused.iter().map(KubeletRefusal::reason).collect();
        assert_eq!(reasons, ["KubeletCannotExpress", "ReservedMemorySumRule"]);
    }
}
