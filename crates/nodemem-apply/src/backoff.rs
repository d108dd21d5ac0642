//! Capped exponential backoff per file for writes the kernel keeps refusing (EINVAL for
//! a value it will not take, say): a failed file is not retried until its delay has
//! passed, doubling from `base` up to `cap`, so a persistent failure costs a write per
//! delay, never a hot loop (a peer agent burned a third of a core per node retrying one
//! write forever). Time is passed in, so the schedule is tested without sleeping.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

/// A write held back after the kernel refused it, until its retry time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Deferred {
    /// The cgroup (relative to the cgroup root).
    pub cgroup: String,
    /// The interface file.
    pub file: String,
    /// Consecutive failures so far.
    pub failures: u32,
    /// The last failure's message.
    pub error: String,
    /// Seconds until the next attempt.
    pub retry_in_seconds: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    failures: u32,
    next: Duration,
    error: String,
}

/// Writes the kernel refused, each retried after a delay that doubles per failure
/// up to a cap, so that a file the kernel keeps refusing is not written on every pass.
#[derive(Clone, Debug)]
pub struct WriteBackoff {
    base: Duration,
    cap: Duration,
    entries: BTreeMap<(String, String), Entry>,
}

impl Default for WriteBackoff {
    fn default() -> Self {
        WriteBackoff::new(Duration::from_secs(1), Duration::from_secs(300))
    }
}

impl WriteBackoff {
    /// Delays from `base`, doubling per consecutive failure, at most `cap`.
    pub fn new(base: Duration, cap: Duration) -> Self {
        WriteBackoff {
            base,
            cap,
            entries: BTreeMap::new(),
        }
    }

    /// None when the file may be written at `now`; otherwise why not yet.
    pub fn deferred(&self, cgroup: &str, file: &str, now: Duration) -> Option<Deferred> {
        let e = self.entries.get(&(cgroup.to_string(), file.to_string()))?;
        (now < e.next).then(|| Deferred {
            cgroup: cgroup.to_string(),
            file: file.to_string(),
            failures: e.failures,
            error: e.error.clone(),
            retry_in_seconds: (e.next - now).as_secs().max(1),
        })
    }

    /// Records a failed write at `now`: its next attempt waits the next delay.
    pub fn failed(&mut self, cgroup: &str, file: &str, error: &str, now: Duration) {
        let e = self
            .entries
            .entry((cgroup.to_string(), file.to_string()))
            .or_insert(Entry {
                failures: 0,
                next: now,
                error: String::new(),
            });
        e.failures = e.failures.saturating_add(1);
        let exp = e.failures.saturating_sub(1).min(20);
        let delay = self.base.saturating_mul(1u32 << exp).min(self.cap);
        e.next = now + delay;
        e.error = error.to_string();
    }

    /// The write went through: the file is written again whenever a pass wants.
    pub fn succeeded(&mut self, cgroup: &str, file: &str) {
        self.entries.remove(&(cgroup.to_string(), file.to_string()));
    }

    /// Forgets files of cgroups that are gone.
    pub fn forget_cgroup(&mut self, cgroup: &str) {
        self.entries.retain(|(c, _), _| c != cgroup);
    }

    /// How many files are held back.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no file is held back.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn doubles_up_to_the_cap_and_clears_on_success() {
        let mut b = WriteBackoff::new(S, 8 * S);
        assert!(b.deferred("c", "memory.high", Duration::ZERO).is_none());
        b.failed("c", "memory.high", "write \"1\": EINVAL", Duration::ZERO);
        let d = b.deferred("c", "memory.high", Duration::ZERO).unwrap();
        assert_eq!((d.failures, d.retry_in_seconds), (1, 1));
        assert!(b.deferred("c", "memory.high", S).is_none(), "due after 1 s");
        let mut now = S;
        for (failures, delay) in [(2, 2), (3, 4), (4, 8), (5, 8), (6, 8)] {
            b.failed("c", "memory.high", "EINVAL", now);
            let d = b.deferred("c", "memory.high", now).unwrap();
            assert_eq!((d.failures, d.retry_in_seconds), (failures, delay));
            assert!(b
                .deferred("c", "memory.high", now + Duration::from_secs(delay - 1))
                .is_some());
            now += Duration::from_secs(delay);
            assert!(b.deferred("c", "memory.high", now).is_none());
        }
        assert!(
            b.deferred("c", "memory.low", Duration::ZERO).is_none(),
            "per file"
        );
        b.succeeded("c", "memory.high");
        assert!(b.is_empty());
        b.failed("gone", "memory.min", "x", now);
        b.forget_cgroup("gone");
        assert!(b.is_empty());
    }
}
