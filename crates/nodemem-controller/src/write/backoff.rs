//! Per-object backoff for the controller's writes (pure: times are given).
//!
//! A write the apiserver refused or failed is not tried again at the next decision but
//! after a delay that doubles with each failure of the same object, up to a cap, and
//! is spread by jitter so that thousands of writes failed together do not come back
//! together. A delay the apiserver asked for (`retryAfterSeconds`) is the least delay.
//! A success forgets the object's failures. What is waiting is not lost: the next
//! decision after its time computes the write again from the newest world (so a retry
//! never writes an older revision), as for any write that did not land.
//!
//! Rationale for the numbers: 1 s is the Retry-After the apiserver gives most often
//! (priority and fairness, max in-flight); 60 s keeps a node at most a minute behind
//! once a storm ends; 20,000 nodes waiting at the cap are 333 writes a second spread
//! over the minute, the load of a normal fan-out.

use std::collections::BTreeMap;
use std::time::Duration;

pub use nodemem_api::backoff::{retry_after, BASE};
/// The longest delay (a Retry-After above it is still honoured). The agents' grace
/// for a deleted config outlasts it (`nodemem_api::WRITE_BACKOFF_CAP`).
pub const CAP: Duration = nodemem_api::WRITE_BACKOFF_CAP;

/// The kinds of write that back off: a node's config applied or deleted, a policy's
/// status (one per decision per policy; the rarer writes are retried at the next
/// decision as they were).
pub const KINDS: [&str; 3] = ["config", "config_delete", "policy_status"];

/// What a failed write is: the kind of write and the object's name.
pub type Key = (&'static str, String);

#[derive(Clone, Copy, Debug, PartialEq)]
struct Waiting {
    failures: u32,
    /// Not written again before this time (a time on the caller's clock).
    until: Duration,
}

/// Every object whose last write failed, with when it may be written again.
#[derive(Debug, Default)]
pub struct Backoffs {
    waiting: BTreeMap<Key, Waiting>,
}

/// The delay after a write failed for the `failures`-th time in a row: BASE doubled per
/// earlier failure, capped, scaled by `jitter` (from [0.5, 1]), and never below
/// `retry_after`.
pub fn delay(failures: u32, jitter: f64, retry_after: Option<Duration>) -> Duration {
    nodemem_api::backoff::delay(failures, jitter, retry_after, CAP)
}

impl Backoffs {
    /// May `key` be written at `now`? (Yes unless its last write failed and its delay has
    /// not passed.)
    pub fn due(&self, key: &Key, now: Duration) -> bool {
        self.waiting.get(key).is_none_or(|w| now >= w.until)
    }

    /// `key`'s write failed at `now`: the delay until it may be written again.
    pub fn failed(
        &mut self,
        key: Key,
        now: Duration,
        jitter: f64,
        retry_after: Option<Duration>,
    ) -> Duration {
        let w = self.waiting.entry(key).or_insert(Waiting {
            failures: 0,
            until: now,
        });
        w.failures = w.failures.saturating_add(1);
        let d = delay(w.failures, jitter, retry_after);
        w.until = now + d;
        d
    }

    /// `key` was written (or is gone): its failures are forgotten.
    pub fn succeeded(&mut self, key: &Key) {
        self.waiting.remove(key);
    }

    /// Objects waiting, by kind of write.
    pub fn waiting_by_kind(&self) -> BTreeMap<&'static str, usize> {
        let mut by = BTreeMap::new();
        for (kind, _) in self.waiting.keys() {
            *by.entry(*kind).or_default() += 1;
        }
        by
    }

    /// Objects waiting in all.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Forgets objects that nobody asked to write for `stale` after their time: a node
    /// that left, a policy that was deleted (keeps the map as small as what still fails).
    pub fn forget_stale(&mut self, now: Duration, stale: Duration) {
        self.waiting.retain(|_, w| w.until + stale > now);
    }
}

/// Jitter in [0.5, 1] for [`Backoffs::failed`].
pub fn jitter() -> f64 {
    0.5 + fastrand::f64() / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        ("config", name.to_string())
    }

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn delays_double_from_the_base_up_to_the_cap() {
        let full: Vec<u64> = (1..=9).map(|n| delay(n, 1.0, None).as_secs()).collect();
        assert_eq!(full, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        // Huge failure counts neither overflow nor pass the cap.
        assert_eq!(delay(u32::MAX, 1.0, None), CAP);
    }

    #[test]
    fn jitter_spreads_between_half_and_the_whole_delay() {
        assert_eq!(delay(3, 0.5, None), S(2));
        assert_eq!(delay(3, 0.75, None), S(3));
        // Out-of-range jitter is clamped, never a zero or a doubled delay.
        assert_eq!(delay(3, 0.0, None), S(2));
        assert_eq!(delay(3, 7.0, None), S(4));
    }

    #[test]
    fn the_apiservers_retry_after_is_the_least_delay_even_above_the_cap() {
        assert_eq!(delay(1, 1.0, Some(S(5))), S(5));
        assert_eq!(delay(9, 1.0, Some(S(300))), S(300));
        assert_eq!(delay(9, 1.0, Some(S(1))), CAP);
    }

    #[test]
    fn a_failed_object_waits_and_a_success_forgets_its_failures() {
        let mut b = Backoffs::default();
        assert!(b.due(&key("a"), S(0)));
        assert_eq!(b.failed(key("a"), S(10), 1.0, None), S(1));
        assert!(!b.due(&key("a"), S(10)));
        assert!(b.due(&key("b"), S(10)), "only the failed object waits");
        assert!(b.due(&key("a"), S(11)));
        assert_eq!(b.failed(key("a"), S(11), 1.0, None), S(2));
        assert_eq!(b.failed(key("a"), S(13), 1.0, None), S(4));
        assert!(!b.due(&key("a"), S(16)));
        assert_eq!(b.len(), 1);
        b.succeeded(&key("a"));
        assert!(b.is_empty());
        assert_eq!(b.failed(key("a"), S(20), 1.0, None), S(1), "counted afresh");
    }

    #[test]
    fn kinds_are_counted_apart_and_stale_objects_forgotten() {
        let mut b = Backoffs::default();
        b.failed(key("a"), S(0), 1.0, None);
        b.failed(key("b"), S(0), 1.0, Some(S(100)));
        b.failed(("policy_status", "p".into()), S(0), 1.0, None);
        assert_eq!(
            b.waiting_by_kind().into_iter().collect::<Vec<_>>(),
            [("config", 2), ("policy_status", 1)]
        );
        b.forget_stale(S(50), S(30));
        assert!(b.due(&key("a"), S(50)));
        assert!(!b.due(&key("b"), S(50)), "still within its Retry-After");
        assert_eq!(b.len(), 1);
    }

    proptest::proptest! {
        #[test]
        fn a_delay_is_within_its_bounds(n in 1u32..100, j in 0.0f64..2.0, ra in proptest::option::of(0u64..1000)) {
            let d = delay(n, j, ra.map(S));
            let ceiling = delay(n, 1.0, None);
            proptest::prop_assert!(d >= ceiling / 2 || d >= S(ra.unwrap_or(0)));
            proptest::prop_assert!(d <= ceiling.max(S(ra.unwrap_or(0))));
            proptest::prop_assert!(d >= BASE / 2);
        }
    }
}
