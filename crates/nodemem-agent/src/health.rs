//! Whether a node is healthy on its revision: no write errors, and since the revision
//! was applied no burst of OOM kills and no sustained `full` memory pressure in the
//! pods nodemem manages, against the thresholds the policy's rollout settings give.
//! A signal that cannot be read is unknown, never good: without PSI (`psi=0`) the
//! pressure gate cannot be evaluated, and the verdict says so (`Healthy=Unknown`, or
//! `True` without the gate where the policy proceeds without it).
//! Pure: readings in, verdict and signals out.

use std::collections::BTreeMap;

use nodemem_api::config::RevisionSignals;
use nodemem_api::policy::{HealthSpec, PressureUnavailable};
use nodemem_api::report::{HEALTHY_WITHOUT_PRESSURE, PRESSURE_UNAVAILABLE};

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
}

/// memory.events and memory.pressure of these cgroups (the managed pods); a cgroup
/// whose memory.events cannot be read or parsed is left out, one whose memory.pressure
/// cannot (PSI is off) has no pressure reading. A memory.pressure without a `full` line
/// (kernels before 4.20 had none for the root) reads as 0.
pub fn read_signals<'a>(
    fs: &nodemem_cgroup::CgroupFs,
    cgroups: impl Iterator<Item = &'a str>,
) -> BTreeMap<String, Reading> {
    use nodemem_cgroup::parse::{memory_events, pressure};
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
        out.insert(
            path.to_string(),
            Reading {
                high: events.high,
                oom_kill: events.oom_kill,
                full_avg60: full,
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
        }
        RevisionSignals {
            revision: self.revision.clone(),
            throttle_events: high as i64,
            oom_kills: oom as i64,
            peak_full_memory_pressure: self.peak_full,
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

/// The verdict for these signals; `current_full` the managed pods' highest full
/// pressure now (None: it cannot be read), `write_errors` failed writes in the last
/// pass, `reliefs` containers relief had to raise memory.high for since the revision.
/// A gate that fails decides; then a gate that cannot be evaluated.
pub fn verdict(
    signals: RevisionSignals,
    current_full: Option<f64>,
    limits: &HealthSpec,
    write_errors: usize,
    reliefs: u64,
) -> Verdict {
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
    } else if let Some(full) =
        current_full.filter(|f| *f > f64::from(limits.max_full_memory_pressure_percent))
    {
        (
            Some(false),
            "SustainedMemoryPressure",
            format!(
                "a managed pod spends {full:.2}% of the time fully stalled on memory (PSI full avg60; tolerated: {}%)",
                limits.max_full_memory_pressure_percent
            ),
        )
    } else if current_full.is_none() {
        let counted = format!(
            "since revision {}: {} OOM kill(s), {} memory.high event(s)",
            signals.revision, signals.oom_kills, signals.throttle_events
        );
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
        (
            Some(true),
            "Healthy",
            format!(
                "since revision {}: {} OOM kill(s), {} memory.high event(s), peak full memory pressure {:.2}%",
                signals.revision, signals.oom_kills, signals.throttle_events, signals.peak_full_memory_pressure
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

#[cfg(test)]
mod tests {
    use super::*;

    fn r(high: u64, oom_kill: u64, full: f64) -> Reading {
        Reading {
            high,
            oom_kill,
            full_avg60: Some(full),
        }
    }

    #[test]
    fn counts_since_the_revision_and_keeps_what_gone_pods_counted() {
        let mut b = Baseline::default();
        let limits = HealthSpec::default();
        // Counters that existed before the revision do not count.
        let s = b.update("r1", &BTreeMap::from([("a".into(), r(10, 4, 0.0))]));
        assert_eq!((s.throttle_events, s.oom_kills), (0, 0));
        assert!(verdict(s, Some(0.0), &limits, 0, 0).healthy == Some(true));
        let s = b.update(
            "r1",
            &BTreeMap::from([("a".into(), r(15, 6, 1.5)), ("b".into(), r(3, 1, 0.0))]),
        );
        assert_eq!(
            (s.throttle_events, s.oom_kills),
            (8, 3),
            "a: +5 +2, b (new): 3, 1"
        );
        assert!(
            verdict(s.clone(), Some(1.5), &limits, 0, 0).healthy == Some(true),
            "3 OOM kills are tolerated"
        );
        // Pod a goes away: its counts stay; b kills once more: 4 > 3.
        let s = b.update("r1", &BTreeMap::from([("b".into(), r(3, 2, 0.5))]));
        assert_eq!(s.oom_kills, 4);
        assert_eq!(s.peak_full_memory_pressure, 1.5);
        let v = verdict(s, Some(0.5), &limits, 0, 0);
        assert_eq!((v.healthy, v.reason), (Some(false), "OOMKillBurst"));
        assert!(
            v.message
                .starts_with("4 OOM kill(s) in managed pods since revision r1"),
            "{}",
            v.message
        );
        // A new revision starts over.
        let s = b.update("r2", &BTreeMap::from([("b".into(), r(3, 2, 0.0))]));
        assert_eq!((s.oom_kills, s.peak_full_memory_pressure), (0, 0.0));
    }

    #[test]
    fn pressure_and_write_errors() {
        let limits = HealthSpec {
            max_oom_kills: 0,
            max_full_memory_pressure_percent: 10,
            max_reliefs: 1,
            pressure_unavailable: PressureUnavailable::Hold,
        };
        let signals = RevisionSignals {
            revision: "r".into(),
            ..RevisionSignals::default()
        };
        let v = verdict(signals.clone(), Some(12.5), &limits, 0, 0);
        assert_eq!(
            (v.healthy, v.reason),
            (Some(false), "SustainedMemoryPressure")
        );
        assert!(v.message.contains("12.50% of the time"), "{}", v.message);
        assert_eq!(
            verdict(signals.clone(), Some(0.0), &limits, 2, 0).reason,
            "WriteErrors"
        );
        assert!(
            verdict(signals.clone(), Some(9.9), &limits, 0, 1).healthy == Some(true),
            "one relief tolerated"
        );
        let v = verdict(signals, Some(0.0), &limits, 0, 2);
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
        let v = verdict(signals.clone(), None, &limits, 0, 0);
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
            verdict(signals.clone(), None, &limits, 1, 0).healthy,
            Some(false)
        );
        assert_eq!(
            verdict(signals.clone(), None, &limits, 0, 1).reason,
            "ReliefNeeded"
        );
        limits.pressure_unavailable = PressureUnavailable::Proceed;
        let v = verdict(signals.clone(), None, &limits, 0, 0);
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
        assert_eq!(verdict(signals, None, &limits, 0, 0).reason, "OOMKillBurst");
        // The peak ignores what could not be read.
        let mut b = Baseline::default();
        let s = b.update("r", &BTreeMap::from([("a".into(), Reading::default())]));
        assert_eq!(s.peak_full_memory_pressure, 0.0);
    }
}
