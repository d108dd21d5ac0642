//! What to leave to the kubelet under `enforcement: Agent`: the files its own Memory
//! QoS or Memory Manager writes, from its settings and version.

use nodemem_model::cluster::policy::MemoryManagerPolicy;

use nodemem_model::kubelet::version::KubeletVersion;
use nodemem_model::kubelet::writes::KubeletQosWrites;
use nodemem_model::settings::NodeSettings;

use super::KubeletSettings;

/// The node's kubelet enforces some of what nodemem would write; under
/// `enforcement: Agent` nodemem leaves those files to it rather than fight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletConflict {
    /// The condition reason (`KubeletMemoryQoS`, `KubeletMemoryManager`, both).
    pub reason: &'static str,
    /// What the kubelet enforces, from which files, and what to do.
    pub message: String,
    /// The files nodemem leaves to the kubelet.
    pub files: &'static [&'static str],
}

const MEMORY_QOS_FILES: &[&str] = &["memory.min", "memory.low", "memory.high"];

const MEMORY_MANAGER_FILES: &[&str] = &["cpuset.mems"];

const ALL_FILES: &[&str] = &["memory.min", "memory.low", "memory.high", "cpuset.mems"];

/// What to leave to the kubelet, from its settings, its version (the newest when not
/// known) and what nodemem is asked to do. The kubelet's Memory QoS counts only when
/// it writes values of its own (`KubeletQosWrites`): a v1.37 kubelet whose gate is
/// merely on (its default) writes none and is not a conflict.
pub fn kubelet_conflict(
    kubelet: &KubeletSettings,
    version: Option<KubeletVersion>,
    settings: &NodeSettings,
) -> Option<KubeletConflict> {
    if settings.enforcement != nodemem_model::cluster::policy::Enforcement::Agent {
        return None;
    }
    let qos = KubeletQosWrites::of(version, &kubelet.qos).filter(|_| settings.memory_qos.enabled);
    let mm = kubelet.static_memory_manager()
        && settings.memory_manager.policy == MemoryManagerPolicy::Static;
    let sources = kubelet.origin.sources();
    let writes = |w: &KubeletQosWrites| format!("it writes {w}");
    let (reason, what, files) = match (&qos, mm) {
        (None, false) => return None,
        (Some(w), false) => ("KubeletMemoryQoS", writes(w), MEMORY_QOS_FILES),
        (None, true) => (
            "KubeletMemoryManager",
            "memoryManagerPolicy: Static".to_string(),
            MEMORY_MANAGER_FILES,
        ),
        (Some(w), true) => (
            "KubeletMemoryQoSAndMemoryManager",
            format!("{} and memoryManagerPolicy: Static", writes(w)),
            ALL_FILES,
        ),
    };
    let version = version.map_or_else(|| "of unknown version".to_string(), |v| v.to_string());
    Some(KubeletConflict {
        reason,
        message: format!(
            "the kubelet ({version}) enforces this itself ({what}; {}); nodemem leaves {} to it: turn it off in the kubelet or use enforcement: Kubelet",
            sources.join(", "),
            files.join(", ")
        ),
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_both_enforce_is_left_to_the_kubelet() {
        let v136 = KubeletVersion::parse("v1.36.3").ok();
        let mut kubelet = KubeletSettings {
            origin: crate::kubelet::KubeletOrigin {
                config: Some("/var/lib/kubelet/config.yaml".into()),
                ..Default::default()
            },
            ..KubeletSettings::default()
        };
        kubelet.qos.gate = Some(true);
        let mut settings = NodeSettings::default();
        let c = kubelet_conflict(&kubelet, v136, &settings).unwrap();
        assert_eq!((c.reason, c.files), ("KubeletMemoryQoS", MEMORY_QOS_FILES));
        assert!(c.message.starts_with("the kubelet (v1.36.3) enforces this itself (it writes memory.high (memoryThrottlingFactor 0.9); /var/lib/kubelet/config.yaml); nodemem leaves memory.min, memory.low, memory.high to it"), "{}", c.message);
        settings.memory_qos.enabled = false;
        assert_eq!(
            kubelet_conflict(&kubelet, v136, &settings),
            None,
            "nodemem does not do Memory QoS here"
        );
        kubelet.memory_manager_policy = Some("Static".into());
        settings.memory_manager.policy = MemoryManagerPolicy::Static;
        assert_eq!(
            kubelet_conflict(&kubelet, v136, &settings).unwrap().files,
            MEMORY_MANAGER_FILES
        );
        settings.memory_qos.enabled = true;
        assert_eq!(
            kubelet_conflict(&kubelet, v136, &settings).unwrap().files,
            ALL_FILES
        );
        settings.enforcement = nodemem_model::cluster::policy::Enforcement::Kubelet;
        assert_eq!(
            kubelet_conflict(&kubelet, v136, &settings),
            None,
            "the kubelet is meant to enforce"
        );
    }

    /// v1.37: the gate is on by default; only a kubelet that writes values (a factor,
    /// or TieredReservation) is a conflict, and the message says what it writes.
    #[test]
    fn a_v1_37_kubelet_conflicts_only_when_it_writes_values() {
        use nodemem_model::kubelet::writes::Named;
        let v137 = KubeletVersion::parse("v1.37.2").ok();
        let settings = NodeSettings::default();
        let mut kubelet = KubeletSettings {
            origin: crate::kubelet::KubeletOrigin {
                config: Some("/var/lib/kubelet/config.yaml".into()),
                ..Default::default()
            },
            ..KubeletSettings::default()
        };
        assert_eq!(
            kubelet_conflict(&kubelet, v137, &settings),
            None,
            "defaults"
        );
        kubelet.qos.gate = Some(true);
        kubelet.qos.reservation_policy = Some("None".into());
        assert_eq!(
            kubelet_conflict(&kubelet, v137, &settings),
            None,
            "gate merely on"
        );
        kubelet.qos.reservation_policy = Some("TieredReservation".into());
        let c = kubelet_conflict(&kubelet, v137, &settings).unwrap();
        assert_eq!(c.reason, "KubeletMemoryQoS");
        assert!(
            c.message.contains(
                "it writes memory.min and memory.low (memoryReservationPolicy TieredReservation)"
            ),
            "{}",
            c.message
        );
        kubelet.qos.reservation_policy = None;
        kubelet.qos.throttling_factor = Named::Value(0.9);
        assert!(kubelet_conflict(&kubelet, v137, &settings).is_some());
        // The same configuration on a v1.36 kubelet without the gate named: off.
        kubelet.qos.gate = None;
        let v136 = KubeletVersion::parse("v1.36.3").ok();
        assert_eq!(kubelet_conflict(&kubelet, v136, &settings), None);
    }
}
