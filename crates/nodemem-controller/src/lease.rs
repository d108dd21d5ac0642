//! Leader election through a coordination.k8s.io Lease (kube-rs has none built in):
//! replicas try to take the Lease; the holder renews it every third of its duration and
//! is the only one that writes. A holder that cannot renew within the duration stops
//! (the process exits and its pod restarts as a follower), so two replicas never write
//! at once for longer than one renew interval.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;

/// The Lease the replicas elect their leader with, in their namespace.
pub const LEASE: &str = "nodemem-controller";

/// Whether `me` may take or keep a Lease held by `holder`, last renewed at `renewed`
/// (seconds since the epoch) for `duration` seconds (pure).
pub fn may_hold(
    holder: Option<&str>,
    renewed: Option<i64>,
    duration: i64,
    now: i64,
    me: &str,
) -> bool {
    match (holder, renewed) {
        (None, _) | (Some(""), _) => true,
        (Some(h), _) if h == me => true,
        (Some(_), None) => true,
        (Some(_), Some(at)) => now > at + duration,
    }
}

pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
    pub identity: String,
    pub duration: Duration,
}

impl LeaseLock {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: String,
        duration: Duration,
    ) -> Self {
        LeaseLock {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity,
            duration,
        }
    }

    /// One attempt to take or renew the Lease: true when this replica holds it now.
    /// A conflicting write by another replica is a plain "no".
    pub async fn try_hold(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let seconds = self.duration.as_secs() as i32;
        let ours = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(seconds),
            acquire_time: acquired.or(Some(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        };
        let conflict = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 409);
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: kube::api::ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(ours(0, None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(e) if conflict(&e) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.as_deref();
        let renewed = spec.renew_time.as_ref().map(|t| t.0.as_second());
        let duration = spec.lease_duration_seconds.unwrap_or(seconds) as i64;
        if !may_hold(holder, renewed, duration, now.as_second(), &self.identity) {
            return Ok(false);
        }
        let (transitions, acquired) = if holder == Some(self.identity.as_str()) {
            (
                spec.lease_transitions.unwrap_or(0),
                spec.acquire_time.clone(),
            )
        } else {
            (spec.lease_transitions.unwrap_or(0) + 1, None)
        };
        lease.spec = Some(ours(transitions, acquired));
        // The resourceVersion makes this a compare-and-swap.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits until this replica holds the Lease.
    /// `standing_by` is called each time the Lease is read held by another replica (the
    /// apiserver answers; this replica is ready to take over).
    pub async fn acquire(&self, standing_by: &dyn Fn()) {
        let retry = self.duration / 3;
        let mut said = false;
        loop {
            match self.try_hold().await {
                Ok(true) => return,
                Ok(false) if !said => {
                    tracing::info!(identity = %self.identity, "another replica leads; waiting for the Lease");
                    said = true;
                    standing_by();
                }
                Ok(false) => standing_by(),
                Err(e) => {
                    tracing::warn!(error = %e, "the Lease could not be read or written; retrying")
                }
            }
            tokio::time::sleep(retry).await;
        }
    }

    /// Renews the Lease every third of its duration; returns when it could not be
    /// renewed for a whole duration (another replica may take it from then on).
    pub async fn keep(&self) {
        let every = self.duration / 3;
        let mut last_renewed = std::time::Instant::now();
        loop {
            tokio::time::sleep(every).await;
            match self.try_hold().await {
                Ok(true) => last_renewed = std::time::Instant::now(),
                Ok(false) => {
                    tracing::error!("another replica took the Lease");
                    return;
                }
                Err(e) => tracing::warn!(error = %e, "the Lease was not renewed; retrying"),
            }
            if last_renewed.elapsed() >= self.duration {
                tracing::error!("the Lease was not renewed for its whole duration");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_taken_when_free_expired_or_ours() {
        assert!(may_hold(None, None, 15, 100, "a"));
        assert!(may_hold(Some(""), Some(99), 15, 100, "a"));
        assert!(
            may_hold(Some("a"), Some(99), 15, 100, "a"),
            "renewing our own"
        );
        assert!(
            !may_hold(Some("b"), Some(90), 15, 100, "a"),
            "b renewed 10 s ago"
        );
        assert!(
            !may_hold(Some("b"), Some(85), 15, 100, "a"),
            "exactly at expiry b still holds"
        );
        assert!(may_hold(Some("b"), Some(84), 15, 100, "a"), "expired");
        assert!(may_hold(Some("b"), None, 15, 100, "a"), "never renewed");
    }
}
