//! `nodemem.io/v1alpha1`: the `NodeMemoryPolicy` and `NodeMemoryConfig` custom
//! resources, their CRDs, and the conversion of their specs into the model's settings.

pub mod config;
pub mod convert;
pub mod crdgen;
pub mod int_or_percent;
pub mod k8s;
pub mod policy;
pub mod quantity;
pub mod revision;

pub use config::{NodeMemoryConfig, NodeMemoryConfigSpec, NodeMemoryConfigStatus};
pub use policy::{NodeMemoryPolicy, NodeMemoryPolicySpec, NodeMemoryPolicyStatus, NodeSettings};

/// The API group.
pub const GROUP: &str = "nodemem.io";
/// The served and stored version.
pub const VERSION: &str = "v1alpha1";
