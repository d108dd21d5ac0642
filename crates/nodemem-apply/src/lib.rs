//! The node's stage from desired state to the kernel, below Kubernetes: from the
//! desired node (computed by `nodemem_model::node::desired_node`) to the kernel, and
//! what it leaves on disk. No Kubernetes API crate: it takes the model's facts.
//!
//! * [`applier`]: one node's enforcement a pass at a time (discovery, the kubelet's
//!   settings, the node computation, the writes, the records), what `agent --once`
//!   and the in-cluster agent both call.
//! * [`node`]: the node as discovered, which the agent owns and lends to the engine.
//! * [`plan`]: pure write planning and ownership (what nodemem set, and what it held
//!   before).
//! * [`execute`]: reading what the plan needs and performing its writes.
//! * [`fault`]: the kill a test arms after a chosen write.
//! * [`writes`]: one pass of writes over the desired cgroups: observe, plan, execute, update ownership.
//! * [`state`]: the state directory (atomic, versioned, checksummed records).
//! * [`kubelet`]: the kubelet's configuration, nodemem's drop-in for it, its Memory
//!   Manager state file and its start time.
//! * [`numa_state`]: the Memory Manager's state in that directory, checked against the
//!   node at start.
//! * [`units`]: which systemd unit properties must say what nodemem wrote, so that
//!   systemd's re-applies keep it (systemd-driver nodes).

// Every public item says what it is; clippy -D warnings (make lint) makes this a gate.
#![warn(missing_docs)]

pub mod applier;
pub mod backoff;
pub mod execute;
pub mod fault;
pub mod kubelet;
pub mod node;
pub mod numa_state;
pub mod plan;
pub mod state;
pub mod units;
pub mod writes;

pub use backoff::WriteBackoff;
pub use plan::{Ownership, Write, WriteKind};
pub use state::{StateDir, StateError};
pub use writes::{write_cgroups, write_cgroups_within, ApplyOptions, ApplyReport};
