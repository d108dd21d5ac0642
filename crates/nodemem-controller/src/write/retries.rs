//! The writes' backoffs and their summarised log on the process's monotonic clock: the
//! glue between `run`'s writes and the pure [`crate::write::backoff`] and
//! [`crate::write::failures`].

use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::metrics::Metrics;
use crate::write::backoff::{self, Backoffs};
use crate::write::failures::{self, FailureLog};

/// Objects nobody asked to write again for this long after their time are forgotten.
const STALE: Duration = Duration::from_secs(600);

pub struct Retries {
    backoffs: Backoffs,
    log: FailureLog,
    origin: Instant,
}

impl Default for Retries {
    fn default() -> Self {
        Retries {
            backoffs: Backoffs::default(),
            log: FailureLog::default(),
            origin: Instant::now(),
        }
    }
}

impl Retries {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// May the `kind` write of `name` go now?
    pub fn due(&self, kind: &'static str, name: &str) -> bool {
        self.backoffs.due(&(kind, name.to_string()), self.now())
    }

    /// Keeps the writes that may go now; counts the others as deferred.
    pub fn keep_due<'a, T>(
        &self,
        kind: &'static str,
        writes: impl IntoIterator<Item = &'a T>,
        name: impl Fn(&T) -> &str,
        metrics: &Metrics,
    ) -> Vec<&'a T>
    where
        T: 'a,
    {
        let (due, waiting): (Vec<&T>, Vec<&T>) =
            writes.into_iter().partition(|w| self.due(kind, name(w)));
        metrics.deferred(kind, waiting.len());
        due
    }

    /// The `kind` write of `name` landed (or its object is gone).
    pub fn succeeded(&mut self, kind: &'static str, name: &str) {
        self.backoffs.succeeded(&(kind, name.to_string()));
    }

    /// The `kind` write of `name` failed with `e`: it backs off, and the log hears of it
    /// (in full if it is the first failure after a quiet interval, else in the summary).
    pub fn failed(&mut self, kind: &'static str, name: &str, e: &kube::Error) {
        let now = self.now();
        let retry_in = self.backoffs.failed(
            (kind, name.to_string()),
            now,
            backoff::jitter(),
            backoff::retry_after(e),
        );
        let answer = failures::answer(e);
        let description = failures::description(e);
        if let Some(line) = self
            .log
            .failed(now, kind, name, &answer, &description, retry_in)
        {
            warn!("{line}");
        }
    }

    /// After a decision's writes: the summary line when one is due, the metrics of what
    /// is backing off, and stale objects forgotten.
    pub fn flush(&mut self, metrics: &Metrics) {
        let now = self.now();
        self.backoffs.forget_stale(now, STALE);
        if let Some(line) = self.log.flush(now, self.backoffs.len()) {
            if self.backoffs.is_empty() {
                info!("{line}");
            } else {
                warn!("{line}");
            }
        }
        metrics.backing_off(&self.backoffs.waiting_by_kind());
    }
}
