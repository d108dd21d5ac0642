//! A pool's throttling-factor recommendation (issue 19) from its nodes' observation:
//! the tallies of the nodes on the policy's current revision are summed (they add up
//! to what one list of every container would give) and handed to
//! [`nodemem_model::feedback::recommend`]. One node cannot steer its pool (issue 44): a
//! recommendation needs a quorum of observing nodes ([`quorum`]), each observed for
//! the minimum, and no node weighs more than twice the median node ([`capped_tally`]),
//! so a broken or hostile agent that reports a million containers counts as a large
//! node, not as the pool. Pure: each node's share in, the status field out.

use nodemem_api::policy::{
    Enforcement, FactorShare, NodeMemoryPolicySpec, RecommendationReason, RecommendationStatus,
};
use nodemem_model::feedback::recommend::{
    recommend_tally, RecommendParams, Recommendation, Tally, STEPS,
};
use nodemem_model::values::factor::ThrottlingFactor;

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

/// Observing nodes a recommendation needs in a pool of `pool` nodes: half of them,
/// rounded up, and two in any pool of two or more (one alone is the pool only when
/// the pool is one node).
pub(crate) fn quorum(pool: usize) -> usize {
    if pool <= 1 {
        1
    } else {
        pool.div_ceil(2).max(2)
    }
}

/// The pool's tally from its nodes' (each a node's own); a node with more containers
/// than twice the median node's counts as that many, its figures scaled down.
pub(crate) fn capped_tally(nodes: &[&Tally]) -> Tally {
    let mut sizes: Vec<u64> = nodes.iter().map(|t| t.containers).collect();
    sizes.sort_unstable();
    let median = sizes.get(sizes.len() / 2).copied().unwrap_or(0);
    let cap = median.saturating_mul(2).max(1);
    let mut total = Tally::default();
    for t in nodes {
        if t.containers <= cap {
            total.add(t);
            continue;
        }
        // Scaled in u128: counts reported by an agent can be anything.
        let scale = |n: u64| {
            (u128::from(n.min(t.containers)) * u128::from(cap) / u128::from(t.containers)) as u64
        };
        let mut capped = Tally {
            containers: cap,
            throttled: scale(t.throttled),
            ..Tally::default()
        };
        for (c, f) in capped.fitting.iter_mut().zip(t.fitting) {
            *c = scale(f);
        }
        total.add(&capped);
    }
    total
}

/// The recommendation from the pool's tally (`nodes` observed, at least `quorum` of
/// them for `observed_seconds`); None under `enforcement: Kubelet` (the kubelet's
/// memory.high is not observed).
pub(super) fn recommendation(
    spec: &NodeMemoryPolicySpec,
    tally: &Tally,
    nodes: usize,
    quorum: usize,
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
        min_nodes: quorum,
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
    let shares = |d: &[nodemem_model::feedback::recommend::Step]| {
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
            needs_nodes,
        } => RecommendationStatus {
            reason: RecommendationReason::TooLittleEvidence,
            message: format!(
                "a recommendation needs at least {} container(s) with room for a memory.high on at least {} node(s) (half the pool), each observed for {} s (spec.recommendation); so far {} container(s) on {} node(s), {} of them for {} s",
                needs_containers,
                needs_nodes,
                needs_observed_seconds,
                evidence.containers,
                evidence.nodes,
                needs_nodes.min(evidence.nodes),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(containers: u64, fitting_all: u64, throttled: u64) -> Tally {
        Tally {
            containers,
            fitting: [fitting_all; STEPS],
            throttled,
        }
    }

    #[test]
    fn a_quorum_is_half_the_pool_and_two_in_any_pool_of_two_or_more() {
        let q: Vec<usize> = [0, 1, 2, 3, 4, 5, 10, 11, 20_000]
            .into_iter()
            .map(quorum)
            .collect();
        assert_eq!(q, [1, 1, 2, 2, 2, 3, 5, 6, 10_000]);
    }

    #[test]
    fn no_node_weighs_more_than_twice_the_median_node() {
        // Three honest nodes of 30 containers, all fitting; one that reports a million
        // containers, none fitting, all throttled.
        let honest = tally(30, 30, 0);
        let hostile = tally(1_000_000, 0, 1_000_000);
        let t = capped_tally(&[&honest, &honest, &honest, &hostile]);
        assert_eq!(t.containers, 90 + 60, "the hostile node counts as 60");
        assert_eq!((t.fitting[0], t.throttled), (90, 60));
        // Without the cap it would be the whole pool's verdict: 1,000,090 containers,
        // 99.99 % throttled. With it, 60 % fit: a recommendation still reads the pool.
        let share = t.fitting[0] as f64 / t.containers as f64;
        assert!((share - 0.6).abs() < 1e-9, "{share}");
        // Honest pools of similar nodes are summed exactly.
        let a = tally(20, 18, 2);
        let b = tally(35, 30, 5);
        let exact = capped_tally(&[&a, &b, &a]);
        assert_eq!(
            (exact.containers, exact.fitting[0], exact.throttled),
            (75, 66, 9)
        );
        // Counts beyond a node's own containers are taken as all of them.
        let odd = Tally {
            containers: 100,
            fitting: [u64::MAX; STEPS],
            throttled: u64::MAX,
        };
        let t = capped_tally(&[&a, &a, &odd]);
        assert_eq!(t.containers, 80);
        assert_eq!((t.fitting[0], t.throttled), (18 * 2 + 40, 2 * 2 + 40));
        assert_eq!(capped_tally(&[]), Tally::default());
    }
}
