//! What the controller decided to do now: the NodeMemoryConfigs to write or delete,
//! the drains, the policy statuses and Events. Written by [`crate::decide`] and
//! `policy_status`, carried out by [`mod@crate::run`].

use nodemem_api::{NodeMemoryConfigSpec, NodeMemoryPolicyStatus};

/// A NodeMemoryConfig spec to write (server-side apply; the config is owned by the
/// policy).
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigWrite {
    pub node: String,
    pub policy_uid: Option<String>,
    pub spec: NodeMemoryConfigSpec,
}

/// Drain `node` for `revision` (a Kubelet-mode Memory Manager change).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainOrder {
    pub node: String,
    pub revision: String,
    /// The drain counts as failed after this many seconds (progressDeadlineSeconds).
    pub deadline_seconds: u64,
}

/// A rollout step worth an Event on the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyEvent {
    pub policy: String,
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    pub writes: Vec<ConfigWrite>,
    pub deletes: Vec<String>,
    /// Nodes to cordon and drain (Eviction API) before their config changes, for this
    /// revision, within this many seconds.
    pub drains: Vec<DrainOrder>,
    /// Nodes the controller cordoned that it gives back to the scheduler.
    pub uncordons: Vec<String>,
    /// Only statuses that differ from what the policy shows.
    pub statuses: Vec<(String, NodeMemoryPolicyStatus)>,
    pub events: Vec<PolicyEvent>,
    /// Policies that get [`nodemem_api::HANDOFF_FINALIZER`] (`hold`) or lose it (a
    /// deleted policy whose nodes have all left).
    pub finalizers: Vec<FinalizerOrder>,
    /// Rollback requests that are spent (the spec moved on from the revision they name):
    /// the annotation is removed, so a later spec equal to that revision is a new
    /// decision (policy, the revision the annotation names).
    pub spent_rollback_requests: Vec<(String, String)>,
}

/// Add or remove the handoff finalizer on a policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinalizerOrder {
    pub policy: String,
    pub hold: bool,
}
