//! What the kubelet runs with when its configuration does not name a field nodemem
//! reads, per kubelet minor version, each with the kubelet file and function it comes
//! from (read in the `k8s.io/kubernetes` module of each version: v1.35.4, v1.36.3,
//! v1.37.2, v1.38.0-beta.0). The rest of nodemem asks this table; `tests` pins every cell per version.
//!
//! Where a default applies matters as much as its value: `evictionHard`'s is applied by
//! `loadConfigFile` (`cmd/kubelet/app/server.go`) to the `--config` file only, so a
//! kubelet started with flags only, or with `--config-dir` only, has no memory
//! threshold at all; and `mergeDefaultEvictionSettings: true` fills the keys a file's
//! `evictionHard` leaves out.

use super::version::KubeletVersion;

/// The kubelet's defaults for the fields nodemem reads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KubeletDefaults {
    /// `featureGates.MemoryQoS` (`pkg/features/kube_features.go`,
    /// `defaultVersionedKubernetesFeatureGates`: alpha and off from v1.22, beta and on
    /// from v1.37).
    pub memory_qos_gate: bool,
    /// `memoryThrottlingFactor` (`pkg/kubelet/apis/config/v1beta1/defaults.go`,
    /// `SetDefaults_KubeletConfiguration`: `DefaultMemoryThrottlingFactor = 0.9` up to
    /// v1.36; from v1.37 the field is optional and not defaulted: no memory.high).
    pub memory_throttling_factor: Option<f64>,
    /// `memoryReservationPolicy` (the same function: `DefaultMemoryReservationPolicy`,
    /// `None`, from v1.36); None where the field does not exist (v1.35).
    pub memory_reservation_policy: Option<&'static str>,
    /// `memoryManagerPolicy` (the same function: `NoneMemoryManagerPolicy`).
    pub memory_manager_policy: &'static str,
    /// `cgroupDriver` (the same function: `cgroupfs`).
    pub cgroup_driver: &'static str,
    /// `mergeDefaultEvictionSettings` (the same function: false).
    pub merge_default_eviction_settings: bool,
    /// `evictionHard` of a `--config` file that names none, and the keys
    /// `mergeDefaultEvictionSettings` fills in (`pkg/kubelet/eviction/defaults_linux.go`
    /// `DefaultEvictionHard`, applied by `cmd/kubelet/app/server.go` `loadConfigFile`).
    /// A kubelet without a `--config` file gets none of them.
    pub eviction_hard_with_config_file: &'static [(&'static str, &'static str)],
    /// `kubeReserved` and `systemReserved` (no defaulting: nothing reserved).
    pub kube_and_system_reserved_memory: Option<&'static str>,
}

/// The Linux `DefaultEvictionHard`, the same in v1.35.4, v1.36.3, v1.37.2 and
/// v1.38.0-beta.0.
pub const DEFAULT_EVICTION_HARD: &[(&str, &str)] = &[
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
    ("imagefs.available", "15%"),
    ("imagefs.inodesFree", "5%"),
];

/// The first kubelet with `memoryReservationPolicy`.
const RESERVATION_POLICY_FIELD: KubeletVersion = KubeletVersion::v1(36);
/// The first kubelet whose Memory QoS is beta: gate on, factor not defaulted.
const MEMORY_QOS_BETA: KubeletVersion = KubeletVersion::v1(37);

impl KubeletDefaults {
    /// The defaults of a kubelet of `version`.
    pub fn of(version: KubeletVersion) -> KubeletDefaults {
        let beta = version >= MEMORY_QOS_BETA;
        KubeletDefaults {
            memory_qos_gate: beta,
            memory_throttling_factor: (!beta).then_some(0.9),
            memory_reservation_policy: (version >= RESERVATION_POLICY_FIELD).then_some("None"),
            memory_manager_policy: "None",
            cgroup_driver: "cgroupfs",
            merge_default_eviction_settings: false,
            eviction_hard_with_config_file: DEFAULT_EVICTION_HARD,
            kube_and_system_reserved_memory: None,
        }
    }

    /// `memory.available` of `evictionHard` for a kubelet that loaded a `--config` file
    /// naming no `evictionHard`; without a `--config` file there is none.
    pub fn memory_available(&self, config_file: bool) -> Option<&'static str> {
        config_file
            .then(|| {
                self.eviction_hard_with_config_file
                    .iter()
                    .find(|(k, _)| *k == "memory.available")
                    .map(|(_, v)| *v)
            })
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(version: &str) -> KubeletDefaults {
        KubeletDefaults::of(KubeletVersion::parse(version).unwrap())
    }

    /// v1.35.4: Memory QoS alpha (gate off), factor 0.9, no reservation policy field.
    #[test]
    fn v1_35_defaults() {
        let d = of("v1.35.4");
        assert!(!d.memory_qos_gate);
        assert_eq!(d.memory_throttling_factor, Some(0.9));
        assert_eq!(d.memory_reservation_policy, None);
        assert_eq!(d.memory_manager_policy, "None");
        assert_eq!(d.cgroup_driver, "cgroupfs");
        assert!(!d.merge_default_eviction_settings);
        assert_eq!(d.memory_available(true), Some("100Mi"));
        assert_eq!(
            d.memory_available(false),
            None,
            "flags or --config-dir only"
        );
        assert_eq!(d.kube_and_system_reserved_memory, None);
    }

    /// v1.36.3: still alpha and 0.9; `memoryReservationPolicy` appears, `None`.
    #[test]
    fn v1_36_defaults() {
        let d = of("v1.36.3");
        assert!(!d.memory_qos_gate);
        assert_eq!(d.memory_throttling_factor, Some(0.9));
        assert_eq!(d.memory_reservation_policy, Some("None"));
        assert_eq!(d.memory_manager_policy, "None");
        assert_eq!(d.cgroup_driver, "cgroupfs");
        assert!(!d.merge_default_eviction_settings);
        assert_eq!(d.memory_available(true), Some("100Mi"));
        assert_eq!(d.memory_available(false), None);
        assert_eq!(d.kube_and_system_reserved_memory, None);
    }

    /// v1.37.2: beta, the gate on, the factor not defaulted (no memory.high).
    #[test]
    fn v1_37_defaults() {
        let d = of("v1.37.2");
        assert!(d.memory_qos_gate);
        assert_eq!(d.memory_throttling_factor, None);
        assert_eq!(d.memory_reservation_policy, Some("None"));
        assert_eq!(d.memory_manager_policy, "None");
        assert_eq!(d.cgroup_driver, "cgroupfs");
        assert!(!d.merge_default_eviction_settings);
        assert_eq!(d.memory_available(true), Some("100Mi"));
        assert_eq!(d.memory_available(false), None);
        assert_eq!(d.kube_and_system_reserved_memory, None);
    }

    /// v1.38.0-beta.0: v1.37's, read again in its own module
    /// (`pkg/features/kube_features.go`: MemoryQoS beta and on from 1.37;
    /// `pkg/kubelet/apis/config/v1beta1/defaults.go`: no factor default, reservation
    /// policy `None`, memory manager `None`, cgroupfs, no merge of eviction defaults;
    /// `pkg/kubelet/eviction/defaults_linux.go` and `cmd/kubelet/app/server.go`
    /// `loadConfigFile` unchanged).
    #[test]
    fn v1_38_defaults() {
        let d = of("v1.38.0-beta.0");
        assert!(d.memory_qos_gate);
        assert_eq!(d.memory_throttling_factor, None);
        assert_eq!(d.memory_reservation_policy, Some("None"));
        assert_eq!(d.memory_manager_policy, "None");
        assert_eq!(d.cgroup_driver, "cgroupfs");
        assert!(!d.merge_default_eviction_settings);
        assert_eq!(d.memory_available(true), Some("100Mi"));
        assert_eq!(d.memory_available(false), None);
        assert_eq!(d.kube_and_system_reserved_memory, None);
    }

    /// A patch release has its minor's defaults; a later minor keeps v1.38's until
    /// its own code is read.
    #[test]
    fn a_patch_release_has_its_minors_defaults() {
        assert_eq!(of("v1.35.0"), of("v1.35.4"));
        assert_eq!(of("v1.36.0"), of("v1.36.3"));
        assert_eq!(of("v1.37.0"), of("v1.37.2"));
    }
}
