//! From the API types to the model's settings: quantities parsed, enums mapped, and
//! every problem collected with its field path (never only the first).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nodemem_model::cluster::policy::{self as model, MemoryManagerSettings, NodeReserved};
// The model's settings are named as this API names them: here the model's is
// `node_model::NodeSettings`, the API's (the spec) `NodeSettings`.
use nodemem_model::cluster::resolve::{resolve_policy, PolicyCandidate, Resolution};
use nodemem_model::cluster::selector::{self, LabelSelector, Requirement};
use nodemem_model::settings::{self as node_model, validate_node_settings};
use nodemem_model::values::factor::ThrottlingFactor;
use nodemem_model::values::memory_qos::{self, MemoryQosSettings};
use nodemem_model::{Problem, Quantity};

use crate::int_or_percent::IntOrPercent;
use crate::policy::{
    Enforcement, MemoryHighPolicy, MemoryManagerPolicy, MemoryManagerSpec, MemoryQosSpec,
    NodeMemoryPolicySpec, NodeReservedSpec, NodeSelector, NodeSettings, ReservationPolicy,
    RevisionRecord, RolloutSpec, SelectorOperator,
};
use crate::quantity::QuantityString;
use crate::{NodeMemoryPolicy, NodeMemoryPolicyStatus};

/// When an object was created, in seconds (of policies tied on priority the oldest
/// claims the nodes that run none of them).
pub fn created_seconds(meta: &ObjectMeta) -> Option<i64> {
    meta.creation_timestamp.as_ref().map(|t| t.0.as_second())
}

/// The revision an invalid spec leaves a policy's pool on: the newest it accepted, or
/// the one before when that one was rolled back (None: it never accepted one).
pub fn last_accepted(status: &NodeMemoryPolicyStatus) -> Option<&RevisionRecord> {
    let mut records = status.revisions.iter();
    let first = records.next()?;
    if status.rolled_back_revision.as_deref() == Some(first.revision.as_str()) {
        return records.next();
    }
    Some(first)
}

/// Whether resolution gives a policy nodes: a deleted policy hands its nodes on, and a
/// policy whose spec was never valid takes none (an invalid edit of an accepted policy
/// keeps its nodes on [`last_accepted`]).
pub fn takes_nodes(deleting: bool, valid: bool, status: &NodeMemoryPolicyStatus) -> bool {
    !deleting && (valid || last_accepted(status).is_some())
}

/// [`takes_nodes`] for a policy object.
pub fn policy_takes_nodes(p: &NodeMemoryPolicy) -> bool {
    takes_nodes(
        p.metadata.deletion_timestamp.is_some(),
        node_settings(&p.spec.settings).is_ok(),
        &p.status.clone().unwrap_or_default(),
    )
}

/// Which of `policies` governs a node with these labels that runs `current`'s revision
/// (the controller's rule, `nodemem_model::cluster::resolve`: highest priority among the policies
/// that [`takes_nodes`]; a tie keeps the node where it is, or gives a node that runs
/// none of them to the oldest policy).
pub fn governing<'p>(
    policies: impl IntoIterator<Item = &'p NodeMemoryPolicy>,
    labels: &BTreeMap<String, String>,
    current: Option<&str>,
) -> Resolution {
    let policies: Vec<(&NodeMemoryPolicy, LabelSelector)> = policies
        .into_iter()
        .filter(|p| policy_takes_nodes(p))
        .map(|p| (p, to_selector(&p.spec.node_selector)))
        .collect();
    let candidates: Vec<PolicyCandidate<'_>> = policies
        .iter()
        .map(|(p, selector)| PolicyCandidate {
            name: p.metadata.name.as_deref().unwrap_or(""),
            priority: p.spec.priority,
            selector,
            created: created_seconds(&p.metadata),
        })
        .collect();
    resolve_policy(&candidates, labels, current)
}

/// The model's label selector for a policy's `nodeSelector`.
pub fn to_selector(selector: &NodeSelector) -> LabelSelector {
    LabelSelector {
        match_labels: selector.match_labels.clone(),
        match_expressions: selector
            .match_expressions
            .iter()
            .map(|r| Requirement {
                key: r.key.clone(),
                operator: match r.operator {
                    SelectorOperator::In => selector::Operator::In,
                    SelectorOperator::NotIn => selector::Operator::NotIn,
                    SelectorOperator::Exists => selector::Operator::Exists,
                    SelectorOperator::DoesNotExist => selector::Operator::DoesNotExist,
                },
                values: r.values.clone(),
            })
            .collect(),
    }
}

fn quantity(path: String, text: &QuantityString, problems: &mut Vec<Problem>) -> Option<Quantity> {
    match text.parse() {
        Ok(q) => Some(q),
        Err(e) => {
            problems.push(Problem::new(path, e.to_string()));
            None
        }
    }
}

/// The model's Memory QoS settings from the spec's `memoryQoS`; a quantity that does not
/// parse is a problem at `path`.
pub fn to_memory_qos(
    spec: &MemoryQosSpec,
    path: &str,
    problems: &mut Vec<Problem>,
) -> MemoryQosSettings {
    // One hand-off to the model, which checks the factor and decides whether memory.high
    // is set; nothing of it is read back here (a problem makes the settings unusable).
    let throttle = spec.memory_high == MemoryHighPolicy::Throttle;
    let throttling_factor = ThrottlingFactor::for_memory_high(spec.throttling_factor, throttle)
        .unwrap_or_else(|e| {
            problems.push(Problem::new(
                format!("{path}.throttlingFactor"),
                e.to_string(),
            ));
            None
        });
    MemoryQosSettings {
        enabled: spec.enabled,
        throttling_factor,
        reservation_policy: match spec.reservation_policy {
            ReservationPolicy::None => memory_qos::ReservationPolicy::None,
            ReservationPolicy::TieredReservation => {
                memory_qos::ReservationPolicy::TieredReservation
            }
            ReservationPolicy::HardReservation => memory_qos::ReservationPolicy::HardReservation,
        },
    }
}

/// The model's Memory Manager settings from the spec's `memoryManager`; a quantity that
/// does not parse is a problem at `path`.
pub fn to_memory_manager(
    spec: &MemoryManagerSpec,
    path: &str,
    problems: &mut Vec<Problem>,
) -> MemoryManagerSettings {
    MemoryManagerSettings {
        policy: match spec.policy {
            MemoryManagerPolicy::None => model::MemoryManagerPolicy::None,
            MemoryManagerPolicy::Static => model::MemoryManagerPolicy::Static,
        },
        reserved_memory: spec
            .reserved_memory
            .iter()
            .enumerate()
            .map(|(i, r)| model::ReservedMemory {
                numa_node: r.numa_node as i64,
                limits: r
                    .limits
                    .iter()
                    .filter_map(|(name, text)| {
                        let p = format!("{path}.reservedMemory[{i}].limits.{name}");
                        quantity(p, text, problems).map(|q| (name.clone(), q))
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// The model's node reservations from the spec's `nodeReserved`; a quantity that does
/// not parse is a problem at `path`.
pub fn to_node_reserved(
    spec: &NodeReservedSpec,
    path: &str,
    problems: &mut Vec<Problem>,
) -> NodeReserved {
    let mut field = |name: &str, v: &Option<QuantityString>| {
        v.as_ref()
            .and_then(|t| quantity(format!("{path}.{name}"), t, problems))
    };
    NodeReserved {
        kube_reserved: field("kubeReserved", &spec.kube_reserved),
        system_reserved: field("systemReserved", &spec.system_reserved),
        eviction_hard: field("evictionHard", &spec.eviction_hard),
    }
}

fn check_rollout(rollout: &RolloutSpec, problems: &mut Vec<Problem>) {
    let mut check = |name: &str, v: &IntOrPercent| {
        if let Err(e) = v.resolve(100) {
            problems.push(Problem::new(format!("spec.rollout.{name}"), e));
        }
    };
    check("maxUnavailable", &rollout.max_unavailable);
    if let Some(canary) = &rollout.canary {
        check("canary", canary);
    }
    if rollout.min_ready_seconds < 0 {
        problems.push(Problem::new(
            "spec.rollout.minReadySeconds",
            "must be greater than or equal to 0",
        ));
    }
    // As Deployment validation refuses minReadySeconds at or above
    // progressDeadlineSeconds: a node must be ready that long before it counts, and
    // fails at the deadline first, so every healthy node would fail.
    if rollout.min_ready_seconds >= rollout.progress_deadline_seconds {
        problems.push(Problem::new(
            "spec.rollout.minReadySeconds",
            format!(
                "must be less than progressDeadlineSeconds ({}): a node ready for {} s would fail at the deadline first",
                rollout.progress_deadline_seconds, rollout.min_ready_seconds
            ),
        ));
    }
    if rollout.max_failures < 1 {
        problems.push(Problem::new(
            "spec.rollout.maxFailures",
            "must be greater than or equal to 1",
        ));
    }
}

/// The model's settings for a node (from a policy or a config spec), or every problem
/// found, type-level and semantic (`nodemem_model::settings::validate_node_settings`),
/// with paths under `spec`.
pub fn node_settings(settings: &NodeSettings) -> Result<node_model::NodeSettings, Vec<Problem>> {
    let mut problems = Vec::new();
    let converted = convert_settings(settings, &mut problems);
    problems.extend(validate_node_settings(&converted));
    if problems.is_empty() {
        Ok(converted)
    } else {
        Err(problems)
    }
}

fn convert_settings(
    settings: &NodeSettings,
    problems: &mut Vec<Problem>,
) -> node_model::NodeSettings {
    node_model::NodeSettings {
        memory_qos: to_memory_qos(&settings.memory_qos, "spec.memoryQoS", problems),
        memory_manager: to_memory_manager(&settings.memory_manager, "spec.memoryManager", problems),
        node_reserved: settings
            .node_reserved
            .as_ref()
            .map(|r| to_node_reserved(r, "spec.nodeReserved", problems)),
        enforcement: match settings.enforcement {
            Enforcement::Agent => model::Enforcement::Agent,
            Enforcement::Kubelet => model::Enforcement::Kubelet,
            Enforcement::Observe => model::Enforcement::Observe,
        },
        relief: settings.memory_qos.relief.as_ref().map(|r| {
            let seconds = |v: i32| u64::try_from(v).unwrap_or(0);
            nodemem_model::feedback::relief::ReliefSettings {
                full_pressure_percent: u32::try_from(r.full_pressure_percent.clamp(1, 100))
                    .unwrap_or(20),
                sustained_seconds: seconds(r.sustained_seconds),
                relief_seconds: seconds(r.relief_seconds),
                repeat_window_seconds: seconds(r.repeat_window_seconds),
            }
        }),
        reclaim: settings.reclaim.as_ref().and_then(to_reclaim),
        classes: settings
            .classes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                to_class(
                    c,
                    &settings.memory_qos,
                    settings.reclaim.as_ref(),
                    &format!("spec.classes[{i}]"),
                    problems,
                )
            })
            .collect(),
    }
}

/// The model's class: what it leaves out follows the pool (`pool_qos`, `pool_reclaim`);
/// a field a class may not set is a problem at `path` (the CRD's rules refuse it
/// too: this is for a spec the apiserver did not check, as `simulate` reads).
fn to_class(
    spec: &crate::policy::WorkloadClassSpec,
    pool_qos: &MemoryQosSpec,
    pool_reclaim: Option<&crate::policy::ReclaimSpec>,
    path: &str,
    problems: &mut Vec<Problem>,
) -> nodemem_model::class::WorkloadClass {
    use crate::policy::{ClassProtection, ReclaimModeSpec};
    use nodemem_model::class::{ClassMemoryHigh, ClassReclaim, Protection, WorkloadClass};
    for (field, set, what) in [
        ("memoryManager", spec.memory_manager.is_some(), "the Memory Manager: NUMA pinning and reserved memory are the node's"),
        ("nodeReserved", spec.node_reserved.is_some(), "the node's reservations"),
        ("enforcement", spec.enforcement.is_some(), "the enforcement: the node's agent enforces every class"),
        ("reservationPolicy", spec.reservation_policy.is_some(), "the reservation policy, which the QoS-class cgroups follow: it chooses protection Pool or None"),
    ] {
        if set {
            problems.push(Problem::new(format!("{path}.{field}"), format!("a class cannot change {what}")));
        }
    }
    let mut factor = |value: f64| match ThrottlingFactor::from_f64(value) {
        Ok(f) => Some(f),
        Err(e) => {
            problems.push(Problem::new(
                format!("{path}.throttlingFactor"),
                e.to_string(),
            ));
            None
        }
    };
    let memory_high = match (spec.memory_high, spec.throttling_factor) {
        (Some(MemoryHighPolicy::None), Some(_)) => {
            problems.push(Problem::new(
                format!("{path}.throttlingFactor"),
                "throttlingFactor is not used with memoryHigh: None",
            ));
            ClassMemoryHigh::Unset
        }
        (Some(MemoryHighPolicy::None), None) => ClassMemoryHigh::Unset,
        (_, Some(value)) => factor(value).map_or(ClassMemoryHigh::Pool, ClassMemoryHigh::Factor),
        // Throttle on a pool that sets none: the pool's factor, which it keeps unused.
        (Some(MemoryHighPolicy::Throttle), None) => factor(pool_qos.throttling_factor)
            .map_or(ClassMemoryHigh::Pool, ClassMemoryHigh::Factor),
        (None, None) => ClassMemoryHigh::Pool,
    };
    let reclaim = match &spec.reclaim {
        None => ClassReclaim::Pool,
        Some(r) if r.mode == ReclaimModeSpec::Disabled => ClassReclaim::Disabled,
        Some(r) => {
            let mut base = pool_reclaim.cloned().unwrap_or_default();
            base.mode = r.mode;
            if let Some(stall) = r.target_stall_microseconds_per_second {
                base.target_stall_microseconds_per_second = stall;
            }
            if let Some(step) = r.max_step_permille {
                base.max_step_permille = step;
            }
            match to_reclaim(&base) {
                Some(own) => ClassReclaim::Own {
                    mode: own.mode,
                    settings: own.settings,
                },
                None => ClassReclaim::Disabled,
            }
        }
    };
    WorkloadClass {
        name: spec.name.clone(),
        memory_high,
        protection: match spec.protection {
            None | Some(ClassProtection::Pool) => Protection::Pool,
            Some(ClassProtection::None) => Protection::Unprotected,
        },
        reclaim,
    }
}

/// The model's reclaim, None when off. The schema bounds every number; a value
/// outside them (a spec the schema did not check) is clamped, never wrapped.
fn to_reclaim(r: &crate::policy::ReclaimSpec) -> Option<nodemem_model::feedback::reclaim::Reclaim> {
    use crate::policy::{QosClassName, ReclaimModeSpec};
    use nodemem_model::feedback::reclaim::{Reclaim, ReclaimMode, ReclaimSettings};
    use nodemem_model::pod::qos::QosClass;
    let mode = match r.mode {
        ReclaimModeSpec::Disabled => return None,
        ReclaimModeSpec::Observe => ReclaimMode::Observe,
        ReclaimModeSpec::Active => ReclaimMode::Active,
    };
    let positive = |v: i32, min: i32| u64::try_from(v.max(min)).unwrap_or(1);
    let mut classes: Vec<QosClass> = r
        .qos_classes
        .iter()
        .map(|c| match c {
            QosClassName::Guaranteed => QosClass::Guaranteed,
            QosClassName::Burstable => QosClass::Burstable,
            QosClassName::BestEffort => QosClass::BestEffort,
        })
        .collect();
    classes.sort();
    classes.dedup();
    Some(Reclaim {
        mode,
        settings: ReclaimSettings {
            target_stall_us_per_s: positive(r.target_stall_microseconds_per_second, 1),
            max_step_permille: u32::try_from(r.max_step_permille.clamp(1, 100)).unwrap_or(10),
            interval_seconds: positive(r.interval_seconds, 2),
            max_refaults_per_s: positive(r.max_refaults_per_second, 0),
        },
        classes,
    })
}

/// The effective settings of a policy, or every problem found: the selector and the
/// rollout parameters too.
pub fn policy_settings(
    spec: &NodeMemoryPolicySpec,
) -> Result<node_model::NodeSettings, Vec<Problem>> {
    let mut problems = to_selector(&spec.node_selector).validate("spec.nodeSelector");
    let settings = convert_settings(&spec.settings, &mut problems);
    check_rollout(&spec.rollout, &mut problems);
    problems.extend(validate_node_settings(&settings));
    if problems.is_empty() {
        Ok(settings)
    } else {
        Err(problems)
    }
}
