//! nodemem's pure rules. No Kubernetes client, no async runtime, no file or network
//! I/O: everything here is a function of its arguments, so it can be tested
//! exhaustively with plain `#[test]`s.
//!
//! * [`quantity`]: Kubernetes quantities, exact.
//! * [`pod`], [`defaulting`], [`aggregate`], [`qos`], [`pod_validation`]: what the
//!   apiserver and kubelet derive from a Pod's resources.
//! * [`memory_qos`]: cgroup v2 memory.min / memory.low / memory.high per container,
//!   pod, QoS class and node.
//! * [`observe`]: a container's working set against memory.high over time.
//! * [`relief`]: when to raise a choking container's memory.high, and when to put it back.
//! * [`recommend`]: the throttling factor a pool's workloads tolerate, from evidence.
//! * [`policy`], [`selector`], [`resolve`]: policy settings, their semantic validation,
//!   and which policy governs a node.

pub mod aggregate;
pub mod cgroup;
pub mod cgroup_layout;
pub mod creation;
pub mod defaulting;
pub mod eviction;
pub mod factor;
pub mod kernel;
pub mod kubelet_dropin;
pub mod kubelet_version;
pub mod kubelet_writes;
pub mod memory_qos;
pub mod node;
pub mod node_status;
pub mod numa;
pub mod observe;
pub mod pod;
pub mod pod_validation;
pub mod policy;
pub mod problem;
pub mod profile;
pub mod qos;
pub mod quantity;
pub mod recommend;
pub mod relief;
pub mod resolve;
pub mod rollout;
pub mod selector;
pub mod warning;

pub use problem::Problem;
pub use quantity::Quantity;
pub use warning::Warning;
