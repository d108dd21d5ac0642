//! A pool's throttling-factor recommendation (issue 19) from its nodes' observation:
//! the tallies of the nodes on the policy's current revision are summed (they add up
//! exactly to what one list of every container would give) and handed to
//! [`nodemem_model::recommend`]. Pure: each node's share in, the status field out (the
//! sum is kept by `decide::rollout_index`).

use nodemem_api::policy::{
    Enforcement, FactorShare, NodeMemoryPolicySpec, RecommendationReason, RecommendationStatus,
};
use nodemem_model::factor::ThrottlingFactor;
use nodemem_model::recommend::{recommend_tally, RecommendParams, Recommendation, Tally, STEPS};

use nodemem_api::report::ConfigEntry;

/// What one node's observation adds to the tally of `revision` (its config on that
/// revision, observed on it), and how long it has observed.
pub(crate) fn observed_tally(c: &ConfigEntry, revision: &str) -> Option<(Tally, u64)> {
    let o = c
        .status
        .observation
        .as_ref()
        .filter(|o| c.spec.revision == revision && o.revision == revision)?;
    let count = |n: i32| u64::try_from(n).unwrap_or(0);
    let mut fitting = [0u64; STEPS];
    for (f, n) in fitting.iter_mut().zip(&o.fitting_by_factor) {
        *f = count(*n);
    }
    let tally = Tally {
        containers: count(o.containers),
        fitting,
        throttled: count(o.throttled_containers),
    };
    Some((tally, u64::try_from(o.observed_seconds).unwrap_or(0)))
}

/// The recommendation from the pool's summed tally (`nodes` observed, the longest for
/// `observed_seconds`); None under `enforcement: Kubelet` (the kubelet's memory.high
/// is not observed).
pub(super) fn recommendation(
    spec: &NodeMemoryPolicySpec,
    tally: &Tally,
    nodes: usize,
    observed_seconds: u64,
) -> Option<RecommendationStatus> {
    if spec.settings.enforcement == Enforcement::Kubelet {
        return None;
    }
    let r = &spec.recommendation;
    let params = RecommendParams {
        target_share: f64::from(r.target_percent.clamp(1, 100)) / 100.0,
        min_containers: usize::try_from(r.min_containers).unwrap_or(1).max(1),
        min_observed_seconds: u64::try_from(r.min_observation_seconds).unwrap_or(0),
    };
    let current = spec.settings.memory_qos.throttling_factor;
    Some(status(
        recommend_tally(tally, nodes, observed_seconds, &params),
        r.target_percent,
        current,
        tally,
    ))
}

/// A share as a percentage with two decimals: status does not change with noise.
fn percent(share: f64) -> f64 {
    (share * 10_000.0).round() / 100.0
}

fn status(
    r: Recommendation,
    target_percent: i32,
    current: f64,
    tally: &Tally,
) -> RecommendationStatus {
    let base = RecommendationStatus {
        target_percent,
        current_factor: current,
        containers: i32::try_from(tally.containers).unwrap_or(i32::MAX),
        ..RecommendationStatus::default()
    };
    let shares = |d: &[nodemem_model::recommend::Step]| {
        d.iter()
            .map(|s| FactorShare {
                factor: s.factor.as_f64(),
                fitting_percent: percent(s.share_fitting),
            })
            .collect::<Vec<_>>()
    };
    match r {
        Recommendation::Factor {
            factor,
            share_fitting,
            current_throttled_share,
            evidence,
            distribution,
        } => RecommendationStatus {
            reason: RecommendationReason::Recommended,
            message: format!(
                "throttlingFactor {} keeps {}% of {} container(s) under memory.high (target {}%); the current {} throttles {}% of them ({} node(s), {} s observed)",
                factor,
                percent(share_fitting),
                evidence.containers,
                target_percent,
                factor_text(current),
                percent(current_throttled_share),
                evidence.nodes,
                evidence.observed_seconds
            ),
            throttling_factor: Some(factor.as_f64()),
            fitting_percent: Some(percent(share_fitting)),
            current_throttled_percent: Some(percent(current_throttled_share)),
            nodes: evidence.nodes as i32,
            observed_seconds: evidence.observed_seconds as i64,
            distribution: shares(&distribution),
            ..base
        },
        Recommendation::NoFactorSuffices {
            best_share,
            current_throttled_share,
            evidence,
            distribution,
        } => RecommendationStatus {
            reason: RecommendationReason::NoFactorSuffices,
            message: format!(
                "even throttlingFactor 1 keeps only {}% of {} container(s) under memory.high (target {}%): the others' working sets come near or beyond their limits, which no factor mends (raise those limits, or lower the target); the current {} throttles {}%",
                percent(best_share),
                evidence.containers,
                target_percent,
                factor_text(current),
                percent(current_throttled_share)
            ),
            current_throttled_percent: Some(percent(current_throttled_share)),
            nodes: evidence.nodes as i32,
            observed_seconds: evidence.observed_seconds as i64,
            distribution: shares(&distribution),
            ..base
        },
        Recommendation::TooLittleEvidence {
            evidence,
            needs_containers,
            needs_observed_seconds,
        } => RecommendationStatus {
            reason: RecommendationReason::TooLittleEvidence,
            message: format!(
                "a recommendation needs at least {} container(s) with room for a memory.high observed for {} s (spec.recommendation); so far {} container(s) on {} node(s) over {} s",
                needs_containers,
                needs_observed_seconds,
                evidence.containers,
                evidence.nodes,
                evidence.observed_seconds
            ),
            nodes: evidence.nodes as i32,
            observed_seconds: evidence.observed_seconds as i64,
            ..base
        },
    }
}

/// The factor as the policy writes it (0.8, not 0.8000000000000002).
fn factor_text(f: f64) -> String {
    ThrottlingFactor::from_f64(f).map_or_else(|_| f.to_string(), |f| f.to_string())
}
