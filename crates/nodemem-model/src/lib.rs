//! nodemem's pure rules. No Kubernetes client, no async runtime, no file or network
//! I/O: everything here is a function of its arguments, so it can be tested
//! exhaustively with plain `#[test]`s.
//!
//! * [`quantity`]: Kubernetes quantities, exact; [`problem`] and [`warning`]: what a
//!   user is told.
//! * [`pod`]: what the apiserver and kubelet derive from a Pod's resources (defaulting,
//!   aggregation, QoS class, validation, the profile the rules read).
//! * [`kubelet`]: the kubelet's own rules, by version.
//! * [`values`]: the values of every cgroup nodemem manages (Memory QoS, the factor,
//!   where each cgroup is, what a container is created with).
//! * [`numa`]: the Memory Manager's NUMA admission.
//! * [`node`]: one node's computation from its settings, facts and pods, and what the
//!   rules read of a Node's status.
//! * [`cluster`]: policy settings, their validation, which policy governs a node, and a
//!   pool's rollout.
//! * [`feedback`]: observation, relief and the factor recommendation.
//! * [`class`]: workload classes, what a pod chooses and what a class changes.

// Every public item says what it is; clippy -D warnings (make lint) makes this a gate.
#![warn(missing_docs)]

pub mod class;
pub mod cluster;
pub mod feedback;
pub mod kubelet;
pub mod node;
pub mod numa;
pub mod pod;
pub mod problem;
pub mod quantity;
pub mod settings;
pub mod values;
pub mod warning;

pub use problem::Problem;
pub use quantity::Quantity;
pub use warning::Warning;
