//! Leader election through a coordination.k8s.io Lease (kube-rs has none built in), by
//! client-go's rules (`k8s.io/client-go/tools/leaderelection`):
//! - a follower never compares clocks with the holder: it takes the Lease only when it
//!   has seen the record unchanged for a whole lease duration, measured on its own
//!   monotonic clock from the moment it saw it change ([`Observer`]);
//! - the leader renews every retry period and stops leading (the process exits, its pod
//!   restarts as a follower) when it has not renewed within the renew deadline, which
//!   is shorter than the lease duration, so it has stopped before any follower may take
//!   over;
//! - every call to the apiserver has a timeout: a call that hangs counts as failed.
//!
//! The renewTime written is wall-clock time, for people reading the Lease; no decision
//! reads it.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;

/// The Lease the replicas elect their leader with, in their namespace.
pub const LEASE: &str = "nodemem-controller";

/// The three durations of an election, in client-go's proportions (15 s lease, 10 s
/// renew deadline, 2 s retry period) for any lease duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How long a follower waits, after it last saw the record change, before it may
    /// take the Lease.
    pub lease: Duration,
    /// How long the leader keeps leading without a successful renewal.
    pub renew_deadline: Duration,
    /// How often the leader renews and a follower looks.
    pub retry: Duration,
}

impl Timing {
    pub fn for_lease(lease: Duration) -> Timing {
        Timing {
            lease,
            renew_deadline: lease * 2 / 3,
            retry: lease * 2 / 15,
        }
    }
}

/// The parts of a Lease record that change when its holder renews or changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub holder: Option<String>,
    pub renew_time: Option<String>,
    pub acquire_time: Option<String>,
    pub transitions: i32,
    pub duration_seconds: Option<i32>,
}

impl Record {
    fn of(spec: &LeaseSpec) -> Record {
        let time = |t: &Option<MicroTime>| t.as_ref().map(|t| t.0.to_string());
        Record {
            holder: spec.holder_identity.clone().filter(|h| !h.is_empty()),
            renew_time: time(&spec.renew_time),
            acquire_time: time(&spec.acquire_time),
            transitions: spec.lease_transitions.unwrap_or(0),
            duration_seconds: spec.lease_duration_seconds,
        }
    }
}

/// What one replica has seen of the Lease, and when on its own clock it last saw the
/// record change (pure: times are passed in).
#[derive(Clone, Debug, Default)]
pub struct Observer {
    seen: Option<(Record, Instant)>,
}

impl Observer {
    /// Notes the record as read (or written) at `at`; the time moves only on a change.
    pub fn observe(&mut self, record: Record, at: Instant) {
        match &self.seen {
            Some((r, _)) if *r == record => {}
            _ => self.seen = Some((record, at)),
        }
    }

    /// Whether `me` may take or renew the Lease at `now`: it is free, ours, or its
    /// record has not changed for the longer of its own duration and `lease` since this
    /// replica saw it change.
    pub fn may_hold(&self, me: &str, now: Instant, lease: Duration) -> bool {
        let Some((record, since)) = &self.seen else {
            return true;
        };
        match record.holder.as_deref() {
            None => true,
            Some(h) if h == me => true,
            Some(_) => {
                let theirs =
                    Duration::from_secs(record.duration_seconds.unwrap_or(0).max(0) as u64);
                now.saturating_duration_since(*since) >= lease.max(theirs)
            }
        }
    }
}

pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
    pub identity: String,
    pub timing: Timing,
    observer: std::sync::Mutex<Observer>,
}

/// Why one attempt did not end with this replica holding the Lease.
#[derive(Debug)]
enum Attempt {
    Api(kube::Error),
    TimedOut,
}

impl std::fmt::Display for Attempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Attempt::Api(e) => write!(f, "{e}"),
            Attempt::TimedOut => write!(f, "the apiserver did not answer in time"),
        }
    }
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
            timing: Timing::for_lease(duration),
            observer: std::sync::Mutex::new(Observer::default()),
        }
    }

    fn observe(&self, spec: &LeaseSpec) {
        self.observer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe(Record::of(spec), Instant::now());
    }

    fn may_hold(&self) -> bool {
        self.observer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .may_hold(&self.identity, Instant::now(), self.timing.lease)
    }

    /// One attempt to take or renew the Lease: true when this replica holds it now.
    /// A conflicting write by another replica is a plain "no".
    async fn try_hold(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let seconds = self.timing.lease.as_secs() as i32;
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
                Ok(created) => {
                    self.observe(&created.spec.unwrap_or_default());
                    Ok(true)
                }
                Err(e) if conflict(&e) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        self.observe(&spec);
        if !self.may_hold() {
            return Ok(false);
        }
        let (transitions, acquired) = if spec.holder_identity.as_deref() == Some(&self.identity) {
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
            Ok(written) => {
                self.observe(&written.spec.unwrap_or_default());
                Ok(true)
            }
            Err(e) if conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// [`Self::try_hold`], given up after `limit`.
    async fn attempt(&self, limit: Duration) -> Result<bool, Attempt> {
        match tokio::time::timeout(limit, self.try_hold()).await {
            Ok(r) => r.map_err(Attempt::Api),
            Err(_) => Err(Attempt::TimedOut),
        }
    }

    /// Waits until this replica holds the Lease; returns the instant of the attempt
    /// that took it (the leader's first renewal).
    /// `standing_by` is called each time the Lease is read held by another replica (the
    /// apiserver answers; this replica is ready to take over).
    pub async fn acquire(&self, standing_by: &dyn Fn()) -> Instant {
        let mut said = false;
        loop {
            let started = Instant::now();
            match self.attempt(self.timing.renew_deadline).await {
                Ok(true) => return started,
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
            tokio::time::sleep(self.timing.retry).await;
        }
    }

    /// Renews the Lease every retry period; returns when another replica holds it, or
    /// when no renewal succeeded within the renew deadline since `renewed` (the start
    /// of the last successful attempt), the deadline cutting a hanging call short.
    pub async fn keep(&self, mut renewed: Instant) {
        loop {
            tokio::time::sleep(self.timing.retry).await;
            let deadline = renewed + self.timing.renew_deadline;
            let started = Instant::now();
            let left = deadline.saturating_duration_since(started);
            match self.attempt(left).await {
                Ok(true) => renewed = started,
                Ok(false) => {
                    tracing::error!("another replica took the Lease");
                    return;
                }
                Err(e) => tracing::warn!(error = %e, "the Lease was not renewed; retrying"),
            }
            if Instant::now() >= renewed + self.timing.renew_deadline {
                tracing::error!(
                    renew_deadline_seconds = self.timing.renew_deadline.as_secs_f64(),
                    "the Lease was not renewed within its renew deadline"
                );
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(holder: &str, renewed: &str) -> Record {
        Record {
            holder: Some(holder.to_string()),
            renew_time: Some(renewed.to_string()),
            acquire_time: Some("t0".to_string()),
            transitions: 0,
            duration_seconds: Some(15),
        }
    }

    #[test]
    fn timing_keeps_client_gos_proportions() {
        let t = Timing::for_lease(Duration::from_secs(15));
        assert_eq!(t.renew_deadline, Duration::from_secs(10));
        assert_eq!(t.retry, Duration::from_secs(2));
        let short = Timing::for_lease(Duration::from_secs(6));
        assert_eq!(short.renew_deadline, Duration::from_secs(4));
        assert_eq!(short.retry, Duration::from_millis(800));
        // The leader has stopped (renew deadline, plus the retry that notices) before a
        // follower that saw its last renewal may take over.
        for s in [3, 6, 15, 60] {
            let t = Timing::for_lease(Duration::from_secs(s));
            assert!(t.renew_deadline + t.retry < t.lease, "{t:?}");
        }
    }

    #[test]
    fn a_follower_waits_a_lease_duration_on_its_own_clock_whatever_the_record_says() {
        let me = "b";
        let t0 = Instant::now();
        let lease = Duration::from_secs(15);
        let mut o = Observer::default();
        assert!(o.may_hold(me, t0, lease), "never read: free");
        // The record's times are never compared with this replica's clock: a renewal
        // written an hour ago by the holder's clock is as fresh as one written now.
        o.observe(held_by("a", "2026-11-27T10:00:00Z"), t0);
        assert!(!o.may_hold(me, t0 + Duration::from_secs(14), lease));
        assert!(o.may_hold(me, t0 + Duration::from_secs(15), lease));
        // Renewed meanwhile: the wait starts again from when the change was seen.
        o.observe(
            held_by("a", "2026-11-27T10:00:10Z"),
            t0 + Duration::from_secs(10),
        );
        assert!(!o.may_hold(me, t0 + Duration::from_secs(24), lease));
        assert!(o.may_hold(me, t0 + Duration::from_secs(25), lease));
        // The same record read again moves nothing.
        o.observe(
            held_by("a", "2026-11-27T10:00:10Z"),
            t0 + Duration::from_secs(20),
        );
        assert!(o.may_hold(me, t0 + Duration::from_secs(25), lease));
        // A holder asking for a longer lease than ours gets it.
        let mut long = held_by("a", "x");
        long.duration_seconds = Some(30);
        o.observe(long, t0);
        assert!(!o.may_hold(me, t0 + Duration::from_secs(29), lease));
        assert!(o.may_hold(me, t0 + Duration::from_secs(30), lease));
        // Ours, or released (no holder): at once.
        o.observe(held_by("b", "y"), t0);
        assert!(o.may_hold(me, t0, lease));
        let mut released = held_by("a", "z");
        released.holder = None;
        o.observe(released, t0);
        assert!(o.may_hold(me, t0, lease));
    }
}
