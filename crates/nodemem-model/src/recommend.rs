//! The throttling factor a pool's workloads tolerate, from what they did (issue 19,
//! pure). For each container with a memory.high, memory.high = request + factor x
//! (limit, or the node's allocatable, - request), page-rounded down
//! ([`ThrottlingFactor::memory_high`], the same integer math the agent writes with).
//! A container fits a factor when its highest working set stayed at or under the
//! memory.high that factor gives (or when the factor gives it no memory.high at all).
//! The recommendation is the lowest factor, in steps of 0.05, from which on upwards at
//! least the target share of containers fits; too little evidence gives none, and
//! says how much is missing.

use crate::factor::ThrottlingFactor;

/// What one container did, as its agent observed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContainerEvidence {
    /// memory request, bytes.
    pub request: i64,
    /// What memory.high is computed towards: the memory limit, or the node's
    /// allocatable memory for a container without one.
    pub ceiling: i64,
    pub page_size: i64,
    /// The highest working set seen (memory.current minus inactive file pages, or the
    /// kernel's memory.peak where that is the better bound).
    pub peak_working_set: i64,
}

impl ContainerEvidence {
    /// The memory.high `factor` gives this container, or None when it would set none
    /// (as the kubelet: no room between request and ceiling, or not above the request).
    pub fn memory_high(&self, factor: ThrottlingFactor) -> Option<i64> {
        if self.ceiling <= self.request {
            return None;
        }
        let high = factor.memory_high(self.request, self.ceiling, self.page_size);
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
}

impl Default for RecommendParams {
    fn default() -> Self {
        RecommendParams {
            target_share: 0.99,
            min_containers: 20,
            min_observed_seconds: 24 * 3600,
        }
    }
}

/// The evidence a recommendation stands on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Evidence {
    pub containers: usize,
    pub nodes: usize,
    pub observed_seconds: u64,
}

/// One step of the distribution: a factor and the share of containers that fit it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    pub factor: ThrottlingFactor,
    pub share_fitting: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Recommendation {
    /// `factor` keeps at least the target share under memory.high, and every higher
    /// step does too; `current_throttled_share` is the share the current factor would
    /// throttle.
    Factor {
        factor: ThrottlingFactor,
        share_fitting: f64,
        current_throttled_share: f64,
        evidence: Evidence,
        distribution: Vec<Step>,
    },
    /// Even a factor of 1 keeps fewer than the target share under memory.high: those
    /// containers outgrow their limits, which no factor mends.
    NoFactorSuffices {
        best_share: f64,
        current_throttled_share: f64,
        evidence: Evidence,
        distribution: Vec<Step>,
    },
    /// Not enough to go on; what is missing is named.
    TooLittleEvidence {
        evidence: Evidence,
        needs_containers: usize,
        needs_observed_seconds: u64,
    },
}

/// The factors recommended from: 0.05, 0.10, ... 1.
pub fn steps() -> Vec<ThrottlingFactor> {
    (1..=20)
        .map(|k| ThrottlingFactor::from_f64(f64::from(k) / 20.0).expect("k/20 is in (0, 1]"))
        .collect()
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
    let with_high: Vec<&ContainerEvidence> = containers
        .iter()
        .filter(|c| c.ceiling > c.request)
        .collect();
    let evidence = Evidence {
        containers: with_high.len(),
        nodes,
        observed_seconds,
    };
    if with_high.len() < params.min_containers || observed_seconds < params.min_observed_seconds {
        return Recommendation::TooLittleEvidence {
            evidence,
            needs_containers: params.min_containers,
            needs_observed_seconds: params.min_observed_seconds,
        };
    }
    let share = |f: ThrottlingFactor| {
        with_high.iter().filter(|c| c.fits(f)).count() as f64 / with_high.len() as f64
    };
    let distribution: Vec<Step> = steps()
        .into_iter()
        .map(|factor| Step {
            factor,
            share_fitting: share(factor),
        })
        .collect();
    let current_throttled_share =
        with_high.iter().filter(|c| !c.fits(current)).count() as f64 / with_high.len() as f64;
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
            peak_working_set: peak_mi * MI,
        }
    }

    fn params() -> RecommendParams {
        RecommendParams {
            target_share: 0.99,
            min_containers: 10,
            min_observed_seconds: 3600,
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
            }
        );
        let pool: Vec<ContainerEvidence> = (0..10).map(|_| burstable(130)).collect();
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
    fn the_steps_are_exact_twentieths() {
        let s = steps();
        assert_eq!(s.len(), 20);
        assert_eq!(s[0], factor(0.05));
        assert_eq!(s[5], factor(0.3));
        assert_eq!(s[19], factor(1.0));
    }
}
