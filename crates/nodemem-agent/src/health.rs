//! Whether a node is healthy on its revision: no write errors, and since the revision
//! was applied no burst of OOM kills and no sustained `full` memory pressure in the
//! pods nodemem manages, against the thresholds the policy's rollout settings give.
//! Pure: readings in, verdict and signals out.

use std::collections::BTreeMap;

use nodemem_api::config::RevisionSignals;
use nodemem_api::policy::HealthSpec;

/// One managed pod's signals now.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reading {
    /// memory.events `high`, cumulative.
    pub high: u64,
    /// memory.events `oom_kill`, cumulative.
    pub oom_kill: u64,
    /// memory.pressure `full avg60`, percent.
    pub full_avg60: f64,
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
    pub healthy: bool,
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
            self.peak_full = self.peak_full.max(r.full_avg60);
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

/// The verdict for these signals; `write_errors` failed writes in the last pass,
/// `reliefs` containers relief had to raise memory.high for since the revision.
pub fn verdict(
    signals: RevisionSignals,
    current_full: f64,
    limits: &HealthSpec,
    write_errors: usize,
    reliefs: u64,
) -> Verdict {
    let (healthy, reason, message) = if write_errors > 0 {
        (
            false,
            "WriteErrors",
            format!("{write_errors} write(s) failed in the last pass"),
        )
    } else if signals.oom_kills > i64::from(limits.max_oom_kills) {
        (
            false,
            "OOMKillBurst",
            format!(
                "{} OOM kill(s) in managed pods since revision {} was applied (tolerated: {})",
                signals.oom_kills, signals.revision, limits.max_oom_kills
            ),
        )
    } else if reliefs > u64::try_from(limits.max_reliefs).unwrap_or(0) {
        (
            false,
            "ReliefNeeded",
            format!(
                "{reliefs} container(s) needed relief from memory.high since revision {} was applied (tolerated: {}): the revision chokes them",
                signals.revision, limits.max_reliefs
            ),
        )
    } else if current_full > f64::from(limits.max_full_memory_pressure_percent) {
        (
            false,
            "SustainedMemoryPressure",
            format!(
                "a managed pod spends {current_full:.2}% of the time fully stalled on memory (PSI full avg60; tolerated: {}%)",
                limits.max_full_memory_pressure_percent
            ),
        )
    } else {
        (
            true,
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
            full_avg60: full,
        }
    }

    #[test]
    fn counts_since_the_revision_and_keeps_what_gone_pods_counted() {
        let mut b = Baseline::default();
        let limits = HealthSpec::default();
        // Counters that existed before the revision do not count.
        let s = b.update("r1", &BTreeMap::from([("a".into(), r(10, 4, 0.0))]));
        assert_eq!((s.throttle_events, s.oom_kills), (0, 0));
        assert!(verdict(s, 0.0, &limits, 0, 0).healthy);
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
            verdict(s.clone(), 1.5, &limits, 0, 0).healthy,
            "3 OOM kills are tolerated"
        );
        // Pod a goes away: its counts stay; b kills once more: 4 > 3.
        let s = b.update("r1", &BTreeMap::from([("b".into(), r(3, 2, 0.5))]));
        assert_eq!(s.oom_kills, 4);
        assert_eq!(s.peak_full_memory_pressure, 1.5);
        let v = verdict(s, 0.5, &limits, 0, 0);
        assert_eq!((v.healthy, v.reason), (false, "OOMKillBurst"));
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
        };
        let signals = RevisionSignals {
            revision: "r".into(),
            ..RevisionSignals::default()
        };
        let v = verdict(signals.clone(), 12.5, &limits, 0, 0);
        assert_eq!((v.healthy, v.reason), (false, "SustainedMemoryPressure"));
        assert!(v.message.contains("12.50% of the time"), "{}", v.message);
        assert_eq!(
            verdict(signals.clone(), 0.0, &limits, 2, 0).reason,
            "WriteErrors"
        );
        assert!(
            verdict(signals.clone(), 9.9, &limits, 0, 1).healthy,
            "one relief tolerated"
        );
        let v = verdict(signals, 0.0, &limits, 0, 2);
        assert_eq!((v.healthy, v.reason), (false, "ReliefNeeded"));
        assert!(
            v.message
                .starts_with("2 container(s) needed relief from memory.high since revision r"),
            "{}",
            v.message
        );
    }
}
