//! What the nodes tell back: a container's working set against memory.high
//! ([`observe`]), relief for a container memory.high chokes ([`relief`]), the
//! throttling factor a pool tolerates ([`recommend`]), and the steps of proactive
//! reclaim a cgroup's pressure allows ([`reclaim`]).

pub mod observe;
pub mod reclaim;
pub mod reclaim_parts;
pub mod recommend;
pub mod relief;
