//! The values nodemem writes on a node: the cgroup files and their values
//! ([`cgroup`]), where the kubelet puts each cgroup ([`cgroup_layout`]), Memory QoS per
//! cgroup ([`memory_qos`]) with the throttling factor ([`factor`]), what a container is
//! created with ([`creation`]), and the kernel the values need ([`kernel`]).

pub mod cgroup;
pub mod cgroup_layout;
pub mod creation;
pub mod factor;
pub mod kernel;
pub mod memory_qos;
