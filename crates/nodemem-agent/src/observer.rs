//! What the managed containers' memory does against memory.high (issue 19): under
//! `enforcement: Observe` the memory.high nodemem would write, under `Agent` the one
//! it wrote. Every few seconds each managed container's working set (memory.current
//! minus inactive file pages, as the kubelet's eviction counts it), the kernel's
//! memory.peak and memory.events `high` are read; [`nodemem_model::feedback::observe`] keeps
//! the figures, this module keeps which containers there are and turns them into the
//! node's [`ObservationSummary`] (the tally the controller sums into a pool's
//! recommendation, and the worst containers). The containers of a workload class with
//! a memory.high of its own (its factor, or none) are tallied apart, per class: they are
//! no evidence for the pool's factor, and each class's tally is the evidence for its own.
//!
//! The cost is three small reads per container per sample and no writes; the summary
//! goes to status on whole-node passes only, so observing adds no status writes of
//! its own.

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodemem_api::config::{ClassObservation, ObservationSummary, ObservedContainer};
use nodemem_cgroup::parse::{memory_events, memory_stat, working_set};
use nodemem_cgroup::{CgroupFs, CgroupPath};
use nodemem_model::feedback::observe::{worst, ContainerObservation, Sample};
use nodemem_model::feedback::recommend::{ContainerEvidence, Tally};
use nodemem_model::node::DesiredNode;
use nodemem_model::settings::NodeSettings;
use nodemem_model::values::cgroup::MEMORY_HIGH;
use nodemem_model::values::memory_qos::NodeMemoryFacts;

/// How many containers status names.
pub const WORST: usize = 5;

/// What one sample of a container cgroup read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    pub working_set: i64,
    /// memory.peak (5.19+), None where the kernel has none.
    pub peak: Option<i64>,
    /// memory.events `high`.
    pub high_events: Option<u64>,
}

/// Reads one container cgroup; None when it is gone or a file does not parse (the
/// next sample tries again; a container that never reads is no evidence).
pub fn read(fs: &CgroupFs, path: &str) -> Option<Reading> {
    let cgroup = CgroupPath::new(path).ok()?;
    let number = |file: &str| -> Option<i64> { fs.read(&cgroup, file).ok()?.trim().parse().ok() };
    let current = number("memory.current")?;
    let stat = memory_stat("memory.stat", &fs.read(&cgroup, "memory.stat").ok()?).ok()?;
    let working_set = working_set("memory.stat", u64::try_from(current).ok()?, &stat).ok()?;
    Some(Reading {
        working_set: i64::try_from(working_set).ok()?,
        peak: number("memory.peak"),
        high_events: fs
            .read(&cgroup, "memory.events")
            .ok()
            .and_then(|t| memory_events("memory.events", &t).ok())
            .map(|e| e.high),
    })
}

/// One managed container being observed.
#[derive(Clone, Debug, PartialEq)]
struct Tracked {
    pod: String,
    container: String,
    /// The workload class its values follow (None: the pool's settings).
    class: Option<String>,
    /// The tally it counts in: None the pool's, else its class's (a class with a
    /// memory.high of its own).
    tally: Option<String>,
    memory_high: Option<i64>,
    /// Its request and what memory.high is computed towards; None when memory.high
    /// has nothing to be computed towards (no limit and no allocatable known yet).
    evidence: Option<ContainerEvidence>,
    observation: ContainerObservation,
}

impl Tracked {
    /// Its evidence for the recommendation, when it was sampled. Under enforcement a
    /// container the kernel throttled sat at memory.high: its working set shows the
    /// line, not what it needed, which was more.
    fn evidence(&self, enforced: bool) -> Option<ContainerEvidence> {
        if self.observation.samples == 0 {
            return None;
        }
        let mut e = self.evidence?;
        e.peak_working_set = self.observation.peak_working_set;
        if enforced && self.observation.throttle_events > 0 {
            if let Some(high) = self.memory_high {
                e.peak_working_set = e.peak_working_set.max(high.saturating_add(1));
            }
        }
        Some(e)
    }
}

/// The node's observation since its revision was applied.
#[derive(Debug)]
pub struct Observer {
    origin: Instant,
    revision: String,
    enforced: bool,
    since: Option<Time>,
    tracked: BTreeMap<String, Tracked>,
    /// Containers gone since, by tally (None: the pool's): they stay evidence.
    retired: BTreeMap<Option<String>, Tally>,
    /// The worst of the containers gone since.
    retired_worst: Vec<(String, Tracked)>,
    /// The counts and the worst containers the last summary put in status.
    reported: Option<Headline>,
}

/// What makes a summary worth a status write before the next resync: how many
/// containers, how many throttled, and which are the worst.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Headline {
    containers: i32,
    throttled: i32,
    worst: Vec<(String, String)>,
    /// Each class's containers and throttled ones.
    classes: Vec<(String, i32, i32)>,
}

impl Headline {
    fn of(s: &ObservationSummary) -> Self {
        Headline {
            containers: s.containers,
            throttled: s.throttled_containers,
            worst: s
                .worst
                .iter()
                .map(|w| (w.pod.clone(), w.container.clone()))
                .collect(),
            classes: s
                .classes
                .iter()
                .map(|c| (c.name.clone(), c.containers, c.throttled_containers))
                .collect(),
        }
    }
}

impl Default for Observer {
    fn default() -> Self {
        Observer {
            origin: Instant::now(),
            revision: String::new(),
            enforced: false,
            since: None,
            tracked: BTreeMap::new(),
            retired: BTreeMap::new(),
            retired_worst: Vec::new(),
            reported: None,
        }
    }
}

impl Observer {
    /// After a pass: the containers to observe and the memory.high each has (or would
    /// have) under `revision`: every managed one but the agent's own (`own_cgroup`:
    /// nodemem never sets its values), each in the tally of its class when `settings`
    /// give that class a memory.high of its own. A new revision starts the observation
    /// over: what it throttles is not what the previous one did.
    pub fn refresh(
        &mut self,
        revision: &str,
        enforced: bool,
        desired: &DesiredNode<'_>,
        own_cgroup: Option<&str>,
        facts: &NodeMemoryFacts,
        settings: &NodeSettings,
    ) {
        if self.revision != revision || self.enforced != enforced {
            *self = Observer {
                revision: revision.to_string(),
                enforced,
                ..Observer::default()
            };
        }
        let mut now: BTreeMap<String, Tracked> = BTreeMap::new();
        for (pod, c, path) in desired.managed_containers() {
            if Some(path) == own_cgroup {
                continue;
            }
            let memory_high = c.values.get(MEMORY_HIGH).and_then(|v| v.bytes());
            let class = pod.class.map(str::to_string);
            let mut tracked = self.tracked.remove(path).unwrap_or_else(|| Tracked {
                pod: format!("{}/{}", pod.namespace, pod.name),
                container: c.name.to_string(),
                class: None,
                tally: None,
                memory_high,
                evidence: None,
                observation: ContainerObservation::default(),
            });
            tracked.tally = own_tally(pod.class, settings);
            tracked.class = class;
            tracked.memory_high = memory_high;
            tracked.evidence = ContainerEvidence::of(&c.memory, facts, 0);
            now.insert(path.to_string(), tracked);
        }
        // What is left went away: it stays evidence.
        for (path, gone) in std::mem::replace(&mut self.tracked, now) {
            if let Some(e) = gone.evidence(self.enforced) {
                self.retired
                    .entry(gone.tally.clone())
                    .or_default()
                    .add_container(&e, gone.observation.would_throttle());
            }
            if gone.observation.would_throttle() {
                self.retired_worst.push((path, gone));
                let kept: Vec<(String, Tracked)> = worst_of(&self.retired_worst, WORST);
                self.retired_worst = kept;
            }
        }
    }

    /// Cgroups to sample.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.tracked.keys().map(String::as_str)
    }

    /// Records one sample per container read (`read` gives None for those gone).
    pub fn sample(&mut self, mut read: impl FnMut(&str) -> Option<Reading>) {
        let at = self.origin.elapsed().as_secs();
        for (path, t) in &mut self.tracked {
            let Some(r) = read(path) else { continue };
            t.observation.record(Sample {
                at,
                working_set: r.working_set,
                peak: r.peak,
                high_events: r.high_events,
                memory_high: t.memory_high,
            });
        }
        if self.since.is_none() && self.tracked.values().any(|t| t.observation.samples > 0) {
            self.since = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        }
    }

    /// The summary for status; None before the first sample.
    pub fn summary(&self) -> Option<ObservationSummary> {
        let since = self.since.clone()?;
        let mut tallies = self.retired.clone();
        for t in self.tracked.values() {
            if let Some(e) = t.evidence(self.enforced) {
                tallies
                    .entry(t.tally.clone())
                    .or_default()
                    .add_container(&e, t.observation.would_throttle());
            }
        }
        let tally = tallies.remove(&None).unwrap_or_default();
        let first = self
            .tracked
            .values()
            .filter(|t| t.observation.samples > 0)
            .map(|t| t.observation.since)
            .min();
        let last = self
            .tracked
            .values()
            .map(|t| t.observation.last)
            .max()
            .unwrap_or(0);
        let mut all: Vec<(String, Tracked)> = self
            .tracked
            .iter()
            .map(|(p, t)| (p.clone(), t.clone()))
            .collect();
        all.extend(self.retired_worst.iter().cloned());
        let count = |n: u64| i32::try_from(n).unwrap_or(i32::MAX);
        let fitting = |t: &Tally| t.fitting.iter().map(|n| count(*n)).collect();
        Some(ObservationSummary {
            revision: self.revision.clone(),
            enforced: self.enforced,
            since,
            observed_seconds: i64::try_from(last.saturating_sub(first.unwrap_or(last)))
                .unwrap_or(i64::MAX),
            containers: count(tally.containers),
            throttled_containers: count(tally.throttled),
            fitting_by_factor: fitting(&tally),
            worst: worst_of(&all, WORST)
                .into_iter()
                .map(|(_, t)| observed(&t))
                .collect(),
            classes: tallies
                .into_iter()
                .filter_map(|(name, t)| {
                    Some(ClassObservation {
                        name: name?,
                        containers: count(t.containers),
                        throttled_containers: count(t.throttled),
                        fitting_by_factor: fitting(&t),
                    })
                })
                .collect(),
        })
    }

    /// Whether the summary tells something the last one in status did not (containers
    /// first seen, newly throttled, another worst one): then it is worth a whole-node
    /// pass before the next resync. Figures that only grow (seconds, peaks) wait.
    pub fn news(&self) -> bool {
        self.summary()
            .is_some_and(|s| self.reported.as_ref() != Some(&Headline::of(&s)))
    }

    /// The summary as it goes into status, remembered for [`Observer::news`].
    pub fn report(&mut self) -> Option<ObservationSummary> {
        let s = self.summary();
        self.reported = s.as_ref().map(Headline::of);
        s
    }

    /// Containers observed now, and those of them throttled (or that would be).
    pub fn counts(&self) -> (usize, usize) {
        let sampled = self.tracked.values().filter(|t| t.observation.samples > 0);
        let throttled = sampled
            .clone()
            .filter(|t| t.observation.would_throttle())
            .count();
        (sampled.count(), throttled)
    }
}

/// The tally a container of `class` counts in: its class's when the class's memory.high
/// is not the pool's (its own factor, or none), else the pool's (None). A class the
/// policy lacks follows the pool (its pods get the pool's settings).
fn own_tally(class: Option<&str>, settings: &NodeSettings) -> Option<String> {
    let c = settings
        .classes
        .iter()
        .find(|c| Some(c.name.as_str()) == class)?;
    let pool = &settings.memory_qos;
    (c.memory_qos(pool).throttling_factor != pool.throttling_factor).then(|| c.name.clone())
}

fn worst_of(all: &[(String, Tracked)], n: usize) -> Vec<(String, Tracked)> {
    let by_path: BTreeMap<&String, &Tracked> = all.iter().map(|(p, t)| (p, t)).collect();
    let observations: BTreeMap<&String, ContainerObservation> =
        by_path.iter().map(|(p, t)| (*p, t.observation)).collect();
    worst(observations.iter(), n)
        .into_iter()
        .map(|(p, _)| (p.clone(), by_path[p].clone()))
        .collect()
}

fn observed(t: &Tracked) -> ObservedContainer {
    let o = &t.observation;
    ObservedContainer {
        pod: t.pod.clone(),
        container: t.container.clone(),
        memory_high: t.memory_high.unwrap_or(0),
        peak_working_set: o.peak_working_set,
        memory_peak: o.kernel_peak,
        seconds_above_high: i64::try_from(o.seconds_above_high).unwrap_or(i64::MAX),
        max_excess_bytes: o.max_excess,
        throttle_events: i64::try_from(o.throttle_events).unwrap_or(i64::MAX),
        class: t.class.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_node::{burstable, desired as desired_of, facts, path_of, pod, settings, MI};
    use nodemem_model::node::{NodeFacts, NodePod};
    use nodemem_model::settings::NodeSettings;
    use nodemem_model::values::memory_qos::ReservationPolicy;
    use serde_json::json;

    /// Settings at factor 0.5, the node, and its pods.
    fn fixture() -> (NodeSettings, NodeFacts, Vec<NodePod>) {
        (
            settings(0.5, ReservationPolicy::TieredReservation),
            facts(),
            pods(),
        )
    }

    fn pods() -> Vec<NodePod> {
        vec![
            // memory.high at 0.5: 64Mi + 0.5 x 192Mi = 160Mi.
            burstable("web", &"a".repeat(64)),
            // Guaranteed: no memory.high, no evidence.
            pod(
                "gold",
                &"b".repeat(64),
                json!({"requests": {"memory": "128Mi"}, "limits": {"memory": "128Mi"}}),
            ),
            // BestEffort: towards the node's allocatable.
            pod("batch", &"c".repeat(64), json!({})),
        ]
    }

    /// Working sets in MiB per pod name for one sample.
    fn sample(o: &mut Observer, desired: &DesiredNode<'_>, mib: &[(&str, i64, u64)]) {
        let by_path: BTreeMap<String, (i64, u64)> = mib
            .iter()
            .map(|(pod, ws, events)| (path_of(desired, pod), (*ws, *events)))
            .collect();
        o.sample(|path| {
            by_path.get(path).map(|(ws, events)| Reading {
                working_set: ws * MI,
                peak: Some(ws * MI + 50 * MI),
                high_events: Some(*events),
            })
        });
    }

    #[test]
    fn a_container_above_the_would_be_memory_high_is_counted_named_and_kept_when_gone() {
        let (settings, facts, pods) = fixture();
        let desired = desired_of(&settings, &facts, &pods);
        let mut o = Observer::default();
        // The agent's own container is not observed: nodemem never sets its values.
        let own = path_of(&desired, "batch");
        o.refresh(
            "r1",
            false,
            &desired,
            Some(&own),
            &facts.memory,
            &NodeSettings::default(),
        );
        assert_eq!(o.paths().count(), 2);
        assert!(o.paths().all(|p| p != own));
        o.refresh(
            "r1",
            false,
            &desired,
            None,
            &facts.memory,
            &NodeSettings::default(),
        );
        assert_eq!(o.summary(), None, "nothing sampled yet");
        assert_eq!(o.paths().count(), 3);
        sample(
            &mut o,
            &desired,
            &[("web", 100, 0), ("gold", 120, 0), ("batch", 10, 0)],
        );
        sample(
            &mut o,
            &desired,
            &[("web", 210, 0), ("gold", 120, 0), ("batch", 12, 0)],
        );
        assert!(o.news(), "first figures");
        let s = o.report().unwrap();
        assert!(!o.news(), "reported");
        sample(
            &mut o,
            &desired,
            &[("web", 205, 0), ("gold", 120, 0), ("batch", 12, 0)],
        );
        assert!(!o.news(), "only figures that grow changed");
        assert_eq!((s.revision.as_str(), s.enforced), ("r1", false));
        assert_eq!(s.containers, 2, "the Guaranteed one has no memory.high");
        assert_eq!(s.throttled_containers, 1);
        assert_eq!(o.counts(), (3, 1));
        // web needs (210 - 64) / 192 = 0.76: it fits from 0.80 on; batch fits all.
        let expected: Vec<i32> = (1..=20).map(|k| if k >= 16 { 2 } else { 1 }).collect();
        assert_eq!(s.fitting_by_factor, expected);
        assert_eq!(s.worst.len(), 1);
        let web = &s.worst[0];
        assert_eq!(
            (web.pod.as_str(), web.container.as_str()),
            ("shop/web", "app")
        );
        assert_eq!(web.memory_high, 160 * MI);
        assert_eq!(web.peak_working_set, 210 * MI);
        assert_eq!(web.max_excess_bytes, 50 * MI);
        assert_eq!(web.memory_peak, Some(260 * MI), "the kernel's peak, beside");

        // web goes away: it stays evidence and stays named.
        let fewer: Vec<NodePod> = pods.iter().skip(1).cloned().collect();
        let desired_fewer = desired_of(&settings, &facts, &fewer);
        o.refresh(
            "r1",
            false,
            &desired_fewer,
            None,
            &facts.memory,
            &NodeSettings::default(),
        );
        assert_eq!(o.paths().count(), 2);
        let after = o.summary().unwrap();
        assert_eq!(
            (
                after.containers,
                after.throttled_containers,
                &after.fitting_by_factor
            ),
            (2, 1, &expected)
        );
        assert_eq!(after.worst[0].pod, "shop/web");

        // A new revision starts over.
        o.refresh(
            "r2",
            false,
            &desired_fewer,
            None,
            &facts.memory,
            &NodeSettings::default(),
        );
        assert_eq!(o.summary(), None);
    }

    #[test]
    fn under_enforcement_a_throttled_container_needed_more_than_its_memory_high() {
        let (settings, facts, pods) = fixture();
        let desired = desired_of(&settings, &facts, &pods);
        let mut o = Observer::default();
        o.refresh(
            "r1",
            true,
            &desired,
            None,
            &facts.memory,
            &NodeSettings::default(),
        );
        // web is held at its memory.high (160Mi) and the kernel counts the events.
        sample(&mut o, &desired, &[("web", 159, 7), ("batch", 10, 0)]);
        sample(&mut o, &desired, &[("web", 160, 19), ("batch", 10, 0)]);
        let s = o.summary().unwrap();
        assert!(s.enforced);
        assert_eq!(s.throttled_containers, 1);
        assert_eq!(s.worst[0].throttle_events, 12);
        // Not fitting at 0.5 (its working set shows the line, not its need), fitting
        // the factors above.
        assert_eq!(s.fitting_by_factor[9], 1, "0.50: only batch");
        assert_eq!(s.fitting_by_factor[10], 2, "0.55: both");
        // Switching between Agent and Observe starts over as well.
        o.refresh(
            "r1",
            false,
            &desired,
            None,
            &facts.memory,
            &NodeSettings::default(),
        );
        assert_eq!(o.summary(), None);
    }

    /// Workload classes (issue 63): a class with a factor of its own and one without
    /// memory.high are tallied apart, each on its own; a class that keeps the pool's
    /// factor (it only drops protection) and a class the policy lacks count with the
    /// pool, whose tally is then the evidence for the pool's factor alone.
    #[test]
    fn classes_with_a_memory_high_of_their_own_are_tallied_apart() {
        use crate::test_node::classed;
        use nodemem_model::class::{ClassMemoryHigh, Protection, WorkloadClass};
        use nodemem_model::values::factor::ThrottlingFactor;
        let mut settings = settings(0.5, ReservationPolicy::TieredReservation);
        settings.classes = vec![
            WorkloadClass {
                memory_high: ClassMemoryHigh::Factor(ThrottlingFactor::from_f64(0.25).unwrap()),
                ..WorkloadClass::named("batch")
            },
            WorkloadClass {
                memory_high: ClassMemoryHigh::Unset,
                ..WorkloadClass::named("service")
            },
            WorkloadClass {
                protection: Protection::Unprotected,
                ..WorkloadClass::named("loose")
            },
        ];
        let pods = vec![
            burstable("web", &"a".repeat(64)),
            classed(burstable("etl", &"b".repeat(64)), "batch"),
            classed(burstable("api", &"c".repeat(64)), "service"),
            classed(burstable("cron", &"d".repeat(64)), "loose"),
            classed(burstable("odd", &"e".repeat(64)), "nowhere"),
        ];
        let f = facts();
        let desired = desired_of(&settings, &f, &pods);
        let mut o = Observer::default();
        o.refresh("r1", false, &desired, None, &f.memory, &settings);
        // etl at 0.25 has 64 + 48 = 112Mi: 120Mi is over it, and fits from 0.30 on.
        sample(
            &mut o,
            &desired,
            &[
                ("web", 100, 0),
                ("etl", 120, 0),
                ("api", 240, 0),
                ("cron", 100, 0),
                ("odd", 100, 0),
            ],
        );
        let s = o.summary().unwrap();
        assert_eq!(
            (s.containers, s.throttled_containers),
            (3, 0),
            "web, cron and odd follow the pool's factor"
        );
        let by_name: BTreeMap<&str, &ClassObservation> =
            s.classes.iter().map(|c| (c.name.as_str(), c)).collect();
        assert_eq!(
            by_name.keys().copied().collect::<Vec<_>>(),
            ["batch", "service"]
        );
        let batch = by_name["batch"];
        assert_eq!((batch.containers, batch.throttled_containers), (1, 1));
        let from = |c: &ClassObservation| c.fitting_by_factor.iter().position(|n| *n == 1);
        // (120 - 64) / 192 = 0.29: fits from 0.30 (the sixth step) on.
        assert_eq!(from(batch), Some(5));
        let service = by_name["service"];
        assert_eq!(
            (service.containers, service.throttled_containers),
            (1, 0),
            "no memory.high: never throttled"
        );
        // (240 - 64) / 192 = 0.92: it would need 0.95.
        assert_eq!(from(service), Some(18));
        let etl = s.worst.iter().find(|w| w.pod == "shop/etl").unwrap();
        assert_eq!(etl.class.as_deref(), Some("batch"));
        // Gone, a class's container stays its class's evidence.
        let fewer: Vec<NodePod> = pods
            .iter()
            .filter(|p| p.pod().name != "etl")
            .cloned()
            .collect();
        let desired_fewer = desired_of(&settings, &f, &fewer);
        o.refresh("r1", false, &desired_fewer, None, &f.memory, &settings);
        let after = o.summary().unwrap();
        assert_eq!(
            after.classes.iter().find(|c| c.name == "batch"),
            Some(batch)
        );
        assert_eq!(after.containers, 3);
    }

    #[test]
    fn a_container_that_cannot_be_read_is_no_evidence() {
        let (settings, facts, pods) = fixture();
        let desired = desired_of(&settings, &facts, &pods);
        let mut o = Observer::default();
        o.refresh(
            "r1",
            false,
            &desired,
            None,
            &facts.memory,
            &NodeSettings::default(),
        );
        sample(&mut o, &desired, &[("batch", 10, 0)]);
        let s = o.summary().unwrap();
        assert_eq!(s.containers, 1);
        assert_eq!(o.counts(), (1, 0));
    }
}
