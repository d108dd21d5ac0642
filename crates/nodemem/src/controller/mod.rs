//! `nodemem controller`: turns NodeMemoryPolicies into one NodeMemoryConfig per node
//! and rolls each pool to a new revision safely.
//!
//! * [`world`]: what the watches said (pure index).
//! * [`decide`]: resolution, rollout steps, config writes and policy status (pure).

pub mod decide;
pub mod world;

#[cfg(test)]
mod tests;
