//! Proactive reclaim of one cgroup (issue 46, pure): cold memory given back through
//! `memory.reclaim` in small steps while the cgroup's memory pressure stays under a
//! target, the method of Meta's Senpai and TMO (ASPLOS 2022). One controller per
//! cgroup, fed one sample at a time; time is in seconds from any fixed origin.
//!
//! Where it follows Senpai (facebookincubator/senpai, `senpai.py`): the signal is the
//! stall time PSI `some` accrued since the last step (its cumulative `total`, in
//! microseconds), against a target per second of that time; the step shrinks with the
//! square of how close the stall is to the target, reaching its largest (a share of
//! the cgroup's memory) when the stall is a tenth of the target or less. Where it
//! differs: Senpai moves memory.high both ways, and backs off by raising it; a
//! `memory.reclaim` cannot be undone, so stall over the target, or refaults over their
//! budget (TMO's second signal: reclaimed pages that were needed again), only stop the
//! steps for an interval. And it never asks for more than it could take above the
//! cgroup's floor (what its pod requested): its page cache, active and inactive (the
//! kernel ages active pages to the inactive list as it reclaims, and active cache is
//! what the kubelet's `memory.available` counts: reclaiming inactive cache alone gains
//! no eviction headroom), and its anonymous memory only where swap can take it; the
//! pressure and refault signals judge whether what it took was cold. The kernel may
//! take more than it is asked: on
//! the real node's Linux 6.1 a request of 50 MiB from 200 MiB of cold page cache took
//! 87 MiB (2026-11-28), and its own protection does not hold the floor (the cgroup
//! written to is the root of the reclaim, which has none): a step is written in parts
//! that keep even the kernel's worst above the floor (`super::reclaim_parts`), and the
//! agent counts what memory.current lost, not what it asked.

use crate::pod::qos::QosClass;

/// What a policy asks of reclaim (`reclaim`; absent or `Disabled`: nothing).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reclaim {
    /// Observe or Active.
    pub mode: ReclaimMode,
    /// How fast and how far it goes.
    pub settings: ReclaimSettings,
    /// The QoS classes whose containers it acts on.
    pub classes: Vec<QosClass>,
}

/// Whether reclaim writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReclaimMode {
    /// Every step is computed and reported as what would be reclaimed; nothing is
    /// written.
    Observe,
    /// Steps are written to memory.reclaim.
    Active,
}

/// The policy's reclaim settings for this cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReclaimSettings {
    /// The stall (PSI `some`) the cgroup may accrue, in microseconds per second: 1,000
    /// is 0.1 % of the time with some task waiting on memory.
    pub target_stall_us_per_s: u64,
    /// The largest step, in per mille of the cgroup's memory.current (Senpai: 1 %).
    pub max_step_permille: u32,
    /// The time between steps, and the pause after a back-off.
    pub interval_seconds: u64,
    /// Refaults (pages read back after reclaim) per second above which it backs off.
    pub max_refaults_per_s: u64,
}

/// One reading of the cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Seconds since the epoch.
    pub at: u64,
    /// memory.pressure `some total=` (microseconds, cumulative).
    pub stall_total_us: u64,
    /// memory.current.
    pub current: i64,
    /// memory.stat `inactive_file`.
    pub inactive_file: i64,
    /// memory.stat `active_file`.
    pub active_file: i64,
    /// memory.stat `anon`.
    pub anon: i64,
    /// memory.stat `workingset_refault_anon` + `workingset_refault_file` (cumulative).
    pub refaults: u64,
    /// Never reclaimed below: what the cgroup's pod requested (0 when nothing).
    pub floor: i64,
    /// Whether swap can take its anonymous pages (the node has swap and the cgroup's
    /// memory.swap.max is not 0): only then is anon memory reclaim may take.
    pub swap: bool,
}

impl Sample {
    /// What a step may take at most: the page cache, and the anonymous memory where
    /// swap can take it, above the floor.
    pub fn reclaimable(&self) -> i64 {
        let anon = if self.swap { self.anon.max(0) } else { 0 };
        let takeable = self.inactive_file.max(0) + self.active_file.max(0) + anon;
        takeable.min(self.current - self.floor).max(0)
    }

    /// The working set as the kubelet counts it (cAdvisor: usage less inactive file,
    /// never below 0): what its `memory.available` subtracts.
    pub fn working_set(&self) -> i64 {
        (self.current - self.inactive_file.max(0)).max(0)
    }
}

/// What to do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Write this many bytes to memory.reclaim.
    Reclaim {
        /// Bytes to ask the kernel to reclaim.
        bytes: i64,
    },
    /// Nothing this time, and why.
    Hold(Hold),
}

/// Why a sample brings no step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// The first sample, or the first after the counters went back (a new cgroup at
    /// the same path): the baseline.
    Baseline,
    /// The interval since the last step or back-off has not passed.
    Waiting {
        /// When the next step may come, seconds since the epoch.
        until: u64,
    },
    /// The stall since the last step is over the target: backed off until `until`.
    Pressure {
        /// The stall measured, microseconds per second.
        stall_us_per_s: u64,
        /// When steps resume, seconds since the epoch.
        until: u64,
    },
    /// Refaults since the last step are over their budget: backed off until `until`.
    Refaults {
        /// The refaults measured, per second.
        per_s: u64,
        /// When steps resume, seconds since the epoch.
        until: u64,
    },
    /// Nothing to take above the floor (or less than a page of it).
    NothingCold,
}

/// A stall at a tenth of the target or less gives the largest step (Senpai's
/// `coeff_probe`).
const PROBE_COEFFICIENT: f64 = 10.0;
const PAGE: i64 = 4096;

/// One cgroup's reclaim.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reclaimer {
    /// The sample the stall and the refaults are counted from: the last step's, the
    /// last back-off's, or the baseline.
    since: Option<Sample>,
    /// No step before this.
    next_at: u64,
    /// Whether `since` is a step's sample: only then do refaults within budget show
    /// that what was taken was cold.
    since_step: bool,
    /// Refault back-offs since a step last showed refaults within budget: each
    /// doubles the pause (see [`MAX_REFAULT_DOUBLINGS`]).
    refault_back_offs: u32,
    /// Bytes asked of memory.reclaim so far.
    pub asked: i64,
}

/// A container whose reclaimed pages keep coming back (a hot page cache) is stepped
/// ever more rarely: the pause after a refault back-off doubles each time, up to 64
/// intervals, and is one interval again once a step takes nothing it reads again. A
/// single interval let a container that reads its 48Mi file ten times a second refault
/// 84,645 pages in two minutes on the real node (2026-11-28).
pub const MAX_REFAULT_DOUBLINGS: u32 = 6;

impl Reclaimer {
    /// Whether a sample at `now` (seconds) can bring a step or a back-off: the first
    /// one, or one once the interval passed; a sample before is only waiting.
    pub fn due(&self, now: u64) -> bool {
        self.since.is_none() || now >= self.next_at
    }

    /// The step for the sample `now` under `s`: how much to reclaim, or why nothing.
    pub fn step(&mut self, s: &ReclaimSettings, now: &Sample) -> Step {
        let Some(since) = self.since.filter(|p| counted_from(p, now)) else {
            self.since = Some(*now);
            self.next_at = now.at + s.interval_seconds;
            return Step::Hold(Hold::Baseline);
        };
        let seconds = now.at.saturating_sub(since.at).max(1);
        let stall = now.stall_total_us - since.stall_total_us;
        let stall_us_per_s = stall / seconds;
        let until = now.at + s.interval_seconds;
        // Refaults first: pages a step took that come back stall the container too, and
        // that is the refault back-off's to count (found on the real node: judged as
        // pressure first, a hot page cache was backed off from one interval at a time).
        let per_s = (now.refaults - since.refaults) / seconds;
        if per_s > s.max_refaults_per_s {
            let doubling = self.refault_back_offs.min(MAX_REFAULT_DOUBLINGS);
            self.refault_back_offs = self.refault_back_offs.saturating_add(1);
            let until = now.at + (s.interval_seconds << doubling);
            self.restart(now, until);
            return Step::Hold(Hold::Refaults { per_s, until });
        }
        if stall_us_per_s > s.target_stall_us_per_s {
            self.restart(now, until);
            return Step::Hold(Hold::Pressure {
                stall_us_per_s,
                until,
            });
        }
        if self.since_step {
            // What the last step took was not read again: the container is cold.
            self.refault_back_offs = 0;
        }
        if now.at < self.next_at {
            return Step::Hold(Hold::Waiting {
                until: self.next_at,
            });
        }
        let bytes = step_bytes(s, now, stall, seconds);
        if bytes < PAGE {
            return Step::Hold(Hold::NothingCold);
        }
        self.restart(now, until);
        self.since_step = true;
        self.asked += bytes;
        Step::Reclaim { bytes }
    }

    /// Counts stall and refaults from `now` on, and waits until `until`.
    fn restart(&mut self, now: &Sample, until: u64) {
        self.since = Some(*now);
        self.since_step = false;
        self.next_at = until;
    }
}

/// Whether `now` counts on from `since`: time and the kernel's counters went forward.
fn counted_from(since: &Sample, now: &Sample) -> bool {
    now.at >= since.at
        && now.stall_total_us >= since.stall_total_us
        && now.refaults >= since.refaults
}

/// The step: the largest share of memory.current scaled by the square of how far the
/// stall is under the target (1 at a tenth of it or less), within what is cold above
/// the floor, in whole pages.
fn step_bytes(s: &ReclaimSettings, now: &Sample, stall_us: u64, seconds: u64) -> i64 {
    // In f64, as Senpai computes it: a share needs no exact fraction, and squared
    // microsecond counts stay far from any bound (u128 products of them could not).
    let target = s.target_stall_us_per_s as f64 * seconds as f64;
    let closeness = target / (stall_us.max(1) as f64 * PROBE_COEFFICIENT);
    let share = (closeness * closeness).min(1.0) * f64::from(s.max_step_permille) / 1000.0;
    let bytes = ((now.current.max(0) as f64 * share) as i64).min(now.reclaimable());
    bytes - bytes % PAGE
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: i64 = 1 << 20;
    const SETTINGS: ReclaimSettings = ReclaimSettings {
        target_stall_us_per_s: 1_000,
        max_step_permille: 10,
        interval_seconds: 6,
        max_refaults_per_s: 100,
    };

    /// A cgroup of 1 GiB, 600 MiB of it inactive file cache, 100 MiB anon, a 256 MiB
    /// floor, no swap; no stall and no refaults yet.
    fn sample(at: u64) -> Sample {
        Sample {
            at,
            stall_total_us: 0,
            current: 1024 * MI,
            inactive_file: 600 * MI,
            active_file: 0,
            anon: 100 * MI,
            refaults: 0,
            floor: 256 * MI,
            swap: false,
        }
    }

    fn run(r: &mut Reclaimer, samples: &[Sample]) -> Vec<Step> {
        samples.iter().map(|x| r.step(&SETTINGS, x)).collect()
    }

    /// 1 % of 1 GiB in whole pages.
    const FULL_STEP: i64 = (1024 * MI / 100) / PAGE * PAGE;

    #[test]
    fn without_pressure_it_takes_the_largest_step_every_interval() {
        let mut r = Reclaimer::default();
        let steps = run(
            &mut r,
            &[sample(0), sample(3), sample(6), sample(9), sample(12)],
        );
        assert_eq!(
            steps,
            [
                Step::Hold(Hold::Baseline),
                Step::Hold(Hold::Waiting { until: 6 }),
                Step::Reclaim { bytes: FULL_STEP },
                Step::Hold(Hold::Waiting { until: 12 }),
                Step::Reclaim { bytes: FULL_STEP },
            ]
        );
        assert_eq!(r.asked, 2 * FULL_STEP);
    }

    #[test]
    fn the_step_shrinks_with_the_square_of_the_stall_near_the_target() {
        // Over 6 s the target is 6,000 µs. A stall of 600 µs (a tenth) gives the full
        // step; 1,200 µs a quarter of it ((6000/1200/10)^2); 6,000 µs a hundredth.
        for (stall, share) in [(0u64, 1.0), (600, 1.0), (1_200, 0.25), (6_000, 0.01)] {
            let mut r = Reclaimer::default();
            let mut later = sample(6);
            later.stall_total_us = stall;
            let steps = run(&mut r, &[sample(0), later]);
            let want = ((1024 * MI / 100) as f64 * share) as i64 / PAGE * PAGE;
            assert_eq!(steps[1], Step::Reclaim { bytes: want }, "stall {stall}");
        }
    }

    #[test]
    fn stall_over_the_target_backs_off_for_an_interval_and_then_it_resumes() {
        let mut r = Reclaimer::default();
        let mut hot = sample(6);
        hot.stall_total_us = 60_000; // 10,000 µs/s against 1,000
        let mut calm = sample(12);
        calm.stall_total_us = 60_000; // no stall since the back-off
        let steps = run(&mut r, &[sample(0), hot, calm]);
        assert_eq!(
            steps[1],
            Step::Hold(Hold::Pressure {
                stall_us_per_s: 10_000,
                until: 12
            })
        );
        assert_eq!(steps[2], Step::Reclaim { bytes: FULL_STEP });
    }

    #[test]
    fn refaults_over_their_budget_back_off() {
        let mut r = Reclaimer::default();
        let mut refaulting = sample(6);
        refaulting.refaults = 6 * 500;
        let steps = run(&mut r, &[sample(0), refaulting]);
        assert_eq!(
            steps[1],
            Step::Hold(Hold::Refaults {
                per_s: 500,
                until: 12
            })
        );
        assert_eq!(r.asked, 0);
    }

    #[test]
    fn a_container_that_keeps_refaulting_is_stepped_ever_more_rarely_until_a_step_stays_cold() {
        let mut r = Reclaimer::default();
        let mut s = sample(0);
        r.step(&SETTINGS, &s);
        // Each step's pages come back before the next reading.
        let mut pauses = Vec::new();
        for _ in 0..9 {
            s.at = r.next_at;
            match r.step(&SETTINGS, &s) {
                Step::Reclaim { .. } => {
                    s.at += SETTINGS.interval_seconds;
                    s.refaults += 1_000 * SETTINGS.interval_seconds;
                    match r.step(&SETTINGS, &s) {
                        Step::Hold(Hold::Refaults { until, .. }) => pauses.push(until - s.at),
                        other => panic!("{other:?}"),
                    }
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(pauses, [6, 12, 24, 48, 96, 192, 384, 384, 384]);
        // A step whose pages stay away: one interval again.
        s.at = r.next_at;
        assert!(matches!(r.step(&SETTINGS, &s), Step::Reclaim { .. }));
        s.at += SETTINGS.interval_seconds;
        assert!(matches!(r.step(&SETTINGS, &s), Step::Reclaim { .. }));
        s.at += SETTINGS.interval_seconds;
        s.refaults += 1_000 * SETTINGS.interval_seconds;
        assert_eq!(
            r.step(&SETTINGS, &s),
            Step::Hold(Hold::Refaults {
                per_s: 1_000,
                until: s.at + SETTINGS.interval_seconds
            })
        );
    }

    #[test]
    fn refaults_that_stall_the_container_are_a_refault_back_off() {
        let mut r = Reclaimer::default();
        let mut s = sample(6);
        s.stall_total_us = 60_000;
        s.refaults = 6 * 500;
        assert!(matches!(
            run(&mut r, &[sample(0), s])[1],
            Step::Hold(Hold::Refaults { .. })
        ));
    }

    #[test]
    fn never_below_the_floor_nor_more_than_is_cold() {
        // 40 MiB above the floor, 600 MiB cold: steps of 1 % until the floor.
        let mut near = sample(0);
        near.current = 296 * MI;
        let mut r = Reclaimer::default();
        let mut at = 0;
        let mut steps = vec![r.step(&SETTINGS, &near)];
        while at < 6 * 200 {
            at += 6;
            near.at = at;
            let step = r.step(&SETTINGS, &near);
            if let Step::Reclaim { bytes } = step {
                near.current -= bytes;
                near.inactive_file -= bytes;
            }
            steps.push(step);
        }
        assert!(
            near.current >= near.floor,
            "{} below {}",
            near.current,
            near.floor
        );
        assert!(
            near.current - near.floor < PAGE,
            "stopped {} above the floor",
            near.current - near.floor
        );
        assert_eq!(steps.last(), Some(&Step::Hold(Hold::NothingCold)));

        // No page cache and no swap: nothing to take, however much is above the floor.
        let mut hot = sample(6);
        hot.inactive_file = 0;
        hot.active_file = 0;
        let mut r = Reclaimer::default();
        assert_eq!(
            run(&mut r, &[sample(0), hot])[1],
            Step::Hold(Hold::NothingCold)
        );
    }

    #[test]
    fn anon_is_takeable_only_where_swap_can_take_it() {
        let mut s = sample(0);
        s.inactive_file = 0;
        assert_eq!(s.reclaimable(), 0);
        s.active_file = 10 * MI;
        assert_eq!(s.reclaimable(), 10 * MI, "active cache is taken too");
        s.active_file = 0;
        s.swap = true;
        assert_eq!(s.reclaimable(), 100 * MI);
        s.floor = 1000 * MI;
        assert_eq!(s.reclaimable(), 24 * MI, "the floor bounds it");
    }

    #[test]
    fn the_working_set_is_the_kubelets_usage_less_inactive_file() {
        let mut s = sample(0);
        s.active_file = 200 * MI;
        assert_eq!(s.working_set(), 424 * MI);
        // Reclaiming inactive cache gains the kubelet nothing; active cache does.
        s.current -= 100 * MI;
        s.inactive_file -= 100 * MI;
        assert_eq!(s.working_set(), 424 * MI);
        s.current -= 100 * MI;
        s.active_file -= 100 * MI;
        assert_eq!(s.working_set(), 324 * MI);
        s.inactive_file = 2048 * MI;
        assert_eq!(s.working_set(), 0, "never below 0");
    }

    #[test]
    fn a_step_is_due_first_then_once_the_interval_passed() {
        let mut r = Reclaimer::default();
        assert!(r.due(0));
        r.step(&SETTINGS, &sample(0));
        assert!(!r.due(5));
        assert!(r.due(6));
    }

    #[test]
    fn counters_that_went_back_start_a_new_baseline() {
        let mut r = Reclaimer::default();
        let mut before = sample(0);
        before.stall_total_us = 5_000_000;
        let recreated = sample(6); // a new cgroup at the same path: counters from 0
        let steps = run(&mut r, &[before, recreated, sample(12)]);
        assert_eq!(steps[1], Step::Hold(Hold::Baseline));
        assert_eq!(steps[2], Step::Reclaim { bytes: FULL_STEP });
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Over any run of samples: every step is whole pages, within what was
            /// cold above the floor then, never two steps within an interval, and none
            /// after a stall over the target or refaults over the budget.
            #[test]
            fn steps_stay_within_the_cold_memory_and_the_signals(
                readings in prop::collection::vec(
                    (1..20u64, 0..20_000u64, 0..2_000u64, 0..1024i64, 0..1024i64, any::<bool>()),
                    1..60,
                ),
            ) {
                let mut r = Reclaimer::default();
                let mut s = sample(0);
                // The last step's or back-off's sample, and the time to wait for.
                let mut counted = s;
                let mut quiet_until = SETTINGS.interval_seconds;
                r.step(&SETTINGS, &s);
                for (dt, stall, refaults, file, anon, swap) in readings {
                    s.at += dt;
                    s.stall_total_us += stall * dt;
                    s.refaults += refaults * dt;
                    s.inactive_file = file * MI;
                    s.active_file = (file / 3) * MI;
                    s.anon = anon * MI;
                    s.swap = swap;
                    let step = r.step(&SETTINGS, &s);
                    let over = (s.stall_total_us - counted.stall_total_us)
                        / (s.at - counted.at).max(1) > SETTINGS.target_stall_us_per_s
                        || (s.refaults - counted.refaults) / (s.at - counted.at).max(1)
                            > SETTINGS.max_refaults_per_s;
                    match step {
                        Step::Reclaim { bytes } => {
                            prop_assert!(!over);
                            prop_assert_eq!(bytes % PAGE, 0);
                            prop_assert!(bytes > 0 && bytes <= s.reclaimable());
                            prop_assert!(bytes <= s.current / 100);
                            prop_assert!(s.at >= quiet_until, "a step at {} before {}", s.at, quiet_until);
                            counted = s;
                            quiet_until = s.at + SETTINGS.interval_seconds;
                        }
                        Step::Hold(Hold::Pressure { .. } | Hold::Refaults { .. }) => {
                            prop_assert!(over);
                            counted = s;
                            quiet_until = s.at + SETTINGS.interval_seconds;
                        }
                        Step::Hold(_) => {}
                    }
                }
            }
        }
    }
}
