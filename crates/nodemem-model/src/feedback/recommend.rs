//! The throttling factor a pool's workloads tolerate, from what they did (issue 19,
//! pure). For each container with a memory.high, memory.high = request + factor x
//! (limit, or the node's allocatable, - request), page-rounded down
//! ([`ThrottlingFactor::memory_high`], the same integer math the agent writes with).
//! A container fits a factor when its highest working set stayed at or under the
//! memory.high that factor gives (or when the factor gives it no memory.high at all).
//! The recommendation is the lowest factor, in steps of 0.05, from which on upwards at
//! least the target share of containers fits; too little evidence gives none, and
//! says how much is missing.

use crate::pod::profile::ContainerMemory;
use crate::values::factor::{KubeletFloat, ThrottlingFactor};
use crate::values::memory_qos::NodeMemoryFacts;

/// What one container did, as its agent observed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContainerEvidence {
    /// memory request, bytes.
    pub request: i64,
    /// What memory.high is computed towards: the memory limit, or the node's
    /// allocatable memory for a container without one.
    pub ceiling: i64,
    /// The node's base page size, bytes.
    pub page_size: i64,
    /// How the node's kubelet rounds memory.high (`NodeMemoryFacts::kubelet_float`).
    pub float: KubeletFloat,
    /// The highest working set seen (memory.current minus inactive file pages, or the
    /// kernel's memory.peak where that is the better bound).
    pub peak_working_set: i64,
}

impl ContainerEvidence {
    /// The evidence of a container with this request and limit on a node with these
    /// facts that peaked at `peak_working_set`; None when memory.high has nothing to
    /// be computed towards (no limit and no known allocatable).
    pub fn of(
        memory: &ContainerMemory,
        node: &NodeMemoryFacts,
        peak_working_set: i64,
    ) -> Option<Self> {
        // As `memory_qos::container_memory_high`: the limit, else the allocatable.
        let ceiling = if memory.limit != 0 {
            memory.limit
        } else {
            node.kubelet_allocatable()?
        };
        Some(ContainerEvidence {
            request: memory.request,
            ceiling,
            page_size: node.page_size,
            float: node.kubelet_float,
            peak_working_set,
        })
    }

    /// The memory.high `factor` gives this container, or None when it would set none
    /// (as the kubelet: no room between request and ceiling, or not above the request).
    pub fn memory_high(&self, factor: ThrottlingFactor) -> Option<i64> {
        if self.ceiling <= self.request {
            return None;
        }
        let high = factor.memory_high(self.request, self.ceiling, self.page_size, self.float);
        (high != 0 && high > self.request).then_some(high)
    }

    /// Whether the container would have stayed at or under memory.high at `factor`.
    pub fn fits(&self, factor: ThrottlingFactor) -> bool {
        self.memory_high(factor)
            .is_none_or(|high| self.peak_working_set <= high)
    }
}

/// How much evidence a recommendation needs, and what it aims for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RecommendParams {
    /// The share of containers that must fit (0.99: 99 %).
    pub target_share: f64,
    /// Containers with a memory.high observed, at least.
    pub min_containers: usize,
    /// Seconds of observation, at least (the shortest a pool's daily peak can show in).
    pub min_observed_seconds: u64,
    /// Nodes observing, at least, each for `min_observed_seconds` (the caller's quorum:
    /// one node must not steer a pool).
    pub min_nodes: usize,
}

impl Default for RecommendParams {
    fn default() -> Self {
        RecommendParams {
            target_share: 0.99,
            min_containers: 20,
            min_observed_seconds: 24 * 3600,
            min_nodes: 1,
        }
    }
}

/// The evidence a recommendation stands on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Evidence {
    /// Containers observed.
    pub containers: usize,
    /// Nodes they ran on.
    pub nodes: usize,
    /// The longest observation, seconds.
    pub observed_seconds: u64,
}

/// One step of the distribution: a factor and the share of containers that fit it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    /// The factor.
    pub factor: ThrottlingFactor,
    /// The share of containers whose working set stays under memory.high at it.
    pub share_fitting: f64,
}

/// What the observations say of the throttling factor.
#[derive(Clone, Debug, PartialEq)]
pub enum Recommendation {
    /// `factor` keeps at least the target share under memory.high, and every higher
    /// step does too; `current_throttled_share` is the share the current factor would
    /// throttle.
    Factor {
        /// The factor recommended.
        factor: ThrottlingFactor,
        /// The share of containers it keeps under memory.high.
        share_fitting: f64,
        /// The share the current factor throttles.
        current_throttled_share: f64,
        /// What it stands on.
        evidence: Evidence,
        /// Each step's share, from the lowest factor.
        distribution: Vec<Step>,
    },
    /// Even a factor of 1 keeps fewer than the target share under memory.high: those
    /// containers outgrow their limits, which no factor mends.
    NoFactorSuffices {
        /// The share a factor of 1 keeps under memory.high.
        best_share: f64,
        /// The share the current factor throttles.
        current_throttled_share: f64,
        /// What it stands on.
        evidence: Evidence,
        /// Each step's share, from the lowest factor.
        distribution: Vec<Step>,
    },
    /// Not enough to go on; what is missing is named.
    TooLittleEvidence {
        /// What there is.
        evidence: Evidence,
        /// Containers needed.
        needs_containers: usize,
        /// Seconds of observation needed.
        needs_observed_seconds: u64,
        /// Nodes needed.
        needs_nodes: usize,
    },
}

/// How many factors are recommended from.
pub const STEPS: usize = 20;

/// The factors recommended from: 0.05, 0.10, ... 1.
pub fn steps() -> Vec<ThrottlingFactor> {
    (1..=STEPS)
        .map(|k| ThrottlingFactor::from_f64(k as f64 / STEPS as f64).expect("k/20 is in (0, 1]"))
        .collect()
}

/// The counts a recommendation is made from. They add up across nodes: each agent
/// reports its node's tally and the controller sums them, which gives exactly what
/// one list of every container would (and status stays small: 22 numbers a node).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Containers with room for a memory.high (a limit, or the node's allocatable,
    /// above the request); Guaranteed containers are no evidence.
    pub containers: u64,
    /// Per step of [`steps`]: the containers that fit that factor.
    pub fitting: [u64; STEPS],
    /// The containers the current factor throttles (under `Observe`: would have).
    pub throttled: u64,
}

impl Tally {
    /// Counts one container; `throttled`: whether the current factor throttles it
    /// (`!c.fits(current)` when only its peak is known; the agent also knows whether
    /// the kernel's memory.high events rose under enforcement).
    pub fn add_container(&mut self, c: &ContainerEvidence, throttled: bool) {
        if c.ceiling <= c.request {
            return;
        }
        self.containers += 1;
        for (fitting, factor) in self.fitting.iter_mut().zip(steps()) {
            *fitting += u64::from(c.fits(factor));
        }
        self.throttled += u64::from(throttled);
    }

    /// Adds another node's tally.
    pub fn add(&mut self, other: &Tally) {
        self.containers += other.containers;
        for (a, b) in self.fitting.iter_mut().zip(other.fitting) {
            *a += b;
        }
        self.throttled += other.throttled;
    }
}

/// The recommendation for a pool from its containers' evidence (those without a
/// memory.high at any factor, such as Guaranteed containers, are left out), the nodes
/// they ran on and how long they were observed, against the current factor.
pub fn recommend(
    containers: &[ContainerEvidence],
    nodes: usize,
    observed_seconds: u64,
    current: ThrottlingFactor,
    params: &RecommendParams,
) -> Recommendation {
    let mut tally = Tally::default();
    for c in containers {
        tally.add_container(c, !c.fits(current));
    }
    recommend_tally(&tally, nodes, observed_seconds, params)
}

/// The recommendation from a pool's summed tally.
pub fn recommend_tally(
    tally: &Tally,
    nodes: usize,
    observed_seconds: u64,
    params: &RecommendParams,
) -> Recommendation {
    let containers = usize::try_from(tally.containers).unwrap_or(usize::MAX);
    let evidence = Evidence {
        containers,
        nodes,
        observed_seconds,
    };
    if containers < params.min_containers.max(1)
        || observed_seconds < params.min_observed_seconds
        || nodes < params.min_nodes.max(1)
    {
        return Recommendation::TooLittleEvidence {
            evidence,
            needs_containers: params.min_containers.max(1),
            needs_observed_seconds: params.min_observed_seconds,
            needs_nodes: params.min_nodes.max(1),
        };
    }
    let share = |n: u64| n.min(tally.containers) as f64 / tally.containers as f64;
    let distribution: Vec<Step> = steps()
        .into_iter()
        .zip(tally.fitting)
        .map(|(factor, fitting)| Step {
            factor,
            share_fitting: share(fitting),
        })
        .collect();
    let current_throttled_share = share(tally.throttled);
    // From the top down while every step keeps the target: the share need not grow
    // with the factor at the very bottom (a factor too small to give a memory.high at
    // all throttles nothing).
    let lowest = distribution
        .iter()
        .rev()
        .take_while(|s| s.share_fitting >= params.target_share)
        .last()
        .copied();
    match lowest {
        Some(step) => Recommendation::Factor {
            factor: step.factor,
            share_fitting: step.share_fitting,
            current_throttled_share,
            evidence,
            distribution,
        },
        None => Recommendation::NoFactorSuffices {
            best_share: distribution.last().map_or(0.0, |s| s.share_fitting),
            current_throttled_share,
            evidence,
            distribution,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: i64 = 1 << 20;
    const PAGE: i64 = 4096;

    fn factor(f: f64) -> ThrottlingFactor {
        ThrottlingFactor::from_f64(f).unwrap()
    }

    /// A container with request 100Mi and limit 200Mi that peaked at `peak_mi`.
    fn burstable(peak_mi: i64) -> ContainerEvidence {
        ContainerEvidence {
            request: 100 * MI,
            ceiling: 200 * MI,
            page_size: PAGE,
            float: KubeletFloat::Separate,
            peak_working_set: peak_mi * MI,
        }
    }

    fn params() -> RecommendParams {
        RecommendParams {
            target_share: 0.99,
            min_containers: 10,
            min_observed_seconds: 3600,
            min_nodes: 1,
        }
    }

    #[test]
    fn a_container_fits_the_factors_whose_memory_high_covers_its_peak() {
        let c = burstable(160);
        // memory.high = 100Mi + f x 100Mi: 160Mi needs f >= 0.6.
        assert!(!c.fits(factor(0.55)));
        assert!(c.fits(factor(0.6)));
        assert_eq!(c.memory_high(factor(0.6)), Some(160 * MI));
        // No room between request and limit: no memory.high, nothing to throttle.
        let guaranteed = ContainerEvidence {
            ceiling: 100 * MI,
            ..burstable(150)
        };
        assert_eq!(guaranteed.memory_high(factor(0.9)), None);
        assert!(guaranteed.fits(factor(0.05)));
    }

    #[test]
    fn the_lowest_factor_that_keeps_the_share_from_there_upwards() {
        // 99 containers peaking at 130Mi (need 0.3), one at 190Mi (needs 0.9).
        let mut pool: Vec<ContainerEvidence> = (0..99).map(|_| burstable(130)).collect();
        pool.push(burstable(190));
        let r = recommend(&pool, 3, 7200, factor(0.9), &params());
        let Recommendation::Factor {
            factor: f,
            share_fitting,
            current_throttled_share,
            evidence,
            distribution,
        } = r
        else {
            panic!("{r:?}")
        };
        assert_eq!(f, factor(0.3));
        assert_eq!(share_fitting, 0.99);
        assert_eq!(current_throttled_share, 0.0);
        assert_eq!(
            evidence,
            Evidence {
                containers: 100,
                nodes: 3,
                observed_seconds: 7200
            }
        );
        assert_eq!(distribution.len(), 20);
        assert_eq!(distribution[4].share_fitting, 0.0, "0.25 fits nobody");
        assert_eq!(distribution[19].share_fitting, 1.0);
        // All of them at 100 %: the one at 190Mi decides.
        let all = RecommendParams {
            target_share: 1.0,
            ..params()
        };
        match recommend(&pool, 3, 7200, factor(0.5), &all) {
            Recommendation::Factor {
                factor: f,
                current_throttled_share,
                ..
            } => {
                assert_eq!(f, factor(0.9));
                assert_eq!(
                    current_throttled_share, 0.01,
                    "0.5 throttles the one at 190Mi"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn containers_that_outgrow_their_limit_get_no_factor() {
        let pool: Vec<ContainerEvidence> = (0..20).map(|_| burstable(250)).collect();
        match recommend(&pool, 1, 7200, factor(0.9), &params()) {
            Recommendation::NoFactorSuffices {
                best_share,
                current_throttled_share,
                ..
            } => {
                assert_eq!(best_share, 0.0);
                assert_eq!(current_throttled_share, 1.0);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn too_little_evidence_names_what_is_missing() {
        let pool: Vec<ContainerEvidence> = (0..9).map(|_| burstable(130)).collect();
        assert_eq!(
            recommend(&pool, 1, 7200, factor(0.9), &params()),
            Recommendation::TooLittleEvidence {
                evidence: Evidence {
                    containers: 9,
                    nodes: 1,
                    observed_seconds: 7200
                },
                needs_containers: 10,
                needs_observed_seconds: 3600,
                needs_nodes: 1,
            }
        );
        let pool: Vec<ContainerEvidence> = (0..10).map(|_| burstable(130)).collect();
        // Enough containers and time, but on one node where the caller's quorum is two.
        let quorum = RecommendParams {
            min_nodes: 2,
            ..params()
        };
        assert!(matches!(
            recommend(&pool, 1, 7200, factor(0.9), &quorum),
            Recommendation::TooLittleEvidence { needs_nodes: 2, .. }
        ));
        assert!(matches!(
            recommend(&pool, 2, 7200, factor(0.9), &quorum),
            Recommendation::Factor { .. }
        ));
        assert!(matches!(
            recommend(&pool, 1, 60, factor(0.9), &params()),
            Recommendation::TooLittleEvidence { .. }
        ));
        // Guaranteed containers are no evidence: they have no memory.high.
        let guaranteed: Vec<ContainerEvidence> = (0..50)
            .map(|_| ContainerEvidence {
                ceiling: 100 * MI,
                ..burstable(90)
            })
            .collect();
        assert!(matches!(
            recommend(&guaranteed, 1, 7200, factor(0.9), &params()),
            Recommendation::TooLittleEvidence {
                evidence: Evidence { containers: 0, .. },
                ..
            }
        ));
    }

    #[test]
    fn tallies_add_up_across_nodes_to_the_whole_pools() {
        let node_a: Vec<ContainerEvidence> = (0..30).map(|i| burstable(110 + i * 3)).collect();
        let node_b: Vec<ContainerEvidence> = (0..25).map(|i| burstable(120 + i * 4)).collect();
        let current = factor(0.5);
        let tally = |cs: &[ContainerEvidence]| {
            let mut t = Tally::default();
            for c in cs {
                t.add_container(c, !c.fits(current));
            }
            t
        };
        let mut summed = tally(&node_a);
        summed.add(&tally(&node_b));
        let whole: Vec<ContainerEvidence> = node_a.iter().chain(&node_b).copied().collect();
        assert_eq!(summed, tally(&whole));
        assert_eq!(
            recommend_tally(&summed, 2, 7200, &params()),
            recommend(&whole, 2, 7200, current, &params())
        );
        // Guaranteed containers count nowhere.
        let mut t = Tally::default();
        t.add_container(
            &ContainerEvidence {
                ceiling: 100 * MI,
                ..burstable(90)
            },
            false,
        );
        assert_eq!(t, Tally::default());
        // An empty tally never divides by zero, whatever the parameters say.
        let none = RecommendParams {
            min_containers: 0,
            min_observed_seconds: 0,
            ..params()
        };
        assert!(matches!(
            recommend_tally(&Tally::default(), 0, 0, &none),
            Recommendation::TooLittleEvidence { .. }
        ));
    }

    #[test]
    fn evidence_gives_the_memory_high_the_agent_writes() {
        use crate::pod::ContainerKind;
        use crate::values::memory_qos::container_memory_high;
        let node = NodeMemoryFacts {
            allocatable_memory: Some(8 << 30),
            hard_eviction_memory: Some(100 * MI),
            page_size: PAGE,
            ..NodeMemoryFacts::default()
        };
        for (request, limit) in [
            (0, 0),
            (64 * MI, 0),
            (64 * MI, 256 * MI),
            (256 * MI, 256 * MI),
            (0, 128 * MI),
            (100 * MI + 1, 300 * MI - 7),
            (300 * MI, 200 * MI),
        ] {
            let memory = ContainerMemory {
                kind: ContainerKind::App,
                request,
                limit,
            };
            let e = ContainerEvidence::of(&memory, &node, 0).unwrap();
            for f in steps() {
                assert_eq!(
                    e.memory_high(f),
                    container_memory_high(f, &node, request, limit),
                    "request {request}, limit {limit}, factor {f}"
                );
            }
        }
        let unknown = NodeMemoryFacts {
            allocatable_memory: None,
            ..node
        };
        let unlimited = ContainerMemory {
            kind: ContainerKind::App,
            request: MI,
            limit: 0,
        };
        assert_eq!(ContainerEvidence::of(&unlimited, &unknown, 0), None);
    }

    #[test]
    fn the_steps_are_exact_twentieths() {
        let s = steps();
        assert_eq!(s.len(), 20);
        assert_eq!(s[0], factor(0.05));
        assert_eq!(s[5], factor(0.3));
        assert_eq!(s[19], factor(1.0));
    }
}
