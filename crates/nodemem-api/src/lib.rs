//! `nodemem.io/v1alpha1`: the `NodeMemoryPolicy` and `NodeMemoryConfig` custom
//! resources, their CRDs, and the conversion of their specs into the model's settings.

// Every public item says what it is; clippy -D warnings (make lint) makes this a gate.
#![warn(missing_docs)]

pub mod backoff;
pub mod conditions;
pub mod config;
pub mod convert;
pub mod crdgen;
pub mod int_or_percent;
pub mod k8s;
pub mod node_index;
pub mod policy;
pub mod quantity;
pub mod report;
pub mod resource_version;
pub mod revision;
pub mod watch_index;

pub use config::{NodeMemoryConfig, NodeMemoryConfigSpec, NodeMemoryConfigStatus};
pub use policy::{NodeMemoryPolicy, NodeMemoryPolicySpec, NodeMemoryPolicyStatus, NodeSettings};

/// The API group.
pub const GROUP: &str = "nodemem.io";
/// The served and stored version.
pub const VERSION: &str = "v1alpha1";

/// On a NodeMemoryPolicy: roll the pool back from this revision to the previous one
/// (`kubectl nodemem rollback`). The controller honours it while the spec still has
/// this revision and records it in `status.rolledBackRevision`; a new spec ends it.
pub const ROLLBACK_ANNOTATION: &str = "nodemem.io/rollback-revision";

/// On a NodeMemoryConfig about to be deleted on purpose with its values still on the
/// node (a pool rolled back to no config, `kubectl nodemem release --now`): the config's
/// revision. Its agent, seeing the config go with this annotation naming the revision
/// it ran, gives back at once; a config that goes without it (a `kubectl delete`, a
/// prune) keeps its values for the agent's grace, in case the controller writes it
/// again. A revision, not a flag: a config written again at another revision after
/// the annotation was set is not given back at once by an old mark.
pub const GIVE_BACK_ANNOTATION: &str = "nodemem.io/give-back-revision";

/// The longest the controller waits before writing an object again after its writes
/// failed (its backoff's cap): an agent's grace for a config that went without
/// [`GIVE_BACK_ANNOTATION`] outlasts it, so that a config the controller is still
/// trying to write again is not given back meanwhile.
pub const WRITE_BACKOFF_CAP: std::time::Duration = std::time::Duration::from_secs(60);

/// How long an agent keeps its values after its config went without
/// [`GIVE_BACK_ANNOTATION`]: the controller's longest wait between writes, a decision's
/// tick and a write's round trip, with room.
pub const DELETED_CONFIG_GRACE: std::time::Duration =
    std::time::Duration::from_secs(WRITE_BACKOFF_CAP.as_secs() + 15);

/// On every NodeMemoryPolicy the controller runs: a deleted policy stays (Terminating)
/// until each node it governed has moved to its next policy or been released, through
/// a rollout, and the controller then removes it. `kubectl nodemem release POLICY --now`
/// removes it at once (the nodes' configs then go at once); a controller that is scaled
/// to zero or deleted removes it from every policy as it stops.
pub const HANDOFF_FINALIZER: &str = "nodemem.io/handoff";
