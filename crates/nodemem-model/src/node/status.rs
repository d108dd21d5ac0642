//! What the rules read of a Node's status: its memory figures, its kubelet's version
//! (which decides the rules and what a drop-in may name) and its architecture (how its
//! kubelet rounds memory.high). nodemem-api reads it from a core/v1 Node.

use crate::kubelet::version::KubeletVersion;
use crate::values::factor::KubeletFloat;

/// A Node's status as the rules read it (what it does not report stays None).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatusFacts {
    /// `status.allocatable.memory` in bytes.
    #[serde(rename = "allocatable")]
    pub allocatable_memory: Option<i64>,
    /// `status.capacity.memory` in bytes.
    #[serde(default, rename = "capacity", skip_serializing_if = "Option::is_none")]
    pub capacity_memory: Option<i64>,
    /// `status.nodeInfo.kubeletVersion` as reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_version: Option<String>,
    /// `status.nodeInfo.architecture` as reported (Go's GOARCH: how its kubelet rounds
    /// memory.high, `KubeletFloat`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
}

impl NodeStatusFacts {
    /// How the node's kubelet rounds memory.high, by its architecture.
    pub fn kubelet_float(&self) -> KubeletFloat {
        KubeletFloat::of_architecture(self.architecture.as_deref())
    }

    /// The kubelet version, when it is one (`vMAJOR.MINOR.PATCH`).
    pub fn kubelet_version(&self) -> Option<KubeletVersion> {
        self.kubelet_version
            .as_deref()
            .and_then(|v| KubeletVersion::parse(v).ok())
    }
}
