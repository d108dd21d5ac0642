//! Whether a node's kubelet writes Memory QoS values of its own, from its version and
//! what its configuration names: the rule behind the agent's `KubeletConflict`.
//!
//! From the kubelet's code (`kuberuntime_container_linux.go`,
//! `qos_container_manager_linux.go`, `pod_container_manager_linux.go`, v1.36.3 and
//! v1.37.2):
//!
//! * With the `MemoryQoS` gate off the kubelet writes no protection or throttling. (A
//!   v1.37 kubelet still resets: memory.min/low of kubepods and memory.low of the
//!   burstable cgroup to 0 when it starts, memory.high of a container to `max` when
//!   it creates or resizes it.)
//! * With the gate on it writes memory.high when `memoryThrottlingFactor` is set (0.9
//!   by default before v1.37, unset by default from v1.37), memory.min/low from the
//!   requests under `memoryReservationPolicy: TieredReservation`, and before v1.36
//!   memory.min for every container with a request (no reservation policy existed).
//! * A v1.37 kubelet whose gate is merely on (its default: no factor, policy None)
//!   writes no values: it sets a container's memory.min and memory.low to 0 when it
//!   creates or resizes it, and kubepods' when it starts, which nodemem repairs. That
//!   is not a conflict; the first kind is.

use std::fmt;

use crate::kubelet::defaults::KubeletDefaults;
use crate::kubelet::version::{KubeletVersion, MEMORY_QOS_ON_BY_DEFAULT};

/// The first kubelet with `memoryReservationPolicy`.
const RESERVATION_POLICY: KubeletVersion = KubeletVersion::v1(36);

/// A field of the kubelet's configuration after its drop-ins: not named, named as
/// `null` (a drop-in's merge patch removes it: the field is defaulted again), or
/// named with a value.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Named<T> {
    /// Not named: the kubelet's default holds.
    #[default]
    Absent,
    /// Named as `null`: defaulted again.
    Null,
    /// Named with a value.
    Value(T),
}

impl<T> Named<T> {
    /// A later drop-in over this one: what it names wins, what it leaves out stays.
    pub fn overlaid_by(self, later: Named<T>) -> Named<T> {
        match later {
            Named::Absent => self,
            named => named,
        }
    }

    /// The value, when one is named.
    pub fn value(&self) -> Option<&T> {
        match self {
            Named::Value(v) => Some(v),
            _ => None,
        }
    }
}

/// The Memory QoS fields of a kubelet's configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KubeletQosConfig {
    /// `featureGates.MemoryQoS`; None when not named.
    pub gate: Option<bool>,
    /// `memoryThrottlingFactor`.
    pub throttling_factor: Named<f64>,
    /// `memoryReservationPolicy`, when named.
    pub reservation_policy: Option<String>,
}

/// What the kubelet writes of its own.
#[derive(Clone, Debug, PartialEq)]
pub struct KubeletQosWrites {
    /// memory.high, from this factor.
    pub memory_high: Option<f64>,
    /// memory.min (Guaranteed) and memory.low (Burstable) from the requests.
    pub tiered_protection: bool,
    /// memory.min for every container with a request (the gate before v1.36).
    pub protection_for_all: bool,
}

impl KubeletQosWrites {
    /// The kubelet of `version` (the newest when not known) configured as `config`;
    /// None when it writes no values (gate off, or on with nothing to write).
    pub fn of(version: Option<KubeletVersion>, config: &KubeletQosConfig) -> Option<Self> {
        let version = version.unwrap_or(MEMORY_QOS_ON_BY_DEFAULT);
        let defaults = KubeletDefaults::of(version);
        if !config.gate.unwrap_or(defaults.memory_qos_gate) {
            return None;
        }
        // A null is removed by the merge patch and the field defaulted again.
        let memory_high = match &config.throttling_factor {
            Named::Value(f) => Some(*f),
            Named::Null | Named::Absent => defaults.memory_throttling_factor,
        };
        let writes = KubeletQosWrites {
            memory_high,
            tiered_protection: version >= RESERVATION_POLICY
                && config.reservation_policy.as_deref() == Some("TieredReservation"),
            protection_for_all: version < RESERVATION_POLICY,
        };
        (writes.memory_high.is_some() || writes.tiered_protection || writes.protection_for_all)
            .then_some(writes)
    }
}

impl fmt::Display for KubeletQosWrites {
    /// What it writes, in its configuration's words.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(factor) = self.memory_high {
            parts.push(format!("memory.high (memoryThrottlingFactor {factor})"));
        }
        if self.tiered_protection {
            parts.push(
                "memory.min and memory.low (memoryReservationPolicy TieredReservation)".to_string(),
            );
        }
        if self.protection_for_all {
            parts.push(
                "memory.min for every container with a request (its MemoryQoS gate)".to_string(),
            );
        }
        write!(f, "{}", parts.join(" and "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> Option<KubeletVersion> {
        Some(KubeletVersion::parse(text).unwrap())
    }

    fn config(gate: Option<bool>, factor: Named<f64>, policy: Option<&str>) -> KubeletQosConfig {
        KubeletQosConfig {
            gate,
            throttling_factor: factor,
            reservation_policy: policy.map(str::to_string),
        }
    }

    #[test]
    fn a_v1_37_kubelet_at_its_defaults_writes_no_values() {
        let defaults = KubeletQosConfig::default();
        assert_eq!(KubeletQosWrites::of(v("v1.37.2"), &defaults), None);
        // Its gate named on changes nothing: no factor, no reservation.
        let gate_on = config(Some(true), Named::Absent, Some("None"));
        assert_eq!(KubeletQosWrites::of(v("v1.37.2"), &gate_on), None);
        // A version not known is taken as the newest.
        assert_eq!(KubeletQosWrites::of(None, &defaults), None);
    }

    #[test]
    fn a_v1_37_kubelet_with_a_factor_or_tiered_reservation_writes_values() {
        let factor = config(None, Named::Value(0.9), None);
        let w = KubeletQosWrites::of(v("v1.37.2"), &factor).unwrap();
        assert_eq!(w.memory_high, Some(0.9));
        assert!(!w.tiered_protection);
        assert_eq!(w.to_string(), "memory.high (memoryThrottlingFactor 0.9)");

        let tiered = config(None, Named::Absent, Some("TieredReservation"));
        let w = KubeletQosWrites::of(v("v1.37.2"), &tiered).unwrap();
        assert_eq!((w.memory_high, w.tiered_protection), (None, true));

        // The gate turned off wins over both.
        let off = config(Some(false), Named::Value(0.9), Some("TieredReservation"));
        assert_eq!(KubeletQosWrites::of(v("v1.37.2"), &off), None);
    }

    #[test]
    fn before_v1_37_the_gate_must_be_named_and_then_the_factor_defaults_to_0_9() {
        assert_eq!(
            KubeletQosWrites::of(v("v1.36.3"), &KubeletQosConfig::default()),
            None,
            "the gate is off by default"
        );
        let gate_on = config(Some(true), Named::Absent, None);
        let w = KubeletQosWrites::of(v("v1.36.3"), &gate_on).unwrap();
        assert_eq!(w.memory_high, Some(0.9));
        // A null factor is removed by the merge and defaulted again: 0.9 before v1.37.
        let null = config(Some(true), Named::Null, None);
        let w = KubeletQosWrites::of(v("v1.36.3"), &null).unwrap();
        assert_eq!(w.memory_high, Some(0.9));
        let null_on_v137 = config(Some(true), Named::Null, None);
        assert_eq!(KubeletQosWrites::of(v("v1.37.2"), &null_on_v137), None);
        // Before v1.36 the gate reserves memory.min for every request.
        let w = KubeletQosWrites::of(v("v1.35.4"), &config(Some(true), Named::Null, None)).unwrap();
        assert!(w.protection_for_all && !w.tiered_protection);
    }

    #[test]
    fn a_later_drop_in_overlays_only_what_it_names() {
        let base = Named::Value(0.8);
        assert_eq!(base.clone().overlaid_by(Named::Absent), Named::Value(0.8));
        assert_eq!(base.clone().overlaid_by(Named::Null), Named::Null);
        assert_eq!(base.overlaid_by(Named::Value(0.7)), Named::Value(0.7));
    }
}
