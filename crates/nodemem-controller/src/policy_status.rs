//! A policy's status from one decision: conditions that keep their transition time
//! while their status stays, Events on the transitions worth telling, the pool's
//! signals summed from its nodes, and whether anything differs from what the policy
//! shows (only then is it written).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodemem_api::policy::PoolSignals;
use nodemem_api::NodeMemoryPolicyStatus;

use crate::decision::{Decision, PolicyEvent};
use crate::world::World;

pub(super) fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    g: Option<i64>,
    now: &Time,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if ok { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: g,
        last_transition_time: now.clone(),
    }
}

/// Keeps condition times while their status stays, records transitions as events, and
/// emits the status when it differs.
pub(super) fn finish(
    name: &str,
    old: &NodeMemoryPolicyStatus,
    mut status: NodeMemoryPolicyStatus,
    mut conditions: Vec<Condition>,
    out: &mut Decision,
) {
    for c in &mut conditions {
        match old.conditions.iter().find(|o| o.type_ == c.type_) {
            Some(o) if o.status == c.status => {
                c.last_transition_time = o.last_transition_time.clone()
            }
            previous => {
                let notable = matches!(
                    (c.type_.as_str(), c.status.as_str()),
                    ("Ready", "True") | ("Degraded", "True") | ("Accepted", "False")
                );
                if notable && (previous.is_some() || c.type_ != "Ready") {
                    out.events.push(PolicyEvent {
                        policy: name.to_string(),
                        warning: c.type_ != "Ready",
                        reason: match c.type_.as_str() {
                            "Ready" => "RolloutComplete",
                            "Degraded" if c.reason == "RollingBack" => "RollingBack",
                            "Degraded" => "RolloutStopped",
                            _ => "PolicyInvalid",
                        },
                        message: c.message.clone(),
                    });
                }
            }
        }
    }
    status.conditions = conditions;
    let strip = |s: &NodeMemoryPolicyStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            c.last_transition_time = Time(Default::default());
        }
        s
    };
    if strip(&status) != strip(old) {
        out.statuses.push((name.to_string(), status));
    }
}

/// The pool's signals summed from its nodes' status.
pub(super) fn pool_signals(world: &World, policy: &str, pool: &[&str]) -> PoolSignals {
    let mut s = PoolSignals::default();
    let mut worst: Vec<(i64, i64, &str)> = Vec::new();
    for node in pool {
        let Some(c) = world.configs.get(*node).filter(|c| c.spec.policy == policy) else {
            continue;
        };
        if let Some(t) = &c.status.totals {
            s.memory_min_bytes += t.memory_min_bytes;
            s.memory_low_bytes += t.memory_low_bytes;
        }
        if let Some(r) = &c.status.since_revision {
            s.throttle_events += r.throttle_events;
            s.oom_kills += r.oom_kills;
            if r.oom_kills > 0 || r.throttle_events > 0 {
                worst.push((r.oom_kills, r.throttle_events, node));
            }
        }
    }
    worst.sort_by(|a, b| (b.0, b.1).cmp(&(a.0, a.1)).then(a.2.cmp(b.2)));
    s.worst_nodes = worst.into_iter().take(5).map(|w| w.2.to_string()).collect();
    s
}
