//! The controller's Prometheus metrics. Labels are policy names (one series per policy
//! and state) and small fixed sets.

use std::sync::atomic::{AtomicBool, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use nodemem_api::NodeMemoryPolicyStatus;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodesLabel {
    policy: String,
    state: &'static str,
}

/// One condition of a policy's status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionLabel {
    policy: String,
    condition: String,
    status: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabel {
    kind: &'static str,
    result: &'static str,
}

/// The bounded set of things that go wrong, for metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCategory {
    /// The apiserver refused or failed a write (configs, deletions and statuses back off
    /// per object, `crate::write::backoff`; the rest are retried at the next decision).
    ApiWrite,
    /// A watch failed (retried with backoff).
    Watch,
}

impl ErrorCategory {
    pub fn label(self) -> &'static str {
        match self {
            ErrorCategory::ApiWrite => "api_write",
            ErrorCategory::Watch => "watch",
        }
    }
}

/// A kind of write.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabel {
    category: &'static str,
}

pub struct Metrics {
    registry: Registry,
    policies: Gauge,
    nodes: Family<NodesLabel, Gauge>,
    conditions: Family<ConditionLabel, Gauge>,
    reconciles: Counter,
    reconcile_seconds: Histogram,
    writes: Family<WriteLabel, Counter>,
    errors: Family<ErrorLabel, Counter>,
    deferred: Family<KindLabel, Counter>,
    backing_off: Family<KindLabel, Gauge>,
    watch_events: Counter,
    queued_events: Gauge,
    leader: Gauge,
    ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut root = Registry::default();
        nodemem_plumbing::build_info::register(&mut root, "controller");
        let registry = root.sub_registry_with_prefix("nodemem_controller");
        let m = Metrics {
            policies: Gauge::default(),
            nodes: Family::default(),
            conditions: Family::default(),
            reconciles: Counter::default(),
            reconcile_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            writes: Family::default(),
            errors: Family::default(),
            deferred: Family::default(),
            backing_off: Family::default(),
            watch_events: Counter::default(),
            queued_events: Gauge::default(),
            leader: Gauge::default(),
            ready: AtomicBool::new(false),
            registry: Registry::default(),
        };
        registry.register("policies", "NodeMemoryPolicies known", m.policies.clone());
        registry.register(
            "nodes",
            "Nodes per policy and rollout state (matched, updated, ready, failed)",
            m.nodes.clone(),
        );
        registry.register(
            "policy_condition",
            "The policies' status conditions (value 1), by policy, condition, status and reason",
            m.conditions.clone(),
        );
        registry.register("reconciles", "Decisions computed", m.reconciles.clone());
        registry.register(
            "reconcile_duration_seconds",
            "Time to decide and carry out one reconcile",
            m.reconcile_seconds.clone(),
        );
        registry.register(
            "api_writes",
            "Writes to the apiserver, by kind and result",
            m.writes.clone(),
        );
        registry.register("errors", "Errors by category", m.errors.clone());
        registry.register(
            "api_writes_deferred",
            "Writes a decision asked for that waited for their object's backoff (its last write failed)",
            m.deferred.clone(),
        );
        registry.register(
            "api_write_backoff_objects",
            "Objects whose last write failed, waiting for their backoff, by kind of write",
            m.backing_off.clone(),
        );
        registry.register(
            "watch_events",
            "Watch events and ticks taken into the world (everything queued when a decision begins makes that one decision)",
            m.watch_events.clone(),
        );
        registry.register(
            "queued_events",
            "Watch events waiting behind the one that began the last decision (capped by --event-queue)",
            m.queued_events.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica leads (holds the Lease, or runs without leader election), 0 while it stands by",
            m.leader.clone(),
        );
        Metrics {
            registry: root,
            ..m
        }
    }

    /// This replica leads from now on: the NodememNoLeader alert's series.
    pub fn leading(&self) {
        self.leader.set(1);
    }

    pub fn reconciled(&self, seconds: f64) {
        self.reconciles.inc();
        self.reconcile_seconds.observe(seconds);
        self.ready.store(true, Ordering::Relaxed);
    }

    /// Another replica leads and this one stands by to take over: ready too (the
    /// Deployment counts it available).
    pub fn standing_by(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }

    /// Events waiting when a decision began.
    pub fn queued(&self, events: usize) {
        self.queued_events.set(events as i64);
    }

    /// Events taken into one decision.
    pub fn taken(&self, events: usize) {
        self.watch_events.inc_by(events as u64);
    }

    pub fn write(&self, kind: &'static str, ok: bool) {
        self.writes
            .get_or_create(&WriteLabel {
                kind,
                result: if ok { "ok" } else { "error" },
            })
            .inc();
        if !ok {
            self.error(ErrorCategory::ApiWrite);
        }
    }

    /// `n` writes of `kind` waited for their backoff.
    pub fn deferred(&self, kind: &'static str, n: usize) {
        if n > 0 {
            self.deferred
                .get_or_create(&KindLabel { kind })
                .inc_by(n as u64);
        }
    }

    /// The objects backing off now, by kind (kinds not named have none; every kind has a
    /// series, so that a scrape never sees one missing).
    pub fn backing_off(&self, by_kind: &std::collections::BTreeMap<&'static str, usize>) {
        for kind in crate::write::backoff::KINDS {
            let n = by_kind.get(kind).copied().unwrap_or(0);
            self.backing_off
                .get_or_create(&KindLabel { kind })
                .set(n as i64);
        }
    }

    pub fn error(&self, category: ErrorCategory) {
        self.errors
            .get_or_create(&ErrorLabel {
                category: category.label(),
            })
            .inc();
    }

    /// The policies' statuses as series (policies that are gone lose theirs).
    pub fn policies<'a>(
        &self,
        statuses: impl Iterator<Item = (&'a str, &'a NodeMemoryPolicyStatus)>,
    ) {
        self.nodes.clear();
        self.conditions.clear();
        let mut n = 0;
        for (policy, s) in statuses {
            n += 1;
            for c in &s.conditions {
                self.conditions
                    .get_or_create(&ConditionLabel {
                        policy: policy.to_string(),
                        condition: c.type_.clone(),
                        status: c.status.clone(),
                        reason: c.reason.clone(),
                    })
                    .set(1);
            }
            for (state, value) in [
                ("matched", s.matched_nodes),
                ("updated", s.updated_nodes),
                ("ready", s.ready_nodes),
                ("failed", s.failed_nodes),
            ] {
                self.nodes
                    .get_or_create(&NodesLabel {
                        policy: policy.to_string(),
                        state,
                    })
                    .set(value as i64);
            }
        }
        self.policies.set(n);
    }
}

impl nodemem_plumbing::endpoints::Endpoints for Metrics {
    fn metrics(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String does not fail");
        text
    }

    fn ready(&self) -> Result<(), &'static str> {
        if self.ready.load(Ordering::Relaxed) {
            Ok(())
        } else {
            Err("no reconcile has completed yet")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemem_plumbing::endpoints::Endpoints;

    #[test]
    fn series_per_policy_and_state() {
        let m = Metrics::new();
        let s = NodeMemoryPolicyStatus {
            conditions: vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: "Stalled".into(),
                status: "True".into(),
                reason: "RolledBack".into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
            }],
            matched_nodes: 5,
            updated_nodes: 3,
            ready_nodes: 2,
            failed_nodes: 1,
            ..Default::default()
        };
        m.policies([("general", &s)].into_iter());
        m.write("config", true);
        m.write("config", false);
        m.reconciled(0.001);
        let text = m.metrics();
        for line in [
            "nodemem_controller_policies 1",
            "nodemem_controller_nodes{policy=\"general\",state=\"updated\"} 3",
            "nodemem_controller_nodes{policy=\"general\",state=\"failed\"} 1",
            "nodemem_controller_api_writes_total{kind=\"config\",result=\"error\"} 1",
            "nodemem_controller_errors_total{category=\"api_write\"} 1",
            "nodemem_controller_reconciles_total 1",
            "nodemem_controller_policy_condition{policy=\"general\",condition=\"Stalled\",status=\"True\",reason=\"RolledBack\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert_eq!(m.ready(), Ok(()));
    }

    #[test]
    fn ready_once_reconciled_or_standing_by() {
        let m = Metrics::default();
        assert_eq!(m.ready(), Err("no reconcile has completed yet"));
        m.standing_by();
        assert_eq!(m.ready(), Ok(()));
    }
}
