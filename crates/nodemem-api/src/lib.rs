//! `nodemem.io/v1alpha1`: the `NodeMemoryPolicy` and `NodeMemoryConfig` custom
//! resources, their CRDs, and the conversion of their specs into the model's settings.

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

/// On every NodeMemoryPolicy the controller runs: a deleted policy stays (Terminating)
/// until each node it governed has moved to its next policy or been released, through
/// a rollout, and the controller then removes it. `kubectl nodemem release POLICY --now`
/// removes it at once (the nodes' configs then go at once); a controller that is scaled
/// to zero or deleted removes it from every policy as it stops.
pub const HANDOFF_FINALIZER: &str = "nodemem.io/handoff";
