//! Whether a node is healthy on its revision: no write errors, and since the revision
//! was applied no burst of OOM kills, no sustained `full` memory pressure and (where
//! gated) no refault rate over the gate in the pods nodemem manages, against the
//! thresholds the policy's rollout settings give.
//! A signal that cannot be read is unknown, never good: without PSI (`psi=0`) the
//! pressure gate cannot be evaluated, and the verdict says so (`Healthy=Unknown`, or
//! `True` without the gate where the policy proceeds without it).
//! Pure: readings (and their instants) in, verdict and signals out.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use nodemem_api::config::RevisionSignals;
use nodemem_api::policy::{HealthSpec, PressureUnavailable};
use nodemem_api::report::{HEALTHY_WITHOUT_PRESSURE, PRESSURE_UNAVAILABLE, REFAULTS_UNKNOWN};

/// The shortest time a refault rate is measured over: readings closer together than
/// this wait for a later one (a rate over a second or two is one reclaim step's
/// noise). The agent reads again this long after a gated revision is applied.
pub const REFAULT_SPAN: Duration = Duration::from_secs(10);

/// One managed pod's signals now.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reading {
    /// memory.events `high`, cumulative.
    pub high: u64,
    /// memory.events `oom_kill`, cumulative.
    pub oom_kill: u64,
    /// memory.pressure `full avg60`, percent; None: memory.pressure cannot be read
    /// (PSI is off).
    pub full_avg60: Option<f64>,
    /// memory.stat refaults, cumulative (`nodemem_cgroup::parse::refaults`); None:
    /// memory.stat cannot be read or counts none (or, not judged, is not read).
    pub refaults: Option<u64>,
    /// Whether the refault gate judges this pod: under Active reclaim, a pod whose
    /// containers reclaim took from under the revision; otherwise every managed pod
    /// where the revision is gated.
    pub judged: bool,
}

/// memory.events, memory.pressure and, for the pods `judged` names (the refault gate
/// judges them), memory.stat's refaults of these cgroups (the managed pods); a cgroup whose
/// memory.events cannot be read or parsed is left out, one whose memory.pressure
/// cannot (PSI is off) has no pressure reading, one whose memory.stat cannot (or is
/// not read) no refault count. A memory.pressure without a `full` line (kernels
/// before 4.20 had none for the root) reads as 0.
pub fn read_signals<'a>(
    fs: &nodemem_cgroup::CgroupFs,
    cgroups: impl Iterator<Item = &'a str>,
    judged: &dyn Fn(&str) -> bool,
) -> BTreeMap<String, Reading> {
    use nodemem_cgroup::parse::{memory_events, memory_stat, pressure, refaults as count_refaults};
    let mut out = BTreeMap::new();
    for path in cgroups {
        let Ok(p) = nodemem_cgroup::CgroupPath::new(path) else {
            continue;
        };
        let events = fs
            .read(&p, "memory.events")
            .ok()
            .and_then(|t| memory_events("memory.events", &t).ok());
        let Some(events) = events else { continue };
        let full = fs
            .read(&p, "memory.pressure")
            .ok()
            .and_then(|t| pressure("memory.pressure", &t).ok())
            .map(|p| p.full.map_or(0.0, |f| f.avg60));
        // Only where judged: a file more per pod on every whole-node pass otherwise.
        let judged = judged(path);
        let refaults = judged
            .then(|| fs.read(&p, "memory.stat").ok())
            .flatten()
            .and_then(|t| memory_stat("memory.stat", &t).ok())
            .and_then(|stat| count_refaults(&stat));
        out.insert(
            path.to_string(),
            Reading {
                high: events.high,
                oom_kill: events.oom_kill,
                full_avg60: full,
                refaults,
                judged,
            },
        );
    }
    out
}

/// The counters at the moment a revision was applied, per pod cgroup, and what pods
/// that went away had accumulated.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Baseline {
    revision: String,
    start: BTreeMap<String, (u64, u64)>,
    last: BTreeMap<String, (u64, u64)>,
    retired: (u64, u64),
    peak_full: f64,
    /// Per pod cgroup: the refault count a rate is measured from, and the last rate.
    refaults: BTreeMap<String, RefaultMeter>,
    /// A managed pod whose refaults could not be read at the last reading.
    refaults_unread: Option<String>,
    peak_refaults: Option<f64>,
}

#[derive(Clone, Debug, PartialEq)]
struct RefaultMeter {
    from: (Instant, u64),
    rate: Option<f64>,
}

impl RefaultMeter {
    /// Folds in `count` read at `at`: a new rate once REFAULT_SPAN has passed since the
    /// count it measures from. A count lower than that (a cgroup made again under the
    /// same path) starts the measure over.
    fn read(&mut self, at: Instant, count: u64) -> Option<f64> {
        let (since, from) = self.from;
        let span = at.saturating_duration_since(since);
        if count < from {
            self.from = (at, count);
        } else if span >= REFAULT_SPAN {
            self.rate = Some((count - from) as f64 / span.as_secs_f64());
            self.from = (at, count);
        }
        self.rate
    }
}

/// The verdict's reason when the refault gate fails.
pub const SUSTAINED_REFAULTS: &str = "SustainedRefaults";

/// The refault gate's input this pass.
#[derive(Clone, Debug, PartialEq)]
pub enum Refaults {
    /// The revision is not gated on refaults.
    NotGated,
    /// The highest rate measured among the managed pods (pages a second; 0 with no
    /// managed pod), against the gate.
    Measured { rate: f64, gate: i32 },
    /// No managed pod's rate is measured yet under this revision (one reading gives
    /// none).
    Unmeasured { gate: i32 },
    /// This managed pod's memory.stat cannot be read or counts no refaults.
    Unreadable { pod: String, gate: i32 },
}

/// The refault gate these settings are judged by under `limits` (pages a second per
/// pod; None: not gated): the gate's default applies where reclaim is Active, as
/// `Reclaim` runs it (validation refuses Active but under `enforcement: Agent`).
pub fn refault_gate(
    limits: &HealthSpec,
    settings: &nodemem_model::settings::NodeSettings,
) -> Option<i32> {
    limits.refault_gate(reclaim_active(settings))
}

/// Whether these settings' reclaim is Active (the pool's, or a workload class's):
/// then the refault gate judges only the pods reclaim took from (a pod that refaults on
/// its own is not reclaim's doing), and a node whose gate fails stops reclaiming.
pub fn reclaim_active(settings: &nodemem_model::settings::NodeSettings) -> bool {
    use nodemem_model::feedback::reclaim::ReclaimMode;
    nodemem_model::node::reclaim_targets::headline(settings)
        .is_some_and(|r| r.mode == ReclaimMode::Active)
}

/// What the gates read now, beyond the counts since the revision.
#[derive(Clone, Debug, PartialEq)]
pub struct Now {
    /// The managed pods' highest full pressure now; None: it cannot be read.
    pub full: Option<f64>,
    pub refaults: Refaults,
}

impl Now {
    /// Pressure alone, the refault gate off.
    pub fn pressure(full: Option<f64>) -> Now {
        Now {
            full,
            refaults: Refaults::NotGated,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// None: unknown (a gate cannot be evaluated and the policy holds for it).
    pub healthy: Option<bool>,
    pub reason: &'static str,
    pub message: String,
    pub signals: RevisionSignals,
}

impl Baseline {
    /// Folds in this pass's readings for `revision` (a new revision starts from the
    /// counters as they are now).
    pub fn update(
        &mut self,
        revision: &str,
        readings: &BTreeMap<String, Reading>,
        at: Instant,
    ) -> RevisionSignals {
        if self.revision != revision {
            *self = Baseline {
                revision: revision.to_string(),
                start: readings
                    .iter()
                    .map(|(p, r)| (p.clone(), (r.high, r.oom_kill)))
                    .collect(),
                ..Baseline::default()
            };
        }
        // Pods gone since the last pass keep what they counted.
        let gone: Vec<String> = self
            .last
            .keys()
            .filter(|p| !readings.contains_key(*p))
            .cloned()
            .collect();
        self.refaults
            .retain(|p, _| readings.get(p).is_some_and(|r| r.judged));
        self.refaults_unread = None;
        for p in gone {
            let (h, o) = self.delta(&p, self.last[&p]);
            self.retired.0 += h;
            self.retired.1 += o;
            self.last.remove(&p);
            self.start.remove(&p);
        }
        let (mut high, mut oom) = self.retired;
        for (p, r) in readings {
            // A pod first seen after the revision counts from zero (a fresh cgroup).
            self.start.entry(p.clone()).or_insert((0, 0));
            self.last.insert(p.clone(), (r.high, r.oom_kill));
            let (h, o) = self.delta(p, (r.high, r.oom_kill));
            high += h;
            oom += o;
            self.peak_full = self.peak_full.max(r.full_avg60.unwrap_or(0.0));
            if r.judged {
                self.read_refaults(p, r.refaults, at);
            }
        }
        RevisionSignals {
            revision: self.revision.clone(),
            throttle_events: high as i64,
            oom_kills: oom as i64,
            peak_full_memory_pressure: self.peak_full,
            peak_refaults_per_second: self.peak_refaults.map(|r| r.round() as i64),
        }
    }

    fn read_refaults(&mut self, pod: &str, count: Option<u64>, at: Instant) {
        let Some(count) = count else {
            self.refaults_unread.get_or_insert_with(|| pod.to_string());
            return;
        };
        let meter = self
            .refaults
            .entry(pod.to_string())
            .or_insert(RefaultMeter {
                from: (at, count),
                rate: None,
            });
        if let Some(rate) = meter.read(at, count) {
            self.peak_refaults = Some(self.peak_refaults.unwrap_or(0.0).max(rate));
        }
    }

    /// The refault gate's input after the last update, for a revision gated at `gate`
    /// pages a second per pod (None: not gated). Pods not measured yet (first seen at
    /// the last reading) are judged from their second reading on.
    pub fn refaults(&self, gate: Option<i32>) -> Refaults {
        let Some(gate) = gate else {
            return Refaults::NotGated;
        };
        if let Some(pod) = &self.refaults_unread {
            return Refaults::Unreadable {
                pod: pod.clone(),
                gate,
            };
        }
        let mut rates = self.refaults.values().filter_map(|m| m.rate).peekable();
        if rates.peek().is_none() && !self.refaults.is_empty() {
            return Refaults::Unmeasured { gate };
        }
        Refaults::Measured {
            rate: rates.fold(0.0, f64::max),
            gate,
        }
    }

    fn delta(&self, path: &str, now: (u64, u64)) -> (u64, u64) {
        let start = self.start.get(path).copied().unwrap_or((0, 0));
        (now.0.saturating_sub(start.0), now.1.saturating_sub(start.1))
    }
}

/// The highest `full avg60` among these readings; None when any of them could not read
/// memory.pressure (the gate would judge the pods it can read only).
pub fn current_full<'a>(readings: impl IntoIterator<Item = &'a Reading>) -> Option<f64> {
    readings
        .into_iter()
        .try_fold(0.0f64, |max, r| Some(max.max(r.full_avg60?)))
}

/// The verdict for these signals; `now` what the gates read now (the managed pods'
/// highest full pressure, None: it cannot be read; their refault rates where gated),
/// `write_errors` failed writes in the last pass, `reliefs` containers relief had to
/// raise memory.high for since the revision. A gate that fails decides; then a gate
/// that cannot be evaluated.
pub fn verdict(
    signals: RevisionSignals,
    now: Now,
    limits: &HealthSpec,
    write_errors: usize,
    reliefs: u64,
) -> Verdict {
    let counted = format!(
        "since revision {}: {} OOM kill(s), {} memory.high event(s)",
        signals.revision, signals.oom_kills, signals.throttle_events
    );
    let (healthy, reason, message) = if write_errors > 0 {
        (
            Some(false),
            "WriteErrors",
            format!("{write_errors} write(s) failed in the last pass"),
        )
    } else if signals.oom_kills > i64::from(limits.max_oom_kills) {
        (
            Some(false),
            "OOMKillBurst",
            format!(
                "{} OOM kill(s) in managed pods since revision {} was applied (tolerated: {})",
                signals.oom_kills, signals.revision, limits.max_oom_kills
            ),
        )
    } else if reliefs > u64::try_from(limits.max_reliefs).unwrap_or(0) {
        (
            Some(false),
            "ReliefNeeded",
            format!(
                "{reliefs} container(s) needed relief from memory.high since revision {} was applied (tolerated: {}): the revision chokes them",
                signals.revision, limits.max_reliefs
            ),
        )
    } else if let Some(full) = now
        .full
        .filter(|f| *f > f64::from(limits.max_full_memory_pressure_percent))
    {
        (
            Some(false),
            "SustainedMemoryPressure",
            format!(
                "a managed pod spends {full:.2}% of the time fully stalled on memory (PSI full avg60; tolerated: {}%)",
                limits.max_full_memory_pressure_percent
            ),
        )
    } else if let Some((rate, gate)) = over_gate(&now.refaults) {
        (
            Some(false),
            SUSTAINED_REFAULTS,
            format!(
                "a managed pod reads back {rate:.0} evicted page(s) a second (memory.stat workingset_refault_*; tolerated: {gate}): it is losing memory it still uses, since revision {}",
                signals.revision
            ),
        )
    } else if let Some(why) = refaults_unknown(&now.refaults) {
        (
            None,
            REFAULTS_UNKNOWN,
            format!("{why}, so maxRefaultsPerSecond cannot be evaluated and this node is not counted ready; {counted}"),
        )
    } else if now.full.is_none() {
        match limits.pressure_unavailable {
            PressureUnavailable::Hold => (
                None,
                PRESSURE_UNAVAILABLE,
                format!(
                    "memory pressure cannot be read (no memory.pressure: PSI is off; boot the kernel with psi=1), so maxFullMemoryPressurePercent cannot be evaluated and this node is not counted ready (health.pressureUnavailable: Hold; Proceed judges it on the other gates); {counted}"
                ),
            ),
            PressureUnavailable::Proceed => (
                Some(true),
                HEALTHY_WITHOUT_PRESSURE,
                format!(
                    "{counted}; memory pressure not evaluated: it cannot be read (PSI is off; boot the kernel with psi=1), and health.pressureUnavailable is Proceed"
                ),
            ),
        }
    } else {
        let refaults = match &now.refaults {
            Refaults::Measured { rate, gate } => {
                format!(", refaults {rate:.0}/s at most now (tolerated: {gate})")
            }
            _ => String::new(),
        };
        (
            Some(true),
            "Healthy",
            format!(
                "{counted}, peak full memory pressure {:.2}%{refaults}",
                signals.peak_full_memory_pressure
            ),
        )
    };
    Verdict {
        healthy,
        reason,
        message,
        signals,
    }
}

/// The rate and its gate where a measured rate is over the gate.
fn over_gate(refaults: &Refaults) -> Option<(f64, i32)> {
    match *refaults {
        Refaults::Measured { rate, gate } if rate > f64::from(gate) => Some((rate, gate)),
        _ => None,
    }
}

/// Why the refault gate cannot be evaluated; None: it can (or is off).
fn refaults_unknown(refaults: &Refaults) -> Option<String> {
    match refaults {
        Refaults::Unmeasured { .. } => Some(format!(
            "no managed pod's refault rate is measured yet under this revision (one reading gives none; the next comes within {} s)",
            REFAULT_SPAN.as_secs()
        )),
        Refaults::Unreadable { pod, .. } => Some(format!(
            "the refaults of managed pod cgroup {pod} cannot be read (memory.stat has no workingset_refault counts)"
        )),
        Refaults::NotGated | Refaults::Measured { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(high: u64, oom_kill: u64, full: f64) -> Reading {
        Reading {
            high,
            oom_kill,
            full_avg60: Some(full),
            refaults: Some(0),
            judged: true,
        }
    }

    /// One instant the tests count from.
    fn t0() -> Instant {
        static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *T0.get_or_init(Instant::now)
    }

    #[test]
    fn counts_since_the_revision_and_keeps_what_gone_pods_counted() {
        let mut b = Baseline::default();
        let limits = HealthSpec::default();
        // Counters that existed before the revision do not count.
        let s = b.update("r1", &BTreeMap::from([("a".into(), r(10, 4, 0.0))]), t0());
        assert_eq!((s.throttle_events, s.oom_kills), (0, 0));
        assert!(verdict(s, Now::pressure(Some(0.0)), &limits, 0, 0).healthy == Some(true));
        let s = b.update(
            "r1",
            &BTreeMap::from([("a".into(), r(15, 6, 1.5)), ("b".into(), r(3, 1, 0.0))]),
            t0(),
        );
        assert_eq!(
            (s.throttle_events, s.oom_kills),
            (8, 3),
            "a: +5 +2, b (new): 3, 1"
        );
        assert!(
            verdict(s.clone(), Now::pressure(Some(1.5)), &limits, 0, 0).healthy == Some(true),
            "3 OOM kills are tolerated"
        );
        // Pod a goes away: its counts stay; b kills once more: 4 > 3.
        let s = b.update("r1", &BTreeMap::from([("b".into(), r(3, 2, 0.5))]), t0());
        assert_eq!(s.oom_kills, 4);
        assert_eq!(s.peak_full_memory_pressure, 1.5);
        let v = verdict(s, Now::pressure(Some(0.5)), &limits, 0, 0);
        assert_eq!((v.healthy, v.reason), (Some(false), "OOMKillBurst"));
        assert!(
            v.message
                .starts_with("4 OOM kill(s) in managed pods since revision r1"),
            "{}",
            v.message
        );
        // A new revision starts over.
        let s = b.update("r2", &BTreeMap::from([("b".into(), r(3, 2, 0.0))]), t0());
        assert_eq!((s.oom_kills, s.peak_full_memory_pressure), (0, 0.0));
    }

    #[test]
    fn pressure_and_write_errors() {
        let limits = HealthSpec {
            max_oom_kills: 0,
            max_full_memory_pressure_percent: 10,
            max_reliefs: 1,
            pressure_unavailable: PressureUnavailable::Hold,
            max_refaults_per_second: None,
        };
        let signals = RevisionSignals {
            revision: "r".into(),
            ..RevisionSignals::default()
        };
        let v = verdict(signals.clone(), Now::pressure(Some(12.5)), &limits, 0, 0);
        assert_eq!(
            (v.healthy, v.reason),
            (Some(false), "SustainedMemoryPressure")
        );
        assert!(v.message.contains("12.50% of the time"), "{}", v.message);
        assert_eq!(
            verdict(signals.clone(), Now::pressure(Some(0.0)), &limits, 2, 0).reason,
            "WriteErrors"
        );
        assert!(
            verdict(signals.clone(), Now::pressure(Some(9.9)), &limits, 0, 1).healthy == Some(true),
            "one relief tolerated"
        );
        let v = verdict(signals, Now::pressure(Some(0.0)), &limits, 0, 2);
        assert_eq!((v.healthy, v.reason), (Some(false), "ReliefNeeded"));
        assert!(
            v.message
                .starts_with("2 container(s) needed relief from memory.high since revision r"),
            "{}",
            v.message
        );
    }

    #[test]
    fn pressure_that_cannot_be_read_is_unknown_never_good() {
        let readings = [r(0, 0, 3.0), Reading::default()];
        assert_eq!(current_full(&readings[..1]), Some(3.0));
        assert_eq!(
            current_full(&readings),
            None,
            "one pod without PSI: unknown"
        );
        assert_eq!(
            current_full(&[]),
            Some(0.0),
            "no managed pod: nothing stalls"
        );
        let mut limits = HealthSpec::default();
        let signals = RevisionSignals {
            revision: "r".into(),
            oom_kills: 1,
            ..RevisionSignals::default()
        };
        let v = verdict(signals.clone(), Now::pressure(None), &limits, 0, 0);
        assert_eq!((v.healthy, v.reason), (None, "PressureUnavailable"));
        assert!(
            v.message.starts_with("memory pressure cannot be read (no memory.pressure: PSI is off; boot the kernel with psi=1), so maxFullMemoryPressurePercent cannot be evaluated and this node is not counted ready (health.pressureUnavailable: Hold"),
            "{}",
            v.message
        );
        assert!(
            v.message
                .ends_with("since revision r: 1 OOM kill(s), 0 memory.high event(s)"),
            "{}",
            v.message
        );
        // A gate that fails still decides: unknown pressure does not hide it.
        assert_eq!(
            verdict(signals.clone(), Now::pressure(None), &limits, 1, 0).healthy,
            Some(false)
        );
        assert_eq!(
            verdict(signals.clone(), Now::pressure(None), &limits, 0, 1).reason,
            "ReliefNeeded"
        );
        limits.pressure_unavailable = PressureUnavailable::Proceed;
        let v = verdict(signals.clone(), Now::pressure(None), &limits, 0, 0);
        assert_eq!(
            (v.healthy, v.reason),
            (Some(true), "HealthyWithoutPressure")
        );
        assert!(
            v.message.contains("memory pressure not evaluated"),
            "{}",
            v.message
        );
        limits.max_oom_kills = 0;
        assert_eq!(
            verdict(signals, Now::pressure(None), &limits, 0, 0).reason,
            "OOMKillBurst"
        );
        // The peak ignores what could not be read.
        let mut b = Baseline::default();
        let s = b.update(
            "r",
            &BTreeMap::from([("a".into(), Reading::default())]),
            t0(),
        );
        assert_eq!(s.peak_full_memory_pressure, 0.0);
    }

    fn refaulted(count: Option<u64>) -> Reading {
        Reading {
            refaults: count,
            ..r(0, 0, 0.0)
        }
    }

    /// The verdict at the default limits, with neither a write error nor a relief.
    fn judged(s: RevisionSignals, full: f64, refaults: Refaults) -> Verdict {
        let now = Now {
            full: Some(full),
            refaults,
        };
        verdict(s, now, &HealthSpec::default(), 0, 0)
    }

    fn at(seconds: u64) -> Instant {
        t0() + Duration::from_secs(seconds)
    }

    #[test]
    fn a_refault_rate_is_measured_over_ten_seconds_at_least_and_judged_per_pod() {
        let mut b = Baseline::default();
        let pods = |a: u64, c: u64| {
            BTreeMap::from([
                ("a".to_string(), refaulted(Some(a))),
                ("c".to_string(), refaulted(Some(c))),
            ])
        };
        // Not gated: nothing to measure against, whatever the counts.
        b.update("r", &pods(0, 0), at(0));
        assert_eq!(b.refaults(None), Refaults::NotGated);
        // One reading gives no rate: unknown, never good.
        assert_eq!(b.refaults(Some(50)), Refaults::Unmeasured { gate: 50 });
        // 4 s later: too short a span to measure.
        b.update("r", &pods(400, 0), at(4));
        assert_eq!(b.refaults(Some(50)), Refaults::Unmeasured { gate: 50 });
        // 12 s after the first reading: a read back 1200 pages (100/s), c none.
        let s = b.update("r", &pods(1200, 0), at(12));
        assert_eq!(
            b.refaults(Some(50)),
            Refaults::Measured {
                rate: 100.0,
                gate: 50
            }
        );
        assert_eq!(s.peak_refaults_per_second, Some(100));
        let v = judged(s.clone(), 0.0, b.refaults(Some(50)));
        assert_eq!((v.healthy, v.reason), (Some(false), "SustainedRefaults"));
        assert!(
            v.message.starts_with("a managed pod reads back 100 evicted page(s) a second (memory.stat workingset_refault_*; tolerated: 50)"),
            "{}",
            v.message
        );
        // The same rate under a gate of 100 passes (over, not at), and says so.
        let v = judged(s, 0.0, b.refaults(Some(100)));
        assert_eq!(v.healthy, Some(true));
        assert!(
            v.message
                .ends_with("refaults 100/s at most now (tolerated: 100)"),
            "{}",
            v.message
        );
        // a calms down: the next span's rate is the pod's rate; the peak stays.
        let s = b.update("r", &pods(1300, 0), at(32));
        assert_eq!(
            b.refaults(Some(50)),
            Refaults::Measured {
                rate: 5.0,
                gate: 50
            }
        );
        assert_eq!(s.peak_refaults_per_second, Some(100));
        // A new pod is judged from its second reading on: the node stays measured.
        let mut three = pods(1300, 0);
        three.insert("d".into(), refaulted(Some(9_000_000)));
        b.update("r", &three, at(35));
        assert_eq!(
            b.refaults(Some(50)),
            Refaults::Measured {
                rate: 5.0,
                gate: 50
            }
        );
        // A cgroup made again under its path counts from its new count.
        let mut again = pods(10, 0);
        again.insert("d".into(), refaulted(Some(9_000_100)));
        b.update("r", &again, at(50));
        let rates = b.refaults(Some(50));
        assert_eq!(
            rates,
            Refaults::Measured {
                rate: 100.0 / 15.0,
                gate: 50
            },
            "d: 100 pages in 15 s; a's lower count measures nothing yet"
        );
        // A new revision measures again from its first reading.
        b.update("r2", &again, at(51));
        assert_eq!(b.refaults(Some(50)), Refaults::Unmeasured { gate: 50 });
    }

    /// Issue 58: under Active reclaim the gate judges the pods reclaim took from. A pod
    /// it never touched that refaults on its own (reading back 1,000 pages a second)
    /// does not fail the node; once reclaim takes from it, the same rate does.
    #[test]
    fn a_pod_the_gate_does_not_judge_may_refault_without_failing_the_node() {
        let mut b = Baseline::default();
        let pods = |untouched: u64, judged: bool| {
            BTreeMap::from([
                (
                    "busy".to_string(),
                    Reading {
                        judged,
                        ..refaulted(Some(untouched))
                    },
                ),
                ("quiet".to_string(), refaulted(Some(0))),
            ])
        };
        b.update("r", &pods(0, false), at(0));
        let s = b.update("r", &pods(12_000, false), at(12));
        assert_eq!(
            b.refaults(Some(100)),
            Refaults::Measured {
                rate: 0.0,
                gate: 100
            }
        );
        assert_eq!(judged(s, 0.0, b.refaults(Some(100))).healthy, Some(true));
        // Reclaim took from it: judged from its next readings on.
        b.update("r", &pods(12_000, true), at(13));
        let s = b.update("r", &pods(24_000, true), at(25));
        let v = judged(s, 0.0, b.refaults(Some(100)));
        assert_eq!((v.healthy, v.reason), (Some(false), SUSTAINED_REFAULTS));
    }

    #[test]
    fn refaults_that_cannot_be_read_hold_the_node_where_gated() {
        let mut b = Baseline::default();
        let readings = BTreeMap::from([
            ("a".to_string(), refaulted(Some(3))),
            ("b".to_string(), refaulted(None)),
        ]);
        let s = b.update("r", &readings, at(0));
        assert_eq!(b.refaults(None), Refaults::NotGated);
        let refaults = b.refaults(Some(1000));
        assert_eq!(
            refaults,
            Refaults::Unreadable {
                pod: "b".into(),
                gate: 1000
            }
        );
        let v = judged(s.clone(), 0.0, refaults);
        assert_eq!((v.healthy, v.reason), (None, "RefaultsUnknown"));
        assert!(
            v.message.starts_with("the refaults of managed pod cgroup b cannot be read (memory.stat has no workingset_refault counts), so maxRefaultsPerSecond cannot be evaluated and this node is not counted ready; since revision r: 0 OOM kill(s)"),
            "{}",
            v.message
        );
        // Unmeasured reads as unknown too, and says when the next reading comes.
        let v = judged(s.clone(), 0.0, Refaults::Unmeasured { gate: 1000 });
        assert_eq!(v.healthy, None);
        assert!(
            v.message.contains("the next comes within 10 s"),
            "{}",
            v.message
        );
        // A failing gate still decides over an unknown one.
        let v = judged(s, 50.0, Refaults::Unmeasured { gate: 1000 });
        assert_eq!(v.reason, "SustainedMemoryPressure");
        // No managed pod: nothing refaults.
        let mut empty = Baseline::default();
        empty.update("r", &BTreeMap::new(), at(0));
        assert_eq!(
            empty.refaults(Some(7)),
            Refaults::Measured { rate: 0.0, gate: 7 }
        );
    }

    #[test]
    fn the_refault_gate_defaults_under_active_reclaim_only() {
        let mut limits = HealthSpec::default();
        assert_eq!(limits.refault_gate(false), None);
        assert_eq!(limits.refault_gate(true), Some(1000));
        limits.max_refaults_per_second = Some(20);
        assert_eq!(limits.refault_gate(false), Some(20));
        assert_eq!(limits.refault_gate(true), Some(20));
    }

    #[test]
    fn refaults_are_read_from_memory_stat_only_where_gated() {
        let root = tempfile::tempdir().unwrap();
        let pod = root.path().join("kubepods/burstable/pod1");
        std::fs::create_dir_all(&pod).unwrap();
        std::fs::write(
            pod.join("memory.events"),
            "low 0\nhigh 2\nmax 0\noom 0\noom_kill 1\n",
        )
        .unwrap();
        std::fs::write(
            pod.join("memory.pressure"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=1.50 avg300=0.00 total=0\n",
        )
        .unwrap();
        std::fs::write(
            pod.join("memory.stat"),
            "anon 0\nworkingset_refault_anon 7\nworkingset_refault_file 40\n",
        )
        .unwrap();
        let fs = nodemem_cgroup::CgroupFs::new(root.path());
        let read = |gated: bool| {
            read_signals(&fs, ["kubepods/burstable/pod1"].into_iter(), &|_| gated)
                ["kubepods/burstable/pod1"]
        };
        let gated = read(true);
        assert_eq!(
            (gated.high, gated.oom_kill, gated.full_avg60, gated.refaults),
            (2, 1, Some(1.5), Some(47))
        );
        assert_eq!(read(false).refaults, None, "memory.stat not read");
        // A memory.stat without refault counts: none, which the gate holds on.
        std::fs::write(pod.join("memory.stat"), "anon 0\n").unwrap();
        assert_eq!(read(true).refaults, None);
    }
}
