//! A pool's throttling-factor recommendation (issue 19) from its nodes' observation:
//! the tallies of the nodes on the policy's current revision are summed (they add up
//! to what one list of every container would give) and handed to
//! [`nodemem_model::feedback::recommend`]. One node cannot steer its pool (issue 44): a
//! recommendation needs a quorum of observing nodes ([`quorum`]), each observed for
//! the minimum, no node weighs more than twice the median of the others ([`capped`]),
//! and no node brings the recommendation below what the others' containers allow
//! ([`guarded`]), so a broken or hostile agent that reports a million containers, or
//! containers that fit any factor, counts as one large node, not as the pool. Pure: each node's share in, the status field out.

use nodemem_api::policy::{
    ClassRecommendation, Enforcement, FactorShare, NodeMemoryPolicySpec, RecommendationReason,
    RecommendationStatus,
};
use nodemem_model::feedback::recommend::{
    recommend_tally, RecommendParams, Recommendation, Tally, STEPS,
};
use nodemem_model::values::factor::ThrottlingFactor;

use nodemem_api::report::ConfigEntry;

/// What one node's observation adds to the tally of `revision` (its config on that
/// revision, observed on it), and how long it has observed.
pub(crate) fn observed_tally(c: &ConfigEntry, revision: &str) -> Option<(Tally, u64)> {
    let o = observation_on(c, revision)?;
    let tally = tally_of(o.containers, o.throttled_containers, &o.fitting_by_factor);
    Some((tally, u64::try_from(o.observed_seconds).unwrap_or(0)))
}

/// What one node's observation adds to each workload class's tally of `revision`
/// (the classes whose memory.high is not the pool's), by class name.
pub(crate) fn observed_class_tallies(c: &ConfigEntry, revision: &str) -> Vec<(String, Tally)> {
    observation_on(c, revision).map_or_else(Vec::new, |o| {
        o.classes
            .iter()
            .map(|k| {
                let t = tally_of(k.containers, k.throttled_containers, &k.fitting_by_factor);
                (k.name.clone(), t)
            })
            .collect()
    })
}

fn observation_on<'c>(
    c: &'c ConfigEntry,
    revision: &str,
) -> Option<&'c nodemem_api::config::ObservationSummary> {
    c.status
        .observation
        .as_deref()
        .filter(|o| c.spec.revision == revision && o.revision == revision)
}

/// A tally as an agent reports it; negative counts (a broken agent) are none.
fn tally_of(containers: i32, throttled: i32, fitting_by_factor: &[i32]) -> Tally {
    let count = |n: i32| u64::try_from(n).unwrap_or(0);
    let mut fitting = [0u64; STEPS];
    for (f, n) in fitting.iter_mut().zip(fitting_by_factor) {
        *f = count(*n);
    }
    Tally {
        containers: count(containers),
        fitting,
        throttled: count(throttled),
    }
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

/// The pool's tally from its nodes' (each a node's own), such that no single node
/// moves the recommendation: each node is weighed against the others ([`capped`]), and
/// at each factor step the share of containers that fit is the lowest of the whole
/// pool's and of every pool with one node left out ([`guarded`]). A node that says its
/// containers fit a low factor cannot bring the recommendation below what the other
/// nodes' working sets allow; one that says nothing fits can hold it higher (less
/// throttling, the safe side) only as far as its capped weight goes.
pub(crate) fn pool_tally(nodes: &[&Tally]) -> Tally {
    let capped = capped(nodes);
    guarded(&capped)
}

/// Each node's tally with its containers capped at twice the median of the *other*
/// nodes' (so no node sets its own cap: in a pool of two each is capped by the other),
/// its figures scaled down with it. A pool of one node is that node.
pub(crate) fn capped(nodes: &[&Tally]) -> Vec<Tally> {
    let mut sizes: Vec<u64> = nodes.iter().map(|t| t.containers).collect();
    sizes.sort_unstable();
    let n = sizes.len();
    // The median of the others: with the sorted sizes, leaving one value out moves the
    // median position by one when the value sits at or before it.
    let cap_of = |containers: u64| -> u64 {
        if n < 2 {
            return u64::MAX;
        }
        let m = (n - 1) / 2;
        let at = sizes.partition_point(|&s| s < containers);
        let median = if at <= m { sizes[m + 1] } else { sizes[m] };
        median.saturating_mul(2).max(1)
    };
    nodes
        .iter()
        .map(|t| {
            let cap = cap_of(t.containers);
            if t.containers <= cap {
                return Tally {
                    containers: t.containers,
                    fitting: t.fitting.map(|f| f.min(t.containers)),
                    throttled: t.throttled.min(t.containers),
                };
            }
            // Scaled in u128: counts reported by an agent can be anything.
            let scale = |n: u64| {
                (u128::from(n.min(t.containers)) * u128::from(cap) / u128::from(t.containers))
                    as u64
            };
            Tally {
                containers: cap,
                fitting: t.fitting.map(scale),
                throttled: scale(t.throttled),
            }
        })
        .collect()
}

/// The sum of `nodes`, with each step's fitting count lowered to the lowest share of
/// the whole pool and of the pool without each one node (rounded down): the
/// recommended factor is then at least what every pool of all nodes but one supports.
pub(crate) fn guarded(nodes: &[Tally]) -> Tally {
    let mut total = Tally::default();
    for t in nodes {
        total.add(t);
    }
    if nodes.len() < 2 || total.containers == 0 {
        return total;
    }
    // Shares as fractions (fitting, containers), compared and applied in integers: a
    // float's rounding must not take a container off an honest pool.
    for step in 0..STEPS {
        let (mut num, mut den) = (
            u128::from(total.fitting[step]),
            u128::from(total.containers),
        );
        for t in nodes {
            let rest = u128::from(total.containers - t.containers);
            let fit = u128::from(total.fitting[step] - t.fitting[step]);
            if rest > 0 && fit * den < num * rest {
                (num, den) = (fit, rest);
            }
        }
        total.fitting[step] = (u128::from(total.containers) * num / den) as u64;
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
        Some(current),
        tally,
    ))
}

/// Each workload class's own recommendation, from the tallies of its containers
/// (`classes`: the class's pool tally and how many nodes reported it), with the pool's
/// quorum and observation time: one node cannot steer a class either. The classes
/// whose memory.high is the pool's have none (their containers are the pool's
/// evidence); a class no node reported yet is TooLittleEvidence.
pub(super) fn class_recommendations(
    spec: &NodeMemoryPolicySpec,
    classes: &std::collections::BTreeMap<String, (Tally, usize)>,
    quorum: usize,
    observed_seconds: u64,
) -> Vec<ClassRecommendation> {
    let Ok(settings) = nodemem_api::convert::node_settings(&spec.settings) else {
        return Vec::new();
    };
    let pool = &settings.memory_qos;
    let r = &spec.recommendation;
    let params = RecommendParams {
        target_share: f64::from(r.target_percent.clamp(1, 100)) / 100.0,
        min_containers: usize::try_from(r.min_containers).unwrap_or(1).max(1),
        min_observed_seconds: u64::try_from(r.min_observation_seconds).unwrap_or(0),
        min_nodes: quorum,
    };
    settings
        .classes
        .iter()
        .filter_map(|class| {
            let current = class.memory_qos(pool).throttling_factor;
            if current == pool.throttling_factor {
                return None;
            }
            let (tally, nodes) = classes.get(&class.name).copied().unwrap_or_default();
            let current = current.map(|f| f.as_f64());
            let rec = recommend_tally(&tally, nodes, observed_seconds, &params);
            let s = status(rec, r.target_percent, current, &tally);
            Some(ClassRecommendation {
                name: class.name.clone(),
                reason: s.reason,
                message: s.message,
                throttling_factor: s.throttling_factor,
                fitting_percent: s.fitting_percent,
                current_factor: current,
                containers: s.containers,
            })
        })
        .collect()
}

/// A share as a percentage with two decimals: status does not change with noise.
fn percent(share: f64) -> f64 {
    (share * 10_000.0).round() / 100.0
}

fn status(
    r: Recommendation,
    target_percent: i32,
    current: Option<f64>,
    tally: &Tally,
) -> RecommendationStatus {
    let base = RecommendationStatus {
        target_percent,
        current_factor: current.unwrap_or_default(),
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
/// The current factor in words; None: a class without memory.high.
fn factor_text(f: Option<f64>) -> String {
    match f {
        Some(f) => ThrottlingFactor::from_f64(f).map_or_else(|_| f.to_string(), |f| f.to_string()),
        None => "none (no memory.high)".into(),
    }
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

    fn sum(nodes: &[Tally]) -> Tally {
        let mut t = Tally::default();
        for n in nodes {
            t.add(n);
        }
        t
    }

    #[test]
    fn no_node_weighs_more_than_twice_the_median_of_the_others() {
        // Three honest nodes of 30 containers, all fitting; one that reports a million
        // containers, none fitting, all throttled.
        let honest = tally(30, 30, 0);
        let hostile = tally(1_000_000, 0, 1_000_000);
        let t = sum(&capped(&[&honest, &honest, &honest, &hostile]));
        assert_eq!(t.containers, 90 + 60, "the hostile node counts as 60");
        assert_eq!((t.fitting[0], t.throttled), (90, 60));
        // Honest pools of similar nodes are summed exactly.
        let a = tally(20, 18, 2);
        let b = tally(35, 30, 5);
        let exact = sum(&capped(&[&a, &b, &a]));
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
        let t = sum(&capped(&[&a, &a, &odd]));
        assert_eq!(t.containers, 80);
        assert_eq!((t.fitting[0], t.throttled), (18 * 2 + 40, 2 * 2 + 40));
        assert_eq!(pool_tally(&[]), Tally::default());
        // In a pool of two neither sets its own cap: each is capped by the other.
        let t = sum(&capped(&[&honest, &hostile]));
        assert_eq!(t.containers, 30 + 60);
        // A pool of one is that node.
        assert_eq!(sum(&capped(&[&hostile])), hostile);
    }

    /// Honest nodes whose 30 containers each fit from factor 0.6 up.
    fn honest_node() -> Tally {
        let mut t = Tally {
            containers: 30,
            ..Tally::default()
        };
        for (f, factor) in t
            .fitting
            .iter_mut()
            .zip(nodemem_model::feedback::recommend::steps())
        {
            if factor.as_f64() >= 0.6 - 1e-9 {
                *f = 30;
            }
        }
        t
    }

    /// The recommended factor of a pool's tally (a target of 50 %, where one node's
    /// capped weight can decide a small pool; 20 containers; the pool's quorum), or
    /// None when none is made.
    fn recommended_of(tally: &Tally, nodes: usize) -> Option<f64> {
        let params = RecommendParams {
            target_share: 0.5,
            min_containers: 20,
            min_observed_seconds: 0,
            min_nodes: quorum(nodes),
        };
        match recommend_tally(tally, nodes, 86_400, &params) {
            Recommendation::Factor { factor, .. } => Some(factor.as_f64()),
            _ => None,
        }
    }

    fn recommended(nodes: &[Tally]) -> Option<f64> {
        let refs: Vec<&Tally> = nodes.iter().collect();
        recommended_of(&pool_tally(&refs), nodes.len())
    }

    /// Issue 58: in pools of 2, 3, 4 and 20 nodes, one hostile node that says every
    /// container fits any factor (a million containers) does not bring the
    /// recommendation below the 0.6 the others' working sets need; one that says none
    /// fits holds it higher or withholds it (the safe side: less throttling), never
    /// lower. Without the guard, the first would recommend 0.05 in the pools of 2 and 3.
    #[test]
    fn one_hostile_node_never_brings_the_recommendation_below_what_the_others_allow() {
        let all_fit = tally(1_000_000, 1_000_000, 0);
        let none_fit = tally(1_000_000, 0, 1_000_000);
        for pool in [2usize, 3, 4, 20] {
            let honest = vec![honest_node(); pool - 1];
            if pool > 2 {
                assert_eq!(recommended(&honest), Some(0.6), "{pool}: the honest ones");
            }
            let mut with = honest.clone();
            with.push(all_fit);
            assert_eq!(
                recommended(&with),
                Some(0.6),
                "{pool} nodes, one saying every container fits any factor"
            );
            // The guard is what holds it in the small pools: the capped weight alone
            // lets the hostile node's containers be half the pool.
            let refs: Vec<&Tally> = with.iter().collect();
            let unguarded = recommended_of(&sum(&capped(&refs)), pool);
            if pool <= 3 {
                assert_eq!(unguarded, Some(0.05), "{pool}: without the guard");
            }
            let mut with = honest.clone();
            with.push(none_fit);
            assert!(
                recommended(&with).is_none_or(|f| f >= 0.6),
                "{pool} nodes, one saying none fits: {:?}",
                recommended(&with)
            );
        }
    }
}
