//! A policy's health in the words GitOps tools read: `Ready`, and the abnormal-true
//! `Reconciling` and `Stalled` of the kstatus conventions (sigs.k8s.io/cli-utils
//! `pkg/kstatus`, which Flux's health checks and `kubectl wait` follow). They are
//! derived from the conditions the decision already wrote (`Accepted`, `Conflicting`,
//! `Progressing` and `Degraded`), so that every tool tells the same story as
//! `kubectl get nmp`:
//!
//! * `Ready=True` only when every node the policy governs runs the spec's own revision
//!   and nothing else moves (the rollout is `Complete`).
//! * `Reconciling=True` while the controller moves nodes toward the spec (a rollout or
//!   a handoff progresses).
//! * `Stalled=True` when the spec will not run without a person: rolled back (on the
//!   way back or there), stopped at `maxFailures`, an invalid spec (held on the last
//!   accepted revision, or never accepted), a tie with a policy of equal priority, a
//!   rollout whose agents cannot start on some of its nodes (`AgentsBlocked`: an image
//!   that cannot be pulled, an admission refusal, a crash loop, no room).
//! * A pause the user asked for is neither: `Ready=False` with reason `Paused`, which
//!   kstatus reads as in progress and Argo CD's health check as suspended.
//!
//! `Reconciling` and `Stalled` are never both True: kstatus takes whichever it meets
//! first.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use nodemem_api::conditions::condition;

/// What the policy's state means to a GitOps tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Health {
    /// The spec runs on every node the policy governs.
    Ready,
    /// The controller moves nodes toward the spec (or away from a deleted policy).
    Reconciling,
    /// The user paused the rollout: nothing is wrong, nothing moves.
    Suspended,
    /// Nothing moves toward the spec without a person.
    Stalled,
    /// Nothing left to do for a deleted policy: it goes now.
    Gone,
}

/// The health a `Progressing` reason stands for, the spec being valid and untied. A
/// reason this list does not know reads as reconciling: never ready, never failed.
fn of_progressing(reason: &str) -> Health {
    match reason {
        "Complete" => Health::Ready,
        "Paused" => Health::Suspended,
        "MaxFailures" | "OneNodeFailed" | "RollingBack" | "RolledBack" | "InvalidSpec" => {
            Health::Stalled
        }
        // Updating, WaitingForCanary, Releasing.
        _ => Health::Reconciling,
    }
}

fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

fn is_true<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    find(conditions, type_).filter(|c| c.status == "True")
}

/// The health of a live policy, its reason and message, from the conditions the
/// decision wrote.
pub(crate) fn judge(conditions: &[Condition]) -> (Health, String, String) {
    let (reason, message) = find(conditions, "Progressing").map_or_else(
        || ("Unknown".to_string(), "no rollout state yet".to_string()),
        |c| (c.reason.clone(), c.message.clone()),
    );
    if let Some(invalid) = find(conditions, "Accepted").filter(|c| c.status == "False") {
        return (
            Health::Stalled,
            "InvalidSpec".to_string(),
            invalid.message.clone(),
        );
    }
    if let Some(tie) = is_true(conditions, "Conflicting") {
        return (Health::Stalled, tie.reason.clone(), tie.message.clone());
    }
    let health = of_progressing(&reason);
    // A rollout cannot reach nodes whose agent cannot start: a person must act (Flux
    // fails the commit now instead of at its timeout); it clears when the pods run.
    if let Some(blocked) = is_true(conditions, "AgentsBlocked") {
        if health == Health::Reconciling {
            return (
                Health::Stalled,
                "AgentsBlocked".to_string(),
                blocked.message.clone(),
            );
        }
    }
    // A rollback's Degraded message says which revision failed where and what to do.
    let message = match is_true(conditions, "Degraded") {
        Some(d) if health == Health::Stalled => d.message.clone(),
        _ => message,
    };
    (health, reason, message)
}

/// `Ready`, `Reconciling` and `Stalled` of a live policy whose decision wrote
/// `conditions` (none of these three among them).
pub(crate) fn health_conditions(
    conditions: &[Condition],
    g: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let (health, reason, message) = judge(conditions);
    said(health, &reason, message, g, now)
}

/// The same three for a deleted policy: reconciling while its nodes leave it
/// (`Releasing`), then only not ready (`Released`: it goes now).
pub(crate) fn deleted_conditions(
    reason: &str,
    message: String,
    g: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let health = match reason {
        "Released" => Health::Gone,
        _ => Health::Reconciling,
    };
    said(health, reason, message, g, now)
}

fn said(
    health: Health,
    reason: &str,
    message: String,
    g: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let ready = health == Health::Ready;
    let flag = |type_: &str, on: bool| {
        let (why, text) = if on {
            (reason, message.clone())
        } else {
            ("AsExpected", String::new())
        };
        condition(type_, on, why, text, g, now)
    };
    vec![
        condition(
            "Ready",
            ready,
            if ready { "AllNodesReady" } else { reason },
            message.clone(),
            g,
            now,
        ),
        flag("Reconciling", health == Health::Reconciling),
        flag("Stalled", health == Health::Stalled),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(type_: &str, status: bool, reason: &str, message: &str) -> Condition {
        condition(
            type_,
            status,
            reason,
            message.to_string(),
            Some(1),
            &Time(Default::default()),
        )
    }

    fn rollout(reason: &str, progressing: bool) -> Vec<Condition> {
        vec![
            c("Accepted", true, "Valid", "revision r2"),
            c("Progressing", progressing, reason, &format!("{reason} now")),
            c("Degraded", false, "AsExpected", ""),
        ]
    }

    /// Ready, Reconciling and Stalled as (status, reason) in that order.
    fn three(conditions: &[Condition]) -> Vec<(String, String)> {
        health_conditions(conditions, Some(1), &Time(Default::default()))
            .into_iter()
            .map(|c| (c.status, c.reason))
            .collect()
    }

    fn pairs(list: [(&str, &str); 3]) -> Vec<(String, String)> {
        list.iter()
            .map(|(s, r)| (s.to_string(), r.to_string()))
            .collect()
    }

    #[test]
    fn every_rollout_state_has_one_health() {
        let cases = [
            ("Complete", Health::Ready),
            ("Updating", Health::Reconciling),
            ("WaitingForCanary", Health::Reconciling),
            ("Releasing", Health::Reconciling),
            ("Paused", Health::Suspended),
            ("MaxFailures", Health::Stalled),
            ("OneNodeFailed", Health::Stalled),
            ("RollingBack", Health::Stalled),
            ("RolledBack", Health::Stalled),
            ("InvalidSpec", Health::Stalled),
            ("SomethingNew", Health::Reconciling),
        ];
        for (reason, health) in cases {
            assert_eq!(judge(&rollout(reason, true)).0, health, "{reason}");
        }
    }

    #[test]
    fn only_a_complete_rollout_is_ready_and_reconciling_and_stalled_are_never_both_true() {
        assert_eq!(
            three(&rollout("Complete", false)),
            pairs([
                ("True", "AllNodesReady"),
                ("False", "AsExpected"),
                ("False", "AsExpected")
            ])
        );
        assert_eq!(
            three(&rollout("Updating", true)),
            pairs([
                ("False", "Updating"),
                ("True", "Updating"),
                ("False", "AsExpected")
            ])
        );
        assert_eq!(
            three(&rollout("Paused", false)),
            pairs([
                ("False", "Paused"),
                ("False", "AsExpected"),
                ("False", "AsExpected")
            ]),
            "a pause is no failure and no progress"
        );
        for reason in [
            "Complete",
            "Updating",
            "Paused",
            "MaxFailures",
            "RolledBack",
        ] {
            let both = three(&rollout(reason, true));
            assert!(both[1].0 == "False" || both[2].0 == "False", "{reason}");
        }
    }

    #[test]
    fn a_rollback_is_stalled_with_the_degraded_message_that_says_what_to_do() {
        let mut conditions = rollout("RolledBack", false);
        conditions[2] = c(
            "Degraded",
            true,
            "RolledBack",
            "revision r2 was rolled back after it failed on n1; change the spec",
        );
        let out = health_conditions(&conditions, Some(1), &Time(Default::default()));
        assert_eq!(
            (out[0].status.as_str(), out[0].reason.as_str()),
            ("False", "RolledBack")
        );
        assert_eq!(
            (out[2].status.as_str(), out[2].reason.as_str()),
            ("True", "RolledBack")
        );
        assert!(
            out[2].message.ends_with("change the spec"),
            "{}",
            out[2].message
        );
    }

    #[test]
    fn agents_that_cannot_start_stall_a_rollout_in_progress_only() {
        let blocked = c(
            "AgentsBlocked",
            true,
            "ImagePullBackOff",
            "the agent cannot start on 1 node(s) of the pool: ImagePullBackOff on n1: back-off",
        );
        let mut updating = rollout("Updating", true);
        updating.push(blocked.clone());
        assert_eq!(
            three(&updating),
            pairs([
                ("False", "AgentsBlocked"),
                ("False", "AsExpected"),
                ("True", "AgentsBlocked")
            ])
        );
        assert!(judge(&updating).2.contains("ImagePullBackOff on n1"));
        // Not a pause, a rollback or a complete rollout: those say what they are.
        for (reason, health) in [
            ("Paused", Health::Suspended),
            ("RolledBack", Health::Stalled),
            ("Complete", Health::Ready),
        ] {
            let mut conditions = rollout(reason, false);
            conditions.push(blocked.clone());
            assert_eq!(judge(&conditions).0, health, "{reason}");
            assert_eq!(judge(&conditions).1, reason);
        }
        let mut cleared = rollout("Updating", true);
        cleared.push(c("AgentsBlocked", false, "AsExpected", ""));
        assert_eq!(judge(&cleared).0, Health::Reconciling);
    }

    #[test]
    fn an_invalid_spec_or_a_tie_stalls_even_a_complete_rollout() {
        let mut invalid = rollout("Complete", false);
        invalid[0] = c("Accepted", false, "Invalid", "factor 7 is above 1");
        assert_eq!(
            three(&invalid),
            pairs([
                ("False", "InvalidSpec"),
                ("False", "AsExpected"),
                ("True", "InvalidSpec")
            ])
        );
        let mut tied = rollout("Updating", true);
        tied.push(c("Conflicting", true, "EqualPriority", "2 node(s)"));
        assert_eq!(
            three(&tied),
            pairs([
                ("False", "EqualPriority"),
                ("False", "AsExpected"),
                ("True", "EqualPriority")
            ])
        );
    }

    #[test]
    fn a_deleted_policy_reconciles_while_its_nodes_leave_and_then_is_only_not_ready() {
        let three = |reason: &str| -> Vec<(String, String)> {
            deleted_conditions(
                reason,
                "deleted: ...".into(),
                None,
                &Time(Default::default()),
            )
            .into_iter()
            .map(|c| (c.status, c.reason))
            .collect()
        };
        assert_eq!(
            three("Releasing"),
            pairs([
                ("False", "Releasing"),
                ("True", "Releasing"),
                ("False", "AsExpected")
            ])
        );
        assert_eq!(
            three("Released"),
            pairs([
                ("False", "Released"),
                ("False", "AsExpected"),
                ("False", "AsExpected")
            ])
        );
    }

    #[test]
    fn no_rollout_state_is_never_ready() {
        let (health, reason, _) = judge(&[c("Accepted", true, "Valid", "")]);
        assert_eq!((health, reason.as_str()), (Health::Reconciling, "Unknown"));
    }
}
