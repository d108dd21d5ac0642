//! The values nodemem writes on a node: the cgroup files and their values
//! ([`cgroup`]), where the kubelet puts each cgroup ([`cgroup_layout`]), Memory QoS per
//! cgroup ([`memory_qos`]) with the throttling factor ([`factor`]), and the kernel the
//! values need ([`kernel`]). What a container is created with reads the computed node:
//! [`crate::node::creation`].

pub mod cgroup;
pub mod cgroup_layout;
pub mod factor;
pub mod kernel;
pub mod memory_qos;
