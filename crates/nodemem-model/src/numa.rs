//! The NUMA half of the rules: the kubelet Memory Manager's Static policy as a pure
//! model (KEP-1769), so the agent pins Guaranteed pods exactly as the kubelet would.

pub mod machine;
pub mod manager;
pub mod state;
pub mod sysfs;

pub use machine::{MachineState, MemoryTable, NumaId, NumaTopology, ReservedMemory};
pub use manager::{cpuset_mems, MemoryManager, Pinning, Rejection, RejectionReason, Scope};
pub use state::MemoryManagerState;
