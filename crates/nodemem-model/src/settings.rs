//! The settings a node runs, in one place: what a policy asks of the nodes it selects
//! and its config carries to each (the API's `NodeSettings`, converted), and their
//! validation across fields. Above the parts it gathers (`values`, `cluster`,
//! `feedback`), below the node that computes from it (`node`).

use crate::class::{check_class_name, ClassReclaim, WorkloadClass, MAX_CLASSES};
use crate::cluster::policy::{
    check_sum_rule, validate_memory_manager, validate_node_reserved, Enforcement,
    MemoryManagerPolicy, MemoryManagerSettings, NodeReserved,
};
use crate::problem::Problem;
use crate::values::memory_qos::MemoryQosSettings;

/// Everything a policy asks of the nodes it selects, as the API's `NodeSettings` says it
/// (converted by `nodemem_api::convert`): what a node runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeSettings {
    /// Memory QoS: the throttling factor, the reservation policy.
    pub memory_qos: MemoryQosSettings,
    /// The Memory Manager: None or Static, reservedMemory.
    pub memory_manager: MemoryManagerSettings,
    /// The node's reservations, for the Memory Manager's sum rule.
    pub node_reserved: Option<NodeReserved>,
    /// Who carries the settings out: the agent, the kubelet, or nobody (Observe).
    pub enforcement: Enforcement,
    /// Relief for containers memory.high chokes (`enforcement: Agent` only).
    pub relief: Option<crate::feedback::relief::ReliefSettings>,
    /// Proactive reclaim of cold memory (None: off; `Active` under `enforcement: Agent`
    /// only).
    pub reclaim: Option<crate::feedback::reclaim::Reclaim>,
    /// The workload classes pods may choose (`nodemem.io/class`), by name.
    pub classes: Vec<WorkloadClass>,
}

impl NodeSettings {
    /// The class named `name`, if the settings have it.
    pub fn class(&self, name: &str) -> Option<&WorkloadClass> {
        self.classes.iter().find(|c| c.name == name)
    }

    /// The classes' names, in the policy's order (for a warning naming them).
    pub fn class_names(&self) -> Vec<&str> {
        self.classes.iter().map(|c| c.name.as_str()).collect()
    }
}

/// Every semantic problem with the settings, with paths under `spec`.
pub fn validate_node_settings(settings: &NodeSettings) -> Vec<Problem> {
    // Whether the kubelet can express the reservation policy depends on its version
    // (HardReservation only before v1.36, never from v1.36): refused per node when the
    // drop-in is rendered (`kubelet_dropin::render`), not for the whole policy.
    let mut problems = Vec::new();
    if settings.relief.is_some() && settings.enforcement != Enforcement::Agent {
        problems.push(Problem::new(
            "spec.memoryQoS.relief",
            "relief raises memory.high that the agent set: it needs enforcement: Agent",
        ));
    }
    if settings
        .reclaim
        .as_ref()
        .is_some_and(|r| r.mode == crate::feedback::reclaim::ReclaimMode::Active)
        && settings.enforcement != Enforcement::Agent
    {
        problems.push(Problem::new(
            "spec.reclaim.mode",
            "reclaim mode Active writes memory.reclaim, which only the agent's enforcement does: it needs enforcement: Agent (mode Observe reports what it would reclaim under any enforcement)",
        ));
    }
    validate_classes(settings, &mut problems);
    validate_memory_manager(&settings.memory_manager, &mut problems);
    if let Some(reserved) = &settings.node_reserved {
        validate_node_reserved(reserved, &mut problems);
        if settings.memory_manager.policy == MemoryManagerPolicy::Static {
            check_sum_rule(&settings.memory_manager, reserved, &mut problems);
        }
    }
    problems
}

/// What the classes may not be: more than [`MAX_CLASSES`], two of one name, a name that
/// is no DNS label; any under `enforcement: Kubelet` (the kubelet has one factor for
/// every pod); Active reclaim without the agent's enforcement.
fn validate_classes(settings: &NodeSettings, problems: &mut Vec<Problem>) {
    if settings.classes.is_empty() {
        return;
    }
    if settings.classes.len() > MAX_CLASSES {
        problems.push(Problem::new(
            "spec.classes",
            format!(
                "at most {MAX_CLASSES} classes ({} given): each is a metrics label value",
                settings.classes.len()
            ),
        ));
    }
    if settings.enforcement == Enforcement::Kubelet {
        problems.push(Problem::new(
            "spec.classes",
            "classes need enforcement: Agent or Observe: under Kubelet the kubelet sets one throttling factor and one reservation policy for every pod",
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, class) in settings.classes.iter().enumerate() {
        let path = format!("spec.classes[{i}]");
        if let Err(why) = check_class_name(&class.name) {
            problems.push(Problem::new(format!("{path}.name"), why));
        }
        if !seen.insert(class.name.as_str()) {
            problems.push(Problem::new(
                format!("{path}.name"),
                format!("class {:?} is named twice", class.name),
            ));
        }
        let active = matches!(
            class.reclaim,
            ClassReclaim::Own {
                mode: crate::feedback::reclaim::ReclaimMode::Active,
                ..
            }
        );
        if active && settings.enforcement != Enforcement::Agent {
            problems.push(Problem::new(
                format!("{path}.reclaim.mode"),
                "reclaim mode Active writes memory.reclaim, which only the agent's enforcement does: it needs enforcement: Agent",
            ));
        }
    }
}
