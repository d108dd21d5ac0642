//! The log of failed writes, summarised (pure: times are given). Under a storm of
//! refusals at 20,000 nodes a line per failed write would be 20,000 lines a minute; this
//! writes the first failure after a quiet time in full, then at most one line per
//! [`INTERVAL`] with the counts by kind of write and answer, and one line when nothing
//! waits any more.

use std::collections::BTreeMap;
use std::time::Duration;

/// At most one summary line per interval.
pub const INTERVAL: Duration = Duration::from_secs(30);

/// Failed writes since the last line.
#[derive(Debug, Default)]
pub struct FailureLog {
    /// When the last line was written.
    last_line: Option<Duration>,
    /// Failures since the last line, by kind of write and answer.
    counts: BTreeMap<(&'static str, String), u64>,
    /// One of them, in full.
    example: Option<String>,
    /// A failure was logged and not yet followed by the all-clear.
    failing: bool,
}

/// The answer a failed write got, as a short label: the HTTP status code, or
/// `transport` when no answer came (a connection refused or cut, a timeout).
/// What went wrong, in one line: the apiserver's message and reason, or the client's
/// error (kube's own text of an apiserver error repeats it as a debug dump).
pub fn description(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.reason.is_empty() => format!("{} ({})", s.message, s.reason),
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

pub fn answer(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code != 0 => s.code.to_string(),
        _ => "transport".to_string(),
    }
}

impl FailureLog {
    /// A `kind` write of `name` failed with `error` (answer `code`) at `now`: the line to
    /// log now, if this is the first failure after a quiet interval.
    pub fn failed(
        &mut self,
        now: Duration,
        kind: &'static str,
        name: &str,
        code: &str,
        error: &str,
        retry_in: Duration,
    ) -> Option<String> {
        let quiet = self.counts.is_empty()
            && self
                .last_line
                .is_none_or(|t| now.saturating_sub(t) >= INTERVAL);
        if quiet {
            self.last_line = Some(now);
            self.failing = true;
            return Some(format!(
                "{kind} {name} not written ({code}): {error}; tried again in {:.1} s (backoff per object; further failures are summarised every {} s)",
                retry_in.as_secs_f64(),
                INTERVAL.as_secs()
            ));
        }
        *self.counts.entry((kind, code.to_string())).or_default() += 1;
        self.example
            .get_or_insert_with(|| format!("{kind} {name} ({code}): {error}"));
        None
    }

    /// After a decision's writes: the summary of the failures since the last line once
    /// an interval has passed, or the all-clear once nothing waits (`waiting` objects are
    /// backing off).
    pub fn flush(&mut self, now: Duration, waiting: usize) -> Option<String> {
        let due = self
            .last_line
            .is_none_or(|t| now.saturating_sub(t) >= INTERVAL);
        if !self.counts.is_empty() && due {
            let since = self
                .last_line
                .map_or(0, |t| now.saturating_sub(t).as_secs());
            let total: u64 = self.counts.values().sum();
            let by: Vec<String> = self
                .counts
                .iter()
                .map(|((kind, code), n)| format!("{kind} {code}: {n}"))
                .collect();
            let line = format!(
                "{total} writes failed in the last {since} s ({}); {waiting} objects wait for their backoff; e.g. {}",
                by.join(", "),
                self.example.as_deref().unwrap_or("")
            );
            self.counts.clear();
            self.example = None;
            self.last_line = Some(now);
            return Some(line);
        }
        if self.failing && self.counts.is_empty() && waiting == 0 {
            self.failing = false;
            return Some("no write waits for a retry any more (each failed write has since landed or is no longer needed)".to_string());
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn fail(log: &mut FailureLog, at: u64, name: &str) -> Option<String> {
        log.failed(S(at), "config", name, "500", "Internal error", S(1))
    }

    #[test]
    fn a_storm_is_one_line_then_one_line_per_interval_then_the_all_clear() {
        let mut log = FailureLog::default();
        let first = fail(&mut log, 100, "n-0").expect("the first failure is logged at once");
        assert!(
            first.contains("config n-0 not written (500): Internal error"),
            "{first}"
        );
        assert!(first.contains("tried again in 1.0 s"), "{first}");
        let mut lines = vec![first];
        // 1,000 failures a second for 95 s, flushed after every second's decision: a line
        // at 130, 160 and 190 s.
        for t in 100..195 {
            for i in 0..1000 {
                lines.extend(fail(&mut log, t, &format!("n-{i}")));
            }
            lines.extend(log.flush(S(t), 1000));
        }
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(
            lines[1].starts_with("31000 writes failed in the last 30 s (config 500: 31000)"),
            "{}",
            lines[1]
        );
        assert!(lines[1].contains("1000 objects wait"), "{}", lines[1]);
        assert!(
            lines[1].contains("e.g. config n-0 (500): Internal error"),
            "{}",
            lines[1]
        );
        // Quiet: the rest is summarised, then the all-clear once nothing waits.
        assert!(log.flush(S(200), 1000).is_none(), "not yet an interval");
        let rest = log.flush(S(226), 10).unwrap();
        assert!(
            rest.starts_with("4000 writes failed in the last 36 s"),
            "{rest}"
        );
        assert!(log.flush(S(227), 10).is_none(), "objects still wait");
        assert_eq!(
            log.flush(S(228), 0).as_deref(),
            Some("no write waits for a retry any more (each failed write has since landed or is no longer needed)")
        );
        assert!(log.flush(S(229), 0).is_none(), "said once");
    }

    #[test]
    fn kinds_and_answers_are_counted_apart() {
        let mut log = FailureLog::default();
        log.failed(S(0), "config", "a", "429", "slow down", S(1));
        log.failed(S(1), "config", "b", "429", "slow down", S(1));
        log.failed(S(1), "config", "c", "transport", "refused", S(1));
        log.failed(S(2), "policy_status", "p", "500", "oops", S(1));
        let line = log.flush(S(31), 3).unwrap();
        assert!(
            line.contains("(config 429: 1, config transport: 1, policy_status 500: 1)"),
            "{line}"
        );
    }

    #[test]
    fn a_failure_after_a_quiet_interval_is_logged_in_full_again() {
        let mut log = FailureLog::default();
        assert!(fail(&mut log, 0, "a").is_some());
        assert_eq!(log.flush(S(1), 0).as_deref(), Some("no write waits for a retry any more (each failed write has since landed or is no longer needed)"));
        assert!(
            fail(&mut log, 10, "b").is_none(),
            "within the interval: counted"
        );
        assert!(log.flush(S(40), 0).is_some());
        assert!(fail(&mut log, 80, "c").is_some(), "quiet since: in full");
    }

    #[test]
    fn answers_are_status_codes_or_transport() {
        let api = kube::Error::Api(
            kube::core::Status::failure("x", "TooManyRequests")
                .with_code(429)
                .boxed(),
        );
        assert_eq!(answer(&api), "429");
        assert_eq!(description(&api), "x (TooManyRequests)");
        let io = kube::Error::ReadEvents(std::io::Error::other("cut"));
        assert_eq!(answer(&io), "transport");
    }
}
