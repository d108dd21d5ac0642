//! Which kubelet a node runs, and what its version changes in the rules.
//!
//! From the kubelet's code of each version (`pkg/features/kube_features.go`,
//! `pkg/kubelet/apis/config/v1beta1/defaults.go`, `pkg/kubelet/cm/helpers_linux.go`,
//! `pkg/kubelet/kuberuntime/kuberuntime_container_linux.go`):
//!
//! * v1.22 added the `MemoryQoS` gate (alpha, off) and `memoryThrottlingFactor`
//!   (default 0.9).
//! * v1.36 added `memoryReservationPolicy` (None / TieredReservation).
//! * v1.37 made `MemoryQoS` beta and **on by default**, made `memoryThrottlingFactor`
//!   default to unset (no memory.high anywhere unless an operator sets it), and set
//!   memory.high on the **pod** cgroup of a pod with pod-level resources
//!   (`ApplyPodLevelMemoryHigh`), leaving it off its containers that have no memory
//!   limit of their own when the pod has a pod-level memory limit.
//!
//! The rules nodemem computes for a node follow its kubelet's version ([`QosRules`]);
//! a node whose version is not known gets the newest rules.

use std::fmt;

/// A kubelet version as the Node reports it (`status.nodeInfo.kubeletVersion`:
/// `v1.36.3`, `v1.36.0-rc.1`, `v1.35.2+k3s1`, `v1.34.1-eks-113cf36`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubeletVersion {
    /// Always 1 today.
    pub major: u32,
    /// The minor version, which decides the rules.
    pub minor: u32,
    /// The patch version.
    pub patch: u32,
}

/// The oldest kubelet minor version in upstream support (patched upstream), against
/// whose code nodemem's rules are checked on the real node.
pub const OLDEST_SUPPORTED: KubeletVersion = KubeletVersion::v1(35);
/// The newest kubelet minor version nodemem's rules are checked against. A newer one
/// gets these rules, and a condition that says so.
pub const NEWEST_TESTED: KubeletVersion = KubeletVersion::v1(38);
/// The newest kubelet minor version the real node runs. Newer tested versions are
/// checked against the kubelet's own code as a library (`tests/kubelet-oracle`, issue
/// 60: v1.38.0-beta.0, whose kubelet binary and control plane cannot be built from the
/// modules served yet).
pub const NEWEST_ON_A_REAL_NODE: KubeletVersion = KubeletVersion::v1(37);

/// Where a kubelet stands against the versions nodemem is tested with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeletSupport {
    /// Between [`OLDEST_SUPPORTED`] and [`NEWEST_TESTED`].
    Tested,
    /// Older than [`OLDEST_SUPPORTED`]: nodemem applies the rules it has for it (the
    /// oldest it knows), unchecked.
    OlderThanSupported,
    /// Newer than [`NEWEST_TESTED`]: nodemem applies the newest rules, unchecked.
    NewerThanTested,
}

/// A version text that is not `vMAJOR.MINOR[.PATCH]` with an optional suffix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("kubelet version {0:?} is not vMAJOR.MINOR.PATCH")]
pub struct UnknownKubeletVersion(pub String);

impl KubeletVersion {
    /// Reads a Node's `kubeletVersion`; anything after the patch number is dropped.
    pub fn parse(text: &str) -> Result<Self, UnknownKubeletVersion> {
        let unknown = || UnknownKubeletVersion(text.to_string());
        let core = text.trim().strip_prefix('v').unwrap_or(text.trim());
        let core = core.split(['-', '+']).next().unwrap_or("");
        let mut parts = core.split('.').map(|p| p.parse::<u32>().ok());
        let (Some(Some(major)), Some(Some(minor)), patch, None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(unknown());
        };
        let patch = match patch {
            None => 0,
            Some(Some(p)) => p,
            Some(None) => return Err(unknown()),
        };
        Ok(KubeletVersion {
            major,
            minor,
            patch,
        })
    }

    /// v1.`minor`.0.
    pub const fn v1(minor: u32) -> Self {
        KubeletVersion {
            major: 1,
            minor,
            patch: 0,
        }
    }

    /// Whether nodemem's rules were checked against this kubelet's minor version on a
    /// real node (rather than against its code as a library only).
    pub fn on_a_real_node(self) -> bool {
        self.minor_of() <= NEWEST_ON_A_REAL_NODE
    }

    /// Whether nodemem's rules were checked against this kubelet's minor version.
    pub fn support(self) -> KubeletSupport {
        if self < OLDEST_SUPPORTED {
            KubeletSupport::OlderThanSupported
        } else if self.minor_of() > NEWEST_TESTED {
            KubeletSupport::NewerThanTested
        } else {
            KubeletSupport::Tested
        }
    }

    /// This version's minor release (`v1.37.2` -> `v1.37.0`).
    fn minor_of(self) -> Self {
        KubeletVersion { patch: 0, ..self }
    }
}

impl fmt::Display for KubeletVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The first kubelet whose `MemoryQoS` gate is on by default, whose
/// `memoryThrottlingFactor` defaults to unset, and which sets pod-level memory.high.
pub const MEMORY_QOS_ON_BY_DEFAULT: KubeletVersion = KubeletVersion::v1(37);

/// The Memory QoS rules of a kubelet line, as nodemem computes them for a node.
///
/// Both keep the two places where nodemem follows v1.37 over the v1.36 kubelet
/// (memory.high for containers with neither request nor limit, kubepods memory.low
/// under TieredReservation; `memory_qos.rs`): v1.37 made them the kubelet's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QosRules {
    /// Kubelets up to v1.36: memory.high on containers only.
    UpToV1_36,
    /// v1.37 and later: a pod with pod-level resources gets memory.high on its pod
    /// cgroup, and its containers without a memory limit get none when the pod has a
    /// pod-level memory limit.
    #[default]
    V1_37,
}

impl QosRules {
    /// The rules for a kubelet of `version`; the newest when it is not known.
    pub fn for_kubelet(version: Option<KubeletVersion>) -> Self {
        match version {
            Some(v) if v < MEMORY_QOS_ON_BY_DEFAULT => QosRules::UpToV1_36,
            _ => QosRules::V1_37,
        }
    }

    /// How the rules are named to people (explain, simulate).
    pub fn name(self) -> &'static str {
        match self {
            QosRules::UpToV1_36 => "v1.36",
            QosRules::V1_37 => "v1.37",
        }
    }

    /// Whether a pod with pod-level resources gets memory.high on its pod cgroup.
    pub fn pod_level_memory_high(self) -> bool {
        self == QosRules::V1_37
    }

    /// What the rules do that the other rules do not, in words.
    pub fn what(self) -> &'static str {
        match self {
            QosRules::V1_37 => "memory.high on the pod cgroup of a pod with pod-level resources",
            QosRules::UpToV1_36 => "memory.high on containers only",
        }
    }

    /// Which rules a node gets and why, for people (`explain`, `simulate`, `diff`): the
    /// version its kubelet reports (`reported`, as the Node's status says it) and the
    /// rules it chooses.
    pub fn applied(reported: Option<&str>) -> String {
        let version = reported.and_then(|r| KubeletVersion::parse(r).ok());
        let rules = QosRules::for_kubelet(version);
        let (name, what) = (rules.name(), rules.what());
        match (version, reported) {
            (Some(v), _) => format!("{v} ({name} rules: {what})"),
            (None, Some(text)) => {
                format!("{text:?} is not a version: the newest rules ({name}: {what})")
            }
            (None, None) => format!("not reported: the newest rules ({name}: {what})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn support_is_by_minor_version_within_the_tested_range() {
        let v = |t: &str| KubeletVersion::parse(t).unwrap().support();
        assert_eq!(v("v1.34.9"), KubeletSupport::OlderThanSupported);
        assert_eq!(v("v1.35.0"), KubeletSupport::Tested);
        assert_eq!(v("v1.35.4+k3s1"), KubeletSupport::Tested);
        assert_eq!(v("v1.37.99"), KubeletSupport::Tested);
        assert_eq!(v("v1.38.0-beta.0"), KubeletSupport::Tested);
        assert_eq!(v("v1.38.0-rc.0"), KubeletSupport::Tested);
        assert_eq!(v("v1.39.0-alpha.1"), KubeletSupport::NewerThanTested);
        assert_eq!(v("v2.0.0"), KubeletSupport::NewerThanTested);
    }

    #[test]
    fn versions_parse_as_nodes_report_them() {
        for (text, want) in [
            ("v1.36.3", (1, 36, 3)),
            ("v1.36.0-rc.1", (1, 36, 0)),
            ("v1.35.2+k3s1", (1, 35, 2)),
            ("v1.34.1-eks-113cf36", (1, 34, 1)),
            ("1.37", (1, 37, 0)),
        ] {
            let v = KubeletVersion::parse(text).unwrap();
            assert_eq!((v.major, v.minor, v.patch), want, "{text}");
        }
        for bad in ["", "v", "vx.y.z", "v1", "v1.36.3.4", "v1.x.3", "latest"] {
            assert_eq!(
                KubeletVersion::parse(bad),
                Err(UnknownKubeletVersion(bad.to_string())),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_rules_follow_the_kubelet_version_and_default_to_the_newest() {
        let v = |t: &str| Some(KubeletVersion::parse(t).unwrap());
        for (version, rules) in [
            (v("v1.30.0"), QosRules::UpToV1_36),
            (v("v1.36.3"), QosRules::UpToV1_36),
            (v("v1.37.0-rc.1"), QosRules::V1_37),
            (v("v1.37.2"), QosRules::V1_37),
            (v("v1.38.0"), QosRules::V1_37),
            (None, QosRules::V1_37),
        ] {
            assert_eq!(QosRules::for_kubelet(version), rules, "{version:?}");
        }
        assert!(QosRules::V1_37.pod_level_memory_high());
        assert!(!QosRules::UpToV1_36.pod_level_memory_high());
        assert_eq!(QosRules::UpToV1_36.name(), "v1.36");
    }

    #[test]
    fn the_rules_applied_are_named_with_the_version_that_chose_them() {
        assert_eq!(
            QosRules::applied(Some("v1.37.2")),
            "v1.37.2 (v1.37 rules: memory.high on the pod cgroup of a pod with pod-level resources)"
        );
        assert_eq!(
            QosRules::applied(Some("v1.38.0-beta.0")),
            "v1.38.0 (v1.37 rules: memory.high on the pod cgroup of a pod with pod-level resources)"
        );
        assert_eq!(
            QosRules::applied(Some("v1.36.3")),
            "v1.36.3 (v1.36 rules: memory.high on containers only)"
        );
        assert_eq!(
            QosRules::applied(Some("latest")),
            "\"latest\" is not a version: the newest rules (v1.37: memory.high on the pod cgroup of a pod with pod-level resources)"
        );
        assert!(QosRules::applied(None).starts_with("not reported: the newest rules (v1.37"));
    }
}
