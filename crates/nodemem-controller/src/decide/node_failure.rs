//! Why a node of a rollout counts as failed, in words an operator can act on (pure).
//! The rollout planner only knows that a node failed; the operator needs to know
//! whether its agent said no, said nothing at all (cut off from the apiserver, not
//! running, not scheduled), was still working on it, or whether its drain never
//! finished. The cause names the node in the policy's conditions and in a
//! `NodeFailed` Event.

use nodemem_api::report::{acknowledged, failure, waiting_on, ConfigEntry};
use nodemem_model::cluster::rollout::RolloutParams;

/// Why a node failed its rollout to a revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeFailure {
    /// Its agent reported the revision failed (Applied or Healthy False).
    AgentReported {
        condition: String,
        reason: String,
        message: String,
    },
    /// Its agent reported nothing on the revision within progressDeadlineSeconds.
    AgentNotReporting {
        deadline_seconds: u64,
        /// The revision the agent last reported, if any.
        last_reported: Option<String>,
    },
    /// Its agent took the revision up but did not report it Applied and Healthy for
    /// minReadySeconds within progressDeadlineSeconds.
    NotReadyInTime {
        deadline_seconds: u64,
        min_ready_seconds: u64,
        /// The agent's condition that is not True yet (type, reason), if any.
        waiting_on: Option<(String, String)>,
    },
    /// The node's drain (a Kubelet-mode Memory Manager change) did not finish within
    /// progressDeadlineSeconds.
    DrainTimedOut { deadline_seconds: u64 },
}

impl NodeFailure {
    /// A stable CamelCase reason, for conditions, Events and tests.
    pub fn reason(&self) -> &'static str {
        match self {
            NodeFailure::AgentReported { .. } => "AgentReportedFailure",
            NodeFailure::AgentNotReporting { .. } => "AgentNotReporting",
            NodeFailure::NotReadyInTime { .. } => "NotReadyInTime",
            NodeFailure::DrainTimedOut { .. } => "DrainTimedOut",
        }
    }

    /// What happened and what to look at.
    pub fn message(&self) -> String {
        match self {
            NodeFailure::AgentReported {
                condition,
                reason,
                message,
            } => format!("its agent reports {condition}=False {reason}: {message}"),
            NodeFailure::AgentNotReporting {
                deadline_seconds,
                last_reported,
            } => format!(
                "its agent reported nothing on this revision within progressDeadlineSeconds ({deadline_seconds} s){}: it is cut off from the apiserver, not running, or not scheduled on the node",
                last_reported
                    .as_ref()
                    .map_or(String::new(), |r| format!("; it last reported revision {r}"))
            ),
            NodeFailure::NotReadyInTime {
                deadline_seconds,
                min_ready_seconds,
                waiting_on,
            } => format!(
                "not Applied and Healthy for minReadySeconds ({min_ready_seconds} s) within progressDeadlineSeconds ({deadline_seconds} s){}",
                waiting_on
                    .as_ref()
                    .map_or(String::new(), |(t, r)| format!("; {t} is {r}"))
            ),
            NodeFailure::DrainTimedOut { deadline_seconds } => format!(
                "its drain did not finish within progressDeadlineSeconds ({deadline_seconds} s): a PodDisruptionBudget or a pod that will not leave holds it"
            ),
        }
    }
}

/// Why `config`'s node failed the rollout to `target` (the planner already judged it
/// failed). `config` is the node's config under the rolling policy, if it has one.
pub fn why_failed(
    config: Option<&ConfigEntry>,
    target: &str,
    params: &RolloutParams,
) -> NodeFailure {
    let deadline_seconds = params.progress_deadline_seconds;
    // A node not on the target revision fails only while it drains for it.
    let Some(c) = config.filter(|c| c.spec.revision == target) else {
        return NodeFailure::DrainTimedOut { deadline_seconds };
    };
    if let Some(f) = failure(c) {
        return NodeFailure::AgentReported {
            condition: f.type_.clone(),
            reason: f.reason.clone(),
            message: f.message.clone(),
        };
    }
    if !acknowledged(c) {
        return NodeFailure::AgentNotReporting {
            deadline_seconds,
            last_reported: c.status.observed_revision.clone(),
        };
    }
    NodeFailure::NotReadyInTime {
        deadline_seconds,
        min_ready_seconds: params.min_ready_seconds,
        waiting_on: waiting_on(c).map(|w| (w.type_.clone(), w.reason.clone())),
    }
}

/// The failed nodes for a condition message: the first few with their causes, then
/// the count of the rest.
pub fn failed_text(failed: &[(String, NodeFailure)]) -> String {
    const SHOWN: usize = 3;
    let mut parts: Vec<String> = failed
        .iter()
        .take(SHOWN)
        .map(|(node, f)| format!("{node} ({}: {})", f.reason(), f.message()))
        .collect();
    if failed.len() > SHOWN {
        parts.push(format!("and {} more", failed.len() - SHOWN));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use nodemem_api::NodeMemoryConfigSpec;
    use nodemem_model::cluster::rollout::OnFailure;

    const PARAMS: RolloutParams = RolloutParams {
        max_unavailable: 1,
        canary: 0,
        min_ready_seconds: 10,
        progress_deadline_seconds: 30,
        max_failures: 1,
        on_failure: OnFailure::Pause,
        paused: false,
    };

    fn cond(type_: &str, status: &str, reason: &str, generation: i64) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: format!("{type_} says {reason}"),
            observed_generation: Some(generation),
            last_transition_time: Time(Default::default()),
        }
    }

    /// A config on revision `r2` at generation 2, with the agent's conditions.
    fn config(observed: Option<&str>, conditions: Vec<Condition>) -> ConfigEntry {
        let mut c = ConfigEntry {
            generation: Some(2),
            spec: NodeMemoryConfigSpec {
                policy: "p".into(),
                revision: "r2".into(),
                settings: crate::decide::released_settings(),
                health: Default::default(),
            },
            status: Default::default(),
            spec_changed_at: Some(0),
            good_seen_at: None,
        };
        c.status.observed_revision = observed.map(str::to_string);
        c.status.conditions = conditions;
        c
    }

    #[test]
    fn an_agent_that_said_nothing_on_the_revision_is_not_reporting() {
        // Its last report is about the previous generation (revision r1).
        let c = config(
            Some("r1"),
            vec![
                cond("Applied", "True", "Applied", 1),
                cond("Healthy", "True", "Healthy", 1),
            ],
        );
        let f = why_failed(Some(&c), "r2", &PARAMS);
        assert_eq!(
            f,
            NodeFailure::AgentNotReporting {
                deadline_seconds: 30,
                last_reported: Some("r1".into())
            }
        );
        assert_eq!(f.reason(), "AgentNotReporting");
        assert!(f.message().contains("within progressDeadlineSeconds (30 s); it last reported revision r1: it is cut off from the apiserver"), "{}", f.message());
        // A node whose agent never reported at all.
        let never = config(None, vec![]);
        assert_eq!(
            why_failed(Some(&never), "r2", &PARAMS).message(),
            "its agent reported nothing on this revision within progressDeadlineSeconds (30 s): it is cut off from the apiserver, not running, or not scheduled on the node"
        );
    }

    #[test]
    fn an_agent_that_said_no_is_quoted() {
        let c = config(Some("r2"), vec![cond("Applied", "False", "WriteFailed", 2)]);
        let f = why_failed(Some(&c), "r2", &PARAMS);
        assert_eq!(f.reason(), "AgentReportedFailure");
        assert_eq!(
            f.message(),
            "its agent reports Applied=False WriteFailed: Applied says WriteFailed"
        );
    }

    #[test]
    fn an_agent_still_working_names_what_it_waits_on() {
        let c = config(
            Some("r2"),
            vec![
                cond("Applied", "False", "KubeletRestartRequired", 2),
                cond("Healthy", "True", "Healthy", 2),
            ],
        );
        let f = why_failed(Some(&c), "r2", &PARAMS);
        assert_eq!(
            f,
            NodeFailure::NotReadyInTime {
                deadline_seconds: 30,
                min_ready_seconds: 10,
                waiting_on: Some(("Applied".into(), "KubeletRestartRequired".into()))
            }
        );
        assert!(f.message().ends_with("; Applied is KubeletRestartRequired"));
        // Good, but not for minReadySeconds yet: nothing to wait on but time.
        let good = config(
            Some("r2"),
            vec![
                cond("Applied", "True", "Applied", 2),
                cond("Healthy", "True", "Healthy", 2),
            ],
        );
        assert_eq!(
            why_failed(Some(&good), "r2", &PARAMS).message(),
            "not Applied and Healthy for minReadySeconds (10 s) within progressDeadlineSeconds (30 s)"
        );
    }

    #[test]
    fn a_node_not_on_the_target_failed_its_drain() {
        let c = config(Some("r1"), vec![]);
        for config in [None, Some(&c)] {
            let f = why_failed(config, "r3", &PARAMS);
            assert_eq!(
                f,
                NodeFailure::DrainTimedOut {
                    deadline_seconds: 30
                }
            );
            assert_eq!(f.reason(), "DrainTimedOut");
        }
    }

    #[test]
    fn the_text_names_the_first_three_and_counts_the_rest() {
        let f = NodeFailure::DrainTimedOut {
            deadline_seconds: 5,
        };
        let failed: Vec<(String, NodeFailure)> =
            (1..=5).map(|i| (format!("n{i}"), f.clone())).collect();
        let text = failed_text(&failed);
        assert!(text.starts_with("n1 (DrainTimedOut: its drain did not finish"));
        assert_eq!(text.matches("DrainTimedOut").count(), 3);
        assert!(text.ends_with("; and 2 more"), "{text}");
        assert_eq!(failed_text(&failed[..1]).matches(';').count(), 0);
    }
}
