//! A policy's status from one decision: conditions that keep their transition time
//! while their status stays, Events on the transitions worth telling, and whether
//! anything differs from what the policy shows (only then is it written).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodemem_api::NodeMemoryPolicyStatus;

use crate::decision::{Decision, PolicyEvent};

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
                    ("Ready", "True")
                        | ("Degraded", "True")
                        | ("Accepted", "False")
                        | ("AgentsBlocked", "True")
                        | ("CRDOutdated", "True")
                        | ("SignalsUnavailable", "True")
                );
                if notable && (previous.is_some() || c.type_ != "Ready") {
                    out.events.push(PolicyEvent {
                        policy: name.to_string(),
                        warning: c.type_ != "Ready",
                        reason: match c.type_.as_str() {
                            "Ready" => "RolloutComplete",
                            "Degraded" if c.reason == "RollingBack" => "RollingBack",
                            "Degraded" => "RolloutStopped",
                            "AgentsBlocked" => "AgentsBlocked",
                            "CRDOutdated" => "CRDOutdated",
                            "SignalsUnavailable" => "SignalsUnavailable",
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
