//! The settings a decision derives from a policy: its rollout parameters for a pool,
//! and what a node gets when no policy governs it.

use nodemem_api::policy::{FailurePolicy, NodeSettings, RolloutSpec};
use nodemem_model::cluster::rollout::{OnFailure, RolloutParams};

/// The settings a node gets when no policy selects it any more
/// ([`NodeSettings::released`]).
pub fn released_settings() -> NodeSettings {
    NodeSettings::released()
}

/// The rollout settings of a policy's spec for a pool of `matched` nodes.
pub(crate) fn rollout_params(rollout: &RolloutSpec, matched: u32) -> RolloutParams {
    RolloutParams {
        max_unavailable: rollout.max_unavailable.resolve(matched).unwrap_or(1).max(1),
        canary: rollout
            .canary
            .as_ref()
            .and_then(|c| c.resolve(matched).ok())
            .unwrap_or(0),
        min_ready_seconds: rollout.min_ready_seconds.max(0) as u64,
        progress_deadline_seconds: rollout.progress_deadline_seconds.max(0) as u64,
        max_failures: rollout.max_failures.max(1) as u32,
        on_failure: match rollout.failure_policy {
            FailurePolicy::Pause => OnFailure::Pause,
            FailurePolicy::Rollback => OnFailure::Rollback,
        },
        paused: rollout.paused,
    }
}
