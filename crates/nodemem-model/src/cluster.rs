//! The cluster's side: a policy's settings and their validation ([`policy`]), label
//! selectors ([`selector`]), which policy governs a node ([`resolve`]) and the rollout of
//! a pool ([`rollout`]).

pub mod policy;
pub mod resolve;
pub mod rollout;
pub mod selector;
