//! The NodeMemoryConfig status an enforcement pass earns: observedRevision, the
//! Applied and KernelSupported conditions with specific reasons, node facts, totals,
//! managed pods and the last error. Pure: the agent writes it only when it differs
//! from what it wrote last (condition times aside).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodemem_api::conditions::{condition, keep_transition_time, without_transition_times};
use nodemem_api::config::{MemoryTotals, NodeFacts, NumaMemory, NumaNodeFacts};
use nodemem_api::NodeMemoryConfigStatus;
use nodemem_apply::ApplyReport;
use nodemem_cgroup::discover::Discovery;
use nodemem_model::node::DesiredNode;
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_model::Warning;

use crate::health::Verdict;
use crate::kubelet_mode::KubeletOutcome;
use crate::kubelet_status::KubeletRead;
use nodemem_apply::applier::{ApplyError, Recovery};
use nodemem_apply::kubelet::conflict::KubeletConflict;

/// What a pass ended with.
pub enum PassOutcome<'a, 'p> {
    Applied {
        desired: &'a DesiredNode<'p>,
        report: &'a ApplyReport,
        /// What was left to the kubelet.
        conflict: Option<&'a KubeletConflict>,
        /// Under `enforcement: Kubelet` (or while leaving it): the kubelet's side.
        kubelet: Option<&'a KubeletOutcome>,
        /// Under `enforcement: Observe`: `desired` is what would be written; nothing was.
        observing: bool,
        /// The kubelet's configuration as read (or why not).
        kubelet_read: KubeletRead<'a>,
    },
    /// The config's settings do not validate (admission normally prevents it).
    InvalidConfig(&'a [String]),
    Failed(&'a ApplyError),
}

fn facts(d: &Discovery, desired: Option<&DesiredNode<'_>>) -> NodeFacts {
    let manager = desired.and_then(|d| d.memory_manager.as_ref());
    NodeFacts {
        kernel_version: Some(d.kernel_version.clone()),
        cgroup_version: Some(2),
        cgroup_driver: Some(
            match d.cgroup_driver {
                CgroupDriver::Systemd => "systemd",
                CgroupDriver::Cgroupfs => "cgroupfs",
            }
            .to_string(),
        ),
        page_size: Some(d.page_size),
        // Known once a pass has computed (the pass fills these in).
        hard_eviction_memory: None,
        container_values: None,
        kubelet: None,
        numa_nodes: d
            .topology
            .iter()
            .flat_map(|t| &t.nodes)
            .map(|(id, memory)| NumaNodeFacts {
                id: *id as i32,
                memory: memory
                    .iter()
                    .map(|(kind, capacity)| {
                        let reserved = manager
                            .and_then(|m| m.machine.nodes.get(id))
                            .and_then(|n| n.memory_map.get(kind))
                            .map_or(0, |t| t.system_reserved);
                        (
                            kind.clone(),
                            NumaMemory {
                                capacity: *capacity,
                                reserved,
                                allocatable: capacity - reserved,
                            },
                        )
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// The status for a pass over `revision` (of config `generation`).
pub fn status(
    revision: &str,
    generation: Option<i64>,
    outcome: PassOutcome<'_, '_>,
    health: Option<&Verdict>,
    discovery: &Discovery,
    previous: Option<&NodeMemoryConfigStatus>,
    now: &Time,
) -> NodeMemoryConfigStatus {
    let stamp = Stamp {
        revision,
        generation,
        now,
    };
    let mut s = NodeMemoryConfigStatus {
        observed_revision: previous.and_then(|p| p.observed_revision.clone()),
        node: Some(Box::new(facts(discovery, None))),
        ..NodeMemoryConfigStatus::default()
    };
    let mut conditions = Vec::new();
    match outcome {
        PassOutcome::Applied {
            desired,
            report,
            conflict,
            kubelet,
            observing,
            kubelet_read,
        } => {
            conditions.push(conflict_condition(conflict, &stamp));
            let (ok, reason, message) = kubelet_read.read_condition();
            conditions.push(stamp.condition("KubeletConfigRead", ok, reason, message));
            if let Some((ok, reason, message)) = kubelet_read.support_condition() {
                conditions.push(stamp.condition("KubeletSupported", ok, reason, message));
            }
            s.node = Some(Box::new(NodeFacts {
                kubelet: kubelet_read.facts(),
                ..facts(discovery, Some(desired))
            }));
            s.totals = Some(MemoryTotals {
                memory_min_bytes: desired.totals.memory_min_bytes,
                memory_low_bytes: desired.totals.memory_low_bytes,
            });
            s.managed_pods = desired.managed_pods() as i32;
            s.classes = desired
                .pods_per_class()
                .into_iter()
                .map(|(name, pods)| nodemem_api::policy::ClassPods {
                    name: name.to_string(),
                    pods: pods as i64,
                })
                .collect();
            let applied = Applied {
                report,
                kubelet: kubelet.map(KubeletOutcome::applied),
                observing,
            };
            conditions.push(applied_condition(&applied, &mut s, &stamp));
            conditions.push(kernel_condition(&desired.warnings, discovery, &stamp));
        }
        PassOutcome::InvalidConfig(problems) => {
            s.last_error = Some(problems.join("; "));
            conditions.push(stamp.condition(
                "Applied",
                false,
                "InvalidConfig",
                format!(
                    "revision {revision} is not applied: {}; the previous state stays",
                    problems.join("; ")
                ),
            ));
        }
        PassOutcome::Failed(e) => {
            s.last_error = Some(e.to_string());
            conditions.push(stamp.condition(
                "Applied",
                false,
                e.category().reason(),
                format!("revision {revision} is not applied: {e}; the previous state stays"),
            ));
        }
    }
    conditions.push(health_condition(health, previous, &mut s, &stamp));
    keep_transition_times(&mut conditions, previous);
    s.conditions = conditions;
    s
}

/// What every condition of one status shares: the revision it speaks of, the config's
/// generation and the time.
struct Stamp<'a> {
    revision: &'a str,
    generation: Option<i64>,
    now: &'a Time,
}

impl Stamp<'_> {
    fn condition(&self, type_: &str, ok: bool, reason: &str, message: String) -> Condition {
        condition(type_, ok, reason, message, self.generation, self.now)
    }
}

/// A pass that applied, as the `Applied` condition reads it.
struct Applied<'a> {
    report: &'a ApplyReport,
    /// The kubelet's side: (applied, reason, message).
    kubelet: Option<(bool, &'static str, String)>,
    observing: bool,
}

fn conflict_condition(conflict: Option<&KubeletConflict>, stamp: &Stamp<'_>) -> Condition {
    match conflict {
        Some(c) => stamp.condition("KubeletConflict", true, c.reason, c.message.clone()),
        None => stamp.condition(
            "KubeletConflict",
            false,
            "NoConflict",
            "the kubelet does not enforce what nodemem does here".to_string(),
        ),
    }
}

/// `Applied`: by the kubelet, observed, applied, or which writes failed. Sets the
/// observed revision and the last error as it goes.
fn applied_condition(
    applied: &Applied<'_>,
    s: &mut NodeMemoryConfigStatus,
    stamp: &Stamp<'_>,
) -> Condition {
    let revision = stamp.revision;
    let report = applied.report;
    if let Some((false, reason, message)) = &applied.kubelet {
        s.last_error = Some(message.clone());
        return stamp.condition(
            "Applied",
            false,
            reason,
            format!("revision {revision}: {message}"),
        );
    }
    if !report.ok() {
        let errors = write_errors(report);
        s.last_error = errors.first().cloned();
        return stamp.condition(
            "Applied",
            false,
            "WriteFailed",
            format!(
                "revision {revision}: {} write(s) failed (the rest applied): {}",
                errors.len(),
                errors.join("; ")
            ),
        );
    }
    s.observed_revision = Some(revision.to_string());
    match &applied.kubelet {
        Some((true, reason, message)) => stamp.condition(
            "Applied",
            true,
            reason,
            format!("revision {revision} is enforced by the kubelet: {message}"),
        ),
        _ if applied.observing => stamp.condition(
            "Applied",
            true,
            "Observing",
            format!(
                "revision {revision} is observed on the node's pods (managedPods counts them): enforcement: Observe computes what Agent would write and writes nothing"
            ),
        ),
        // Stable between passes, so no pod count in it: a pod that starts or stops
        // must not make the status news (the count is in managedPods, written with the
        // next refresh; what this pass wrote is in the metrics).
        _ => stamp.condition(
            "Applied",
            true,
            "Applied",
            format!("revision {revision} is applied to the node's pods (managedPods counts them)"),
        ),
    }
}

/// Every write that did not happen: refused, failed, or deferred by the backoff.
fn write_errors(report: &ApplyReport) -> Vec<String> {
    let deferred = report.deferred.iter().map(|d| {
        format!(
            "{} (failed {} time(s); next try in {} s)",
            d.error, d.failures, d.retry_in_seconds
        )
    });
    report
        .refused
        .iter()
        .cloned()
        .chain(report.failed.iter().map(|f| f.error.clone()))
        .chain(deferred)
        .collect()
}

fn kernel_condition(warnings: &[Warning], discovery: &Discovery, stamp: &Stamp<'_>) -> Condition {
    let kernel_warning = warnings.iter().find(|w| {
        matches!(
            w,
            Warning::KernelBeforeLivelockFix { .. }
                | Warning::KernelVersionUnknown
                | Warning::KernelVersionUnparsable { .. }
        )
    });
    match kernel_warning {
        Some(w) => stamp.condition("KernelSupported", false, w.code(), w.to_string()),
        None => stamp.condition(
            "KernelSupported",
            true,
            "CgroupV2",
            format!("kernel {} with cgroup v2", discovery.kernel_version),
        ),
    }
}

/// `Healthy` from this pass's verdict; passes that read no signals (reactions, one
/// pod's event) keep the verdict of the last whole-node pass on the same revision.
fn health_condition(
    health: Option<&Verdict>,
    previous: Option<&NodeMemoryConfigStatus>,
    s: &mut NodeMemoryConfigStatus,
    stamp: &Stamp<'_>,
) -> Condition {
    let revision = stamp.revision;
    if let Some(v) = health {
        s.since_revision = Some(v.signals.clone());
        let mut c = stamp.condition(
            "Healthy",
            v.healthy.unwrap_or(false),
            v.reason,
            v.message.clone(),
        );
        if v.healthy.is_none() {
            c.status = "Unknown".to_string();
        }
        return c;
    }
    let kept = previous
        .filter(|_| s.observed_revision.as_deref() == Some(revision))
        .filter(|p| p.observed_revision.as_deref() == Some(revision))
        .and_then(|p| {
            let c = p.conditions.iter().find(|c| c.type_ == "Healthy")?;
            Some((c.clone(), p.since_revision.clone()))
        });
    match kept {
        Some((c, since)) => {
            s.since_revision = since;
            c
        }
        None => stamp.condition(
            "Healthy",
            false,
            "NotApplied",
            format!("revision {revision} is not applied"),
        ),
    }
}

/// A condition keeps its transition time while its status stays.
fn keep_transition_times(conditions: &mut [Condition], previous: Option<&NodeMemoryConfigStatus>) {
    let previous = previous.map_or(&[][..], |p| &p.conditions[..]);
    for c in conditions {
        keep_transition_time(c, previous);
    }
}

/// Adds the `StateRecovered` condition when the agent runs on state records it had to
/// re-derive or write again: True, `StateRederived` when any was re-derived (what
/// nodemem owns, or the Memory Manager's assignments, rebuilt), else `StateRewritten`;
/// the message says what was wrong with each (the last three) and what was done. None
/// when every record was intact.
pub fn add_state_recovered(
    s: &mut NodeMemoryConfigStatus,
    recoveries: &[Recovery],
    generation: Option<i64>,
    previous: Option<&NodeMemoryConfigStatus>,
    now: &Time,
) {
    if recoveries.is_empty() {
        return;
    }
    let reason = recoveries
        .iter()
        .map(Recovery::reason)
        .find(|r| *r == "StateRederived")
        .unwrap_or("StateRewritten");
    let shown = recoveries.len().saturating_sub(3);
    let mut message: Vec<String> = recoveries[shown..]
        .iter()
        .map(ToString::to_string)
        .collect();
    if shown > 0 {
        message.insert(0, format!("{} earlier recoveries", shown));
    }
    let mut c = condition(
        "StateRecovered",
        true,
        reason,
        message.join("; "),
        generation,
        now,
    );
    keep_transition_time(&mut c, previous.map_or(&[][..], |p| &p.conditions[..]));
    s.conditions.push(c);
}

/// How a new status is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusWrite {
    /// It says nothing new.
    Nothing,
    /// Something a reader acts on changed (conditions, the revision, the signals
    /// since it, errors, relief): written at once.
    Now,
    /// Only figures and counters moved: the observation's (its seconds, the
    /// distribution, the worst containers' peaks: they move with every sample), the
    /// managed pods and their totals (they move with every pod start or stop: at 1,000
    /// starts a second across a cluster, a write each): written once the refresh
    /// interval has passed since the last write, with the newest figures, so an observed
    /// node does not rewrite its status at every sample (`kubectl get nmc -w` was 85%
    /// such lines). News (containers first seen, newly throttled, another worst
    /// container) is written at once.
    Coalesced,
}

pub fn status_write(
    last: Option<&NodeMemoryConfigStatus>,
    new: &NodeMemoryConfigStatus,
) -> StatusWrite {
    let Some(last) = last else {
        return StatusWrite::Now;
    };
    if !differs(last, new) {
        return StatusWrite::Nothing;
    }
    // The observer's own news (containers first seen, newly throttled, another worst
    // container: `Observer::news`) is kept; figures that only grow are not, nor the
    // counters every pod start or stop moves (under churn a write per pod start).
    let without_figures = |s: &NodeMemoryConfigStatus| {
        let mut s = s.clone();
        s.managed_pods = 0;
        s.totals = None;
        if let Some(o) = &mut s.observation {
            o.observed_seconds = 0;
            o.fitting_by_factor.clear();
            for w in &mut o.worst {
                *w = nodemem_api::config::ObservedContainer {
                    pod: std::mem::take(&mut w.pod),
                    container: std::mem::take(&mut w.container),
                    ..Default::default()
                };
            }
        }
        // Reclaim's headline is news (`Reclaim::news`); its figures move every tick.
        if let Some(r) = &mut s.reclaim {
            **r = nodemem_api::config::ReclaimSummary {
                revision: std::mem::take(&mut r.revision),
                mode: std::mem::take(&mut r.mode),
                supported: r.supported,
                swap: r.swap,
                containers: r.containers,
                ..Default::default()
            };
        }
        s
    };
    if differs(&without_figures(last), &without_figures(new)) {
        StatusWrite::Now
    } else {
        StatusWrite::Coalesced
    }
}

/// True when two statuses differ in more than condition times.
pub fn differs(a: &NodeMemoryConfigStatus, b: &NodeMemoryConfigStatus) -> bool {
    let strip = |s: &NodeMemoryConfigStatus| {
        let mut s = s.clone();
        without_transition_times(&mut s.conditions);
        s
    };
    strip(a) != strip(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemem_model::node::{desired_node, NodeFacts, NodeInput, NodePod};
    use nodemem_model::settings::NodeSettings;
    use nodemem_model::values::memory_qos::MemoryQosSettings;

    #[test]
    fn figures_alone_are_coalesced_and_everything_else_goes_at_once() {
        let observed = |seconds: i64, throttled: i32| NodeMemoryConfigStatus {
            observed_revision: Some("r1".into()),
            observation: Some(Box::new(nodemem_api::config::ObservationSummary {
                revision: "r1".into(),
                enforced: false,
                since: Time(Default::default()),
                observed_seconds: seconds,
                containers: 3,
                throttled_containers: throttled,
                fitting_by_factor: vec![3; 20],
                worst: Vec::new(),
                classes: Vec::new(),
            })),
            ..NodeMemoryConfigStatus::default()
        };
        let a = observed(10, 0);
        assert_eq!(status_write(None, &a), StatusWrite::Now, "the first");
        assert_eq!(status_write(Some(&a), &a), StatusWrite::Nothing);
        let later = observed(15, 0);
        assert_eq!(status_write(Some(&a), &later), StatusWrite::Coalesced);
        let mut more_pods = later.clone();
        more_pods.managed_pods += 10;
        more_pods.totals = Some(Default::default());
        assert_eq!(
            status_write(Some(&a), &more_pods),
            StatusWrite::Coalesced,
            "pods that start or stop are counters"
        );
        let throttled = observed(15, 1);
        assert_eq!(
            status_write(Some(&a), &throttled),
            StatusWrite::Now,
            "newly throttled is news"
        );
        let mut revised = later.clone();
        revised.observed_revision = Some("r2".into());
        assert_eq!(status_write(Some(&a), &revised), StatusWrite::Now);
        let mut failed = later.clone();
        failed.last_error = Some("write failed".into());
        assert_eq!(status_write(Some(&a), &failed), StatusWrite::Now);
    }

    fn pods() -> Vec<NodePod> {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {
                "requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}}]}
        }))
        .unwrap();
        vec![nodemem_api::k8s::node_pod_from_k8s(&pod, &Default::default()).unwrap()]
    }

    /// A systemd-driver node with `kernel`, as discovery reports it.
    fn discovery(kernel: &str) -> Discovery {
        Discovery {
            kernel_version: kernel.into(),
            cgroup_driver: CgroupDriver::Systemd,
            kubepods_controllers: Default::default(),
            page_size: 4096,
            topology: None,
        }
    }

    fn kernel_supported(kernel: &str) -> (Condition, Condition) {
        let settings = NodeSettings {
            memory_qos: MemoryQosSettings {
                enabled: true,
                ..MemoryQosSettings::default()
            },
            ..NodeSettings::default()
        };
        let mut facts = NodeFacts::default();
        facts.memory.kernel_version = Some(kernel.into());
        facts.memory.allocatable_memory = Some(8 << 30);
        let pods = pods();
        let desired = desired_node(NodeInput {
            settings: &settings,
            facts: &facts,
            pods: &pods,
            memory_manager: None,
        })
        .unwrap();
        let discovery = discovery(kernel);
        let s = status(
            "r1",
            Some(1),
            PassOutcome::Applied {
                desired: &desired,
                report: &ApplyReport::default(),
                conflict: None,
                kubelet: None,
                observing: false,
                kubelet_read: Default::default(),
            },
            None,
            &discovery,
            None,
            &Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        );
        let find = |t: &str| s.conditions.iter().find(|c| c.type_ == t).unwrap().clone();
        (find("Applied"), find("KernelSupported"))
    }

    /// KEP-2570: before 5.9 memory.high can livelock; the kubelet warns and still sets
    /// the values, and so does nodemem, saying so in KernelSupported.
    #[test]
    fn a_kernel_before_the_livelock_fix_is_reported_and_the_values_still_applied() {
        let (applied, kernel) = kernel_supported("5.4.0-150-generic");
        assert_eq!(
            (applied.status.as_str(), applied.reason.as_str()),
            ("True", "Applied")
        );
        assert_eq!(
            (kernel.status.as_str(), kernel.reason.as_str()),
            ("False", "KernelBeforeLivelockFix")
        );
        let (_, kernel) = kernel_supported("5.9.0");
        assert_eq!(
            (kernel.status.as_str(), kernel.reason.as_str()),
            ("True", "CgroupV2")
        );
        let (_, kernel) = kernel_supported("not-a-version");
        assert_eq!(kernel.reason, "KernelVersionUnparsable");
    }

    /// A state directory that is full or read-only: the pass wrote nothing, and the
    /// condition says so with the record's path and the errno.
    #[test]
    fn a_record_that_cannot_be_saved_is_state_unusable_and_says_nothing_was_written() {
        let e = ApplyError::RecordNotSaved(nodemem_apply::StateError::Io {
            path: "/var/lib/nodemem/ownership.json".into(),
            source: std::io::Error::from_raw_os_error(libc::ENOSPC),
        });
        let discovery = discovery("6.1.0");
        let s = status(
            "r1",
            Some(1),
            PassOutcome::Failed(&e),
            None,
            &discovery,
            None,
            &Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        );
        let applied = s.conditions.iter().find(|c| c.type_ == "Applied").unwrap();
        assert_eq!(
            (applied.status.as_str(), applied.reason.as_str()),
            ("False", "StateUnusable")
        );
        assert_eq!(
            applied.message,
            "revision r1 is not applied: /var/lib/nodemem/ownership.json: No space left on device (os error 28); the record of what nodemem would write could not be saved first, so nothing was written (the node keeps its values); the previous state stays"
        );
    }

    #[test]
    fn a_rederived_record_outranks_a_rewritten_one_and_the_condition_keeps_its_time() {
        use nodemem_apply::applier::{Recovery, RecoveryAction};
        let now = Time(k8s_openapi::jiff::Timestamp::from_second(100).unwrap());
        let later = Time(k8s_openapi::jiff::Timestamp::from_second(200).unwrap());
        let mut s = NodeMemoryConfigStatus::default();
        add_state_recovered(&mut s, &[], Some(1), None, &now);
        assert!(
            s.conditions.is_empty(),
            "no condition while every record is intact"
        );
        let rederived = Recovery {
            record: "/state/ownership.json".into(),
            problem: "/state/ownership.json: corrupt state record (checksum)".into(),
            action: RecoveryAction::OwnershipRederived {
                set_aside: "/state/ownership.json.unusable-5".into(),
            },
        };
        let rewritten = Recovery {
            record: "/state/last-known.json".into(),
            problem: "/state/last-known.json: corrupt state record (truncated)".into(),
            action: RecoveryAction::LastKnownReadAgain,
        };
        add_state_recovered(
            &mut s,
            &[rederived.clone(), rewritten.clone()],
            Some(1),
            None,
            &now,
        );
        let c = &s.conditions[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str()),
            ("StateRecovered", "True")
        );
        assert_eq!(c.reason, "StateRederived");
        assert!(
            c.message.contains(
                "set aside as /state/ownership.json.unusable-5; what nodemem owns is re-derived"
            ),
            "{}",
            c.message
        );
        assert!(
            c.message
                .contains("; /state/last-known.json: corrupt state record (truncated); not used"),
            "{}",
            c.message
        );
        // Later passes keep the time; only rewrites: StateRewritten.
        let previous = s.clone();
        let mut next = NodeMemoryConfigStatus::default();
        add_state_recovered(
            &mut next,
            std::slice::from_ref(&rewritten),
            Some(1),
            Some(&previous),
            &later,
        );
        assert_eq!(next.conditions[0].reason, "StateRewritten");
        assert_eq!(next.conditions[0].last_transition_time, now);
        // Many: the last three and a count of the rest.
        let many = vec![rewritten; 5];
        let mut s = NodeMemoryConfigStatus::default();
        add_state_recovered(&mut s, &many, Some(1), None, &now);
        assert!(s.conditions[0]
            .message
            .starts_with("2 earlier recoveries; "));
        assert_eq!(s.conditions[0].message.matches("not used").count(), 3);
    }
}
