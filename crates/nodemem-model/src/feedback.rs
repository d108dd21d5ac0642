//! What the nodes tell back: a container's working set against memory.high
//! ([`observe`]), relief for a container memory.high chokes ([`relief`]), and the
//! throttling factor a pool tolerates ([`recommend`]).

pub mod observe;
pub mod recommend;
pub mod relief;
