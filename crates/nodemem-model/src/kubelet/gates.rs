//! Feature gates a later kubelet no longer knows. A kubelet whose configuration or
//! flags name a gate its version does not register refuses to start ("unrecognized
//! feature gate", `k8s.io/component-base/featuregate` `Set`), so a node carrying one
//! into that version's upgrade does not come back. Read in each version's
//! `pkg/features/kube_features.go`.

use super::version::KubeletVersion;

/// A gate and the first kubelet minor version without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemovedGate {
    /// The gate's name (`featureGates`).
    pub name: &'static str,
    /// The first minor version that refuses it.
    pub removed_in: KubeletVersion,
}

/// Every removal nodemem knows of: v1.38.0-beta.0 registers neither gate that v1.37.2
/// declares (`NodeSwap` and `InPlacePodVerticalScaling`, both GA and locked on in
/// v1.37).
pub const REMOVED: &[RemovedGate] = &[
    RemovedGate {
        name: "NodeSwap",
        removed_in: KubeletVersion::v1(38),
    },
    RemovedGate {
        name: "InPlacePodVerticalScaling",
        removed_in: KubeletVersion::v1(38),
    },
];

/// The removed gates among `named` (a kubelet's gates, as its files and flags name
/// them), in [`REMOVED`]'s order.
pub fn removed_among<'a>(named: impl IntoIterator<Item = &'a str> + Clone) -> Vec<RemovedGate> {
    REMOVED
        .iter()
        .filter(|g| named.clone().into_iter().any(|n| n == g.name))
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gates_v1_38_removed_are_found_among_those_named() {
        let named = ["MemoryQoS", "InPlacePodVerticalScaling", "NodeSwap"];
        let found: Vec<&str> = removed_among(named).iter().map(|g| g.name).collect();
        assert_eq!(found, ["NodeSwap", "InPlacePodVerticalScaling"]);
        assert!(removed_among(["MemoryQoS", "NodeSwapX"]).is_empty());
        assert!(REMOVED
            .iter()
            .all(|g| g.removed_in == KubeletVersion::v1(38)));
    }
}
