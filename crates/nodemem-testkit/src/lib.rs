//! nodemem's test harness, used by every tier above unit tests:
//!
//! - [`control_plane`]: a real etcd + kube-apiserver + kube-controller-manager on
//!   loopback, with clients for several identities (admin, controller, per-node agent).
//! - [`cgroup_tree`] and [`kubelet`]: simulated nodes: Node objects, a fake kubelet that
//!   runs bound pods by creating their cgroup directories in a per-node temporary
//!   cgroup v2 tree (systemd or cgroupfs layout).
//! - [`bed`]: a whole installation (CRDs, RBAC, node pools, agent and controller
//!   processes) for `nodemem sandbox` and end-to-end tests.
//! - [`vm`]: a real Linux kernel (Debian's) in qemu with two NUMA nodes and cgroup v2,
//!   running a command and returning its output and exit code.
//! - [`real_node`]: that kernel booting systemd, containerd and the kubelet, joined to a
//!   control plane: a real node.
//! - [`nri_runtime`]: NRI's runtime side (containerd/nri's adaptation) as a process.
//! - [`stats`]: quantiles of measured samples.
//! - [`scripted_api`]: a scripted Kubernetes API in the test's process, for the loops'
//!   wiring tested without a control plane.

pub mod admission;
pub mod bed;
pub mod binaries;
pub mod cgroup_tree;
pub mod clients;
pub mod control_plane;
pub mod cpio;
pub mod crds;
pub mod error;
pub mod gitops;
pub mod kubelet;
pub mod nodes;
pub mod nri_runtime;
pub mod pki;
pub mod process;
pub mod proxy;
pub mod real_node;
pub mod scripted_api;
pub mod second_apiserver;
pub mod simulate;
pub mod stats;
pub mod vm;

pub use control_plane::{ControlPlane, Identity};
pub use error::Error;
