//! The values a container is created with when its runtime asks first (NRI's
//! CreateContainer, before the container's first instruction): the node computation's
//! own values for that container, looked up by pod UID and container name. The table
//! is rebuilt from every [`DesiredNode`], so a container created later gets what the
//! agent would have written once its cgroup appeared.

use std::collections::{BTreeMap, HashMap};

use crate::node::{DesiredNode, PodOutcome};
use crate::values::cgroup::{CPUSET_MEMS, MEMORY_HIGH, MEMORY_LOW, MEMORY_MIN};
use crate::values::cgroup_layout::CgroupDriver;

/// The memory files a container's spec carries as `linux.resources.unified` (runc
/// writes them at creation and, on the systemd driver, records them as the scope's
/// properties).
pub const UNIFIED_FILES: [&str; 3] = [MEMORY_MIN, MEMORY_LOW, MEMORY_HIGH];

/// What one container is created with. Empty: nothing of nodemem's (an opted-out or
/// refused pod, or files the kubelet enforces itself).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerCreation {
    /// memory.min, memory.low, memory.high as the kernel reads them.
    pub unified: BTreeMap<&'static str, String>,
    /// cpuset.mems of a container pinned by the Static Memory Manager.
    pub mems: Option<String>,
}

impl ContainerCreation {
    /// Whether it sets nothing.
    pub fn is_empty(&self) -> bool {
        self.unified.is_empty() && self.mems.is_none()
    }

    /// The files this sets, for the record of what nodemem owns.
    pub fn files(&self) -> Vec<&'static str> {
        let mut files: Vec<&'static str> = self.unified.keys().copied().collect();
        if self.mems.is_some() {
            files.push(CPUSET_MEMS);
        }
        files
    }
}

/// One pod: its cgroup (written when its sandbox runs) and its containers by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodCreation {
    /// The pod's cgroup (relative to the cgroup root).
    pub path: String,
    /// Its containers' values, by name.
    pub containers: BTreeMap<String, ContainerCreation>,
}

/// Every pod the node computation knows, by UID.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreationTable {
    /// How the kubelet names cgroups.
    pub cgroup_driver: CgroupDriver,
    pods: HashMap<String, PodCreation>,
}

impl CreationTable {
    /// The values of `desired`, without the files in `leave_alone` (the kubelet's own).
    pub fn of(desired: &DesiredNode<'_>, leave_alone: &[&str]) -> Self {
        let pods = desired
            .pods
            .iter()
            .map(|pod| (pod.uid.to_string(), pod_creation(pod, leave_alone)))
            .collect();
        CreationTable {
            cgroup_driver: desired.cgroup_driver,
            pods,
        }
    }

    /// The pod of UID `uid`, when known.
    pub fn pod(&self, uid: &str) -> Option<&PodCreation> {
        self.pods.get(uid)
    }

    /// None: the pod is not known (yet); an empty value: known, nothing to set.
    pub fn container(&self, pod_uid: &str, name: &str) -> Option<ContainerCreation> {
        let pod = self.pods.get(pod_uid)?;
        Some(pod.containers.get(name).cloned().unwrap_or_default())
    }
}

fn pod_creation(pod: &PodOutcome<'_>, leave_alone: &[&str]) -> PodCreation {
    let containers = pod
        .containers
        .iter()
        .map(|c| {
            let unified = UNIFIED_FILES
                .iter()
                .filter(|f| !leave_alone.contains(f))
                .filter_map(|f| c.values.get(f).map(|v| (*f, v.render())))
                .collect();
            let mems = c
                .values
                .get(CPUSET_MEMS)
                .filter(|_| !leave_alone.contains(&CPUSET_MEMS))
                .map(|v| v.render());
            (c.name.to_string(), ContainerCreation { unified, mems })
        })
        .collect();
    PodCreation {
        path: pod.path.clone(),
        containers,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::node::{desired_node, NodeFacts, NodeInput, NodePod};
    use crate::pod::{Container, ContainerKind, Pod, PodSpec, Resources};
    use crate::quantity::Quantity;
    use crate::settings::NodeSettings;
    use crate::values::factor::ThrottlingFactor;
    use crate::values::memory_qos::NodeMemoryFacts;
    use crate::values::memory_qos::{MemoryQosSettings, ReservationPolicy};

    fn pod(uid: &str, request: &str, limit: &str, opt_out: bool) -> NodePod {
        let mut r = Resources::default();
        r.requests
            .insert("memory".into(), Quantity::parse(request).unwrap());
        r.limits
            .insert("memory".into(), Quantity::parse(limit).unwrap());
        let spec = PodSpec {
            containers: vec![Container {
                name: "app".into(),
                kind: ContainerKind::App,
                resources: r,
            }],
            ..PodSpec::default()
        };
        let pod = Pod {
            namespace: "shop".into(),
            name: uid.into(),
            uid: uid.into(),
            spec,
        };
        // Not started: the runtime asks before the kubelet reports an ID.
        NodePod::new(
            pod,
            BTreeMap::new(),
            crate::class::ClassChoice::from_opt_out(opt_out),
        )
    }

    fn settings() -> NodeSettings {
        NodeSettings {
            memory_qos: MemoryQosSettings {
                enabled: true,
                throttling_factor: Some(ThrottlingFactor::DEFAULT),
                reservation_policy: ReservationPolicy::TieredReservation,
            },
            ..NodeSettings::default()
        }
    }

    fn facts() -> NodeFacts {
        NodeFacts {
            memory: NodeMemoryFacts {
                allocatable_memory: Some(8 << 30),
                capacity_memory: Some(8 << 30),
                page_size: 4096,
                kernel_version: Some("6.1.0".into()),
                ..NodeMemoryFacts::default()
            },
            ..NodeFacts::default()
        }
    }

    #[test]
    fn a_container_not_started_yet_gets_the_node_computations_values() {
        let pods = [
            pod("u1", "64Mi", "256Mi", false),
            pod("u2", "64Mi", "256Mi", true),
        ];
        let s = settings();
        let f = facts();
        let desired = desired_node(NodeInput {
            settings: &s,
            facts: &f,
            pods: &pods,
            memory_manager: None,
        })
        .unwrap();
        let table = CreationTable::of(&desired, &[]);
        let outcome = &desired
            .pods
            .iter()
            .find(|p| p.uid == "u1")
            .unwrap()
            .containers[0];
        let created = table.container("u1", "app").unwrap();
        // Every memory file the computation gives the container, as the kernel reads it.
        let expected: BTreeMap<&str, String> = UNIFIED_FILES
            .iter()
            .filter_map(|f| outcome.values.get(f).map(|v| (*f, v.render())))
            .collect();
        assert!(expected.contains_key(MEMORY_HIGH), "{expected:?}");
        assert_eq!(created.unified, expected);
        assert_eq!(created.mems, None);
        assert_eq!(created.files().len(), expected.len());
        assert_eq!(table.pod("u1").unwrap().path, desired.pods[0].path);
        // Opted out: known, nothing to set.
        assert!(table.container("u2", "app").unwrap().is_empty());
        // A container the spec does not name: known pod, nothing; an unknown pod: None.
        assert!(table.container("u1", "other").unwrap().is_empty());
        assert_eq!(table.container("u3", "app"), None);
        // Files the kubelet enforces itself are not set at creation either.
        let kubelets = CreationTable::of(&desired, &[MEMORY_MIN, MEMORY_HIGH]);
        let created = kubelets.container("u1", "app").unwrap();
        assert!(!created.unified.contains_key(MEMORY_MIN));
        assert!(!created.unified.contains_key(MEMORY_HIGH));
    }
}
