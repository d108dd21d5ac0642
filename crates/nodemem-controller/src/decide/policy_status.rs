//! A policy's status from one decision: conditions that keep their transition time
//! while their status stays, Events on the transitions worth telling, and whether
//! anything differs from what the policy shows (only then is it written).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use nodemem_api::conditions::{keep_transition_time, without_transition_times};
use nodemem_api::NodeMemoryPolicyStatus;

use crate::decision::{Decision, PolicyEvent};

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
        if keep_transition_time(c, &old.conditions) {
            continue;
        }
        let previous = old.conditions.iter().find(|o| o.type_ == c.type_);
        out.events
            .extend(transition_event(name, c, previous.is_some()));
    }
    status.conditions = conditions;
    let strip = |s: &NodeMemoryPolicyStatus| {
        let mut s = s.clone();
        without_transition_times(&mut s.conditions);
        s
    };
    if strip(&status) != strip(old) {
        out.statuses.push((name.to_string(), status));
    }
}

/// The Event a condition's transition is worth, if any: a pool Ready (not at a policy's
/// first status), and every trouble.
fn transition_event(policy: &str, c: &Condition, had_one: bool) -> Option<PolicyEvent> {
    let notable = matches!(
        (c.type_.as_str(), c.status.as_str()),
        ("Ready", "True")
            | ("Degraded", "True")
            | ("Accepted", "False")
            | ("AgentsBlocked", "True")
            | ("CRDOutdated", "True")
            | ("SignalsUnavailable", "True")
            | ("ReclaimUnsupported", "True")
    );
    if !notable || (!had_one && c.type_ == "Ready") {
        return None;
    }
    Some(PolicyEvent {
        policy: policy.to_string(),
        warning: c.type_ != "Ready",
        reason: match c.type_.as_str() {
            "Ready" => "RolloutComplete",
            "Degraded" if c.reason == "RollingBack" => "RollingBack",
            "Degraded" => "RolloutStopped",
            "AgentsBlocked" => "AgentsBlocked",
            "CRDOutdated" => "CRDOutdated",
            "SignalsUnavailable" => "SignalsUnavailable",
            "ReclaimUnsupported" => "ReclaimUnsupported",
            _ => "PolicyInvalid",
        },
        message: c.message.clone(),
    })
}
