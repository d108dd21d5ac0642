//! How long a client of the apiserver waits before writing again after its writes
//! failed (pure): the controller's config and status writes and the agents' status
//! writes back off alike. The delay doubles from one second with each failure in a row,
//! up to a cap, spread by jitter so that clients refused together do not come back
//! together; the delay the apiserver asked for (`Retry-After`, API Priority and
//! Fairness' 429s and max-in-flight's) is the least, above the cap too.

use std::time::Duration;

/// The first delay: the Retry-After the apiserver gives most often.
pub const BASE: Duration = Duration::from_secs(1);

/// The delay after the `failures`-th failure in a row: BASE doubled per earlier
/// failure, at most `cap`, scaled by `jitter` (from [0.5, 1]), and never below
/// `retry_after`.
pub fn delay(failures: u32, jitter: f64, retry_after: Option<Duration>, cap: Duration) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    let exponential = BASE.saturating_mul(1 << doublings).min(cap);
    let jittered = exponential.mul_f64(jitter.clamp(0.5, 1.0));
    jittered.max(retry_after.unwrap_or_default())
}

/// The delay the apiserver asked for in its answer (`retryAfterSeconds` of its Status,
/// which kube-rs reads from the body; the apiserver puts the same in `Retry-After`).
pub fn retry_after(e: &kube::Error) -> Option<Duration> {
    match e {
        kube::Error::Api(s) => s
            .details
            .as_ref()
            .map(|d| d.retry_after_seconds)
            .filter(|s| *s > 0)
            .map(|s| Duration::from_secs(u64::from(s))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn the_delay_doubles_to_its_cap_and_retry_after_is_the_least() {
        let at = |n, jitter| delay(n, jitter, None, S(16));
        assert_eq!(
            (1..=7).map(|n| at(n, 1.0)).collect::<Vec<_>>(),
            [S(1), S(2), S(4), S(8), S(16), S(16), S(16)]
        );
        assert_eq!(at(3, 0.5), S(2), "jitter halves at most");
        assert_eq!(at(3, 0.0), S(2), "jitter below a half is a half");
        assert_eq!(delay(1, 1.0, Some(S(5)), S(16)), S(5));
        assert_eq!(
            delay(9, 1.0, Some(S(90)), S(16)),
            S(90),
            "above the cap too"
        );
        assert_eq!(delay(u32::MAX, 1.0, None, S(60)), S(60));
    }

    #[test]
    fn retry_after_is_read_from_the_apiservers_status() {
        let status = |details: Option<u32>| {
            let mut s = kube::core::Status::failure("slow down", "TooManyRequests").with_code(429);
            s.details = details.map(|n| {
                serde_json::from_value(serde_json::json!({"retryAfterSeconds": n})).unwrap()
            });
            kube::Error::Api(s.boxed())
        };
        assert_eq!(retry_after(&status(Some(3))), Some(S(3)));
        assert_eq!(retry_after(&status(Some(0))), None);
        assert_eq!(retry_after(&status(None)), None);
    }
}
