//! The kernel side of the node agent, with no Kubernetes in it.
//!
//! * [`roots`]: where cgroupfs, sysfs and procfs are. Injectable, so the same code runs
//!   on a node (`/sys/fs/cgroup`, `/sys`, `/proc`), a temp-dir tree and the test VM.
//! * [`path`]: relative cgroup paths that cannot leave the root, whatever a pod UID or
//!   container ID holds (`..`, `/`, NUL, empty, over 255 bytes, non-UTF-8).
//! * [`fs`]: interface files opened without creating them, written whole, read back;
//!   errors carry the path, the value and the errno.
//! * [`parse`]: parsers for the kernel's formats (`memory.min/low/high/max`,
//!   `memory.events`, `memory.pressure`, `cpuset.mems[.effective]`, `cgroup.controllers`,
//!   `cgroup.subtree_control`); every malformed input names the file and the bad token.
//! * [`psi`]: PSI triggers on `memory.pressure`, to wait for a stall instead of polling.
//! * [`reclaim`]: a cgroup's reading for proactive reclaim, and `memory.reclaim` (its
//!   EAGAIN is "less was found", not a failure).
//! * [`discover`]: kernel version, cgroup v2 and its controllers at kubepods, cgroup
//!   driver, base page size, NUMA nodes with memory and hugepages.
//!
//! ## Why not cgroups-rs
//!
//! The design card suggests cgroups-rs where it can target an injectable root and pass
//! the same tests. It cannot, and `tests/cgroups_rs_decision.rs` shows it: its v2
//! hierarchy is fixed to `/sys/fs/cgroup` (`hierarchies::V2::new()` takes no root), and
//! its controllers open interface files with `File::create`, so a mistyped or missing
//! file on a test tree is silently created instead of refused, which is exactly what
//! this layer must not hide. nodemem writes four files; this layer is small.

pub mod discover;
pub mod fs;
pub mod own;
pub mod parse;
pub mod path;
pub mod psi;
pub mod reclaim;
pub mod roots;
pub mod watch;

pub use fs::{CgroupError, CgroupFs, HeldFile, OpenCgroup};
pub use path::{check_identifier, CgroupPath, UnsafeName};
pub use roots::Roots;
