//! core/v1 Pods and Nodes into the model's types, with every bad quantity reported by
//! its field path. Shared by `nodemem simulate`, the agent and the test harness.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use nodemem_model::class::{ChoiceKeys, ClassChoice, CLASS_KEY};
use nodemem_model::node::status::NodeStatusFacts;
use nodemem_model::node::{NodePod, MEMORY_QOS_OPT_OUT_KEY, MEMORY_QOS_OPT_OUT_VALUE};
use nodemem_model::pod::defaulting::apply_defaults;
use nodemem_model::pod::validation::validate_pod_resources;
use nodemem_model::pod::{Container, ContainerKind, Pod, PodSpec, ResourceList, Resources};
use nodemem_model::values::cgroup_layout::ContainerId;
use nodemem_model::{Problem, Quantity};

fn resource_list(
    path: &str,
    list: Option<&BTreeMap<String, K8sQuantity>>,
    problems: &mut Vec<Problem>,
) -> ResourceList {
    let mut out = ResourceList::new();
    for (name, q) in list.into_iter().flatten() {
        match Quantity::parse(&q.0) {
            Ok(v) => {
                out.insert(name.clone(), v);
            }
            Err(e) => problems.push(Problem::new(format!("{path}.{name}"), e.to_string())),
        }
    }
    out
}

fn resources(
    path: &str,
    r: Option<&core::ResourceRequirements>,
    problems: &mut Vec<Problem>,
) -> Resources {
    Resources {
        requests: resource_list(
            &format!("{path}.requests"),
            r.and_then(|r| r.requests.as_ref()),
            problems,
        ),
        limits: resource_list(
            &format!("{path}.limits"),
            r.and_then(|r| r.limits.as_ref()),
            problems,
        ),
    }
}

fn container(
    path: &str,
    c: &core::Container,
    kind: ContainerKind,
    problems: &mut Vec<Problem>,
) -> Container {
    Container {
        name: c.name.clone(),
        kind,
        resources: resources(&format!("{path}.resources"), c.resources.as_ref(), problems),
    }
}

/// The model's view of a Pod, or the problems with its quantities.
pub fn pod_from_k8s(pod: &core::Pod) -> Result<Pod, Vec<Problem>> {
    let mut problems = Vec::new();
    let spec = pod.spec.as_ref();
    let containers = spec
        .map(|s| &s.containers[..])
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            container(
                &format!("spec.containers[{i}]"),
                c,
                ContainerKind::App,
                &mut problems,
            )
        })
        .collect();
    let init_containers = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            // KEP-753: an init container with restartPolicy Always is a sidecar.
            let kind = if c.restart_policy.as_deref() == Some("Always") {
                ContainerKind::Sidecar
            } else {
                ContainerKind::Init
            };
            container(&format!("spec.initContainers[{i}]"), c, kind, &mut problems)
        })
        .collect();
    let pod_resources = spec
        .and_then(|s| s.resources.as_ref())
        .map(|r| resources("spec.resources", Some(r), &mut problems));
    let overhead = resource_list(
        "spec.overhead",
        spec.and_then(|s| s.overhead.as_ref()),
        &mut problems,
    );
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Pod {
        namespace: pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string()),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        spec: PodSpec {
            init_containers,
            containers,
            resources: pod_resources,
            overhead,
        },
    })
}

/// True when `labels_or_annotations` carries `nodemem.io/memory-qos: disabled`.
pub fn opts_out(labels_or_annotations: Option<&BTreeMap<String, String>>) -> bool {
    labels_or_annotations
        .and_then(|m| m.get(MEMORY_QOS_OPT_OUT_KEY))
        .is_some_and(|v| v == MEMORY_QOS_OPT_OUT_VALUE)
}

/// What a namespace's labels choose for its pods: the opt-out
/// (`nodemem.io/memory-qos: disabled`), a class (`nodemem.io/class`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceChoice {
    /// It opts its pods out.
    pub opted_out: bool,
    /// The class it names for its pods.
    pub class: Option<String>,
}

impl NamespaceChoice {
    /// From a namespace's labels.
    pub fn of(labels: Option<&BTreeMap<String, String>>) -> Self {
        NamespaceChoice {
            opted_out: opts_out(labels),
            class: labels.and_then(|l| l.get(CLASS_KEY)).cloned(),
        }
    }

    /// Whether it chooses anything.
    pub fn is_empty(&self) -> bool {
        *self == NamespaceChoice::default()
    }
}

/// The class a pod runs in, or its opt-out: its own annotations first, then its
/// namespace's labels (`nodemem_model::class::ClassChoice::of`).
pub fn class_choice(pod: &core::Pod, namespace: &NamespaceChoice) -> ClassChoice {
    let annotations = pod.metadata.annotations.as_ref();
    ClassChoice::of(
        ChoiceKeys {
            opted_out: opts_out(annotations),
            class: annotations
                .and_then(|a| a.get(CLASS_KEY))
                .map(String::as_str),
        },
        ChoiceKeys {
            opted_out: namespace.opted_out,
            class: namespace.class.as_deref(),
        },
    )
}

/// Container name -> runtime ID from `status.initContainerStatuses` and
/// `status.containerStatuses`; containers without an ID (not started) or with an
/// unknown runtime are left out.
pub fn container_ids(pod: &core::Pod) -> BTreeMap<String, ContainerId> {
    let Some(status) = pod.status.as_ref() else {
        return BTreeMap::new();
    };
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .filter_map(|s| {
            let id = ContainerId::parse(s.container_id.as_deref()?)?;
            Some((s.name.clone(), id))
        })
        .collect()
}

/// A pod as the node computation takes it: converted, defaulted as the apiserver does,
/// validated, with its container IDs and its choice of class or opt-out (`namespace`:
/// what its namespace's labels choose).
pub fn node_pod_from_k8s(
    pod: &core::Pod,
    namespace: &NamespaceChoice,
) -> Result<NodePod, Vec<Problem>> {
    let mut model = pod_from_k8s(pod)?;
    apply_defaults(&mut model.spec);
    let invalid = validate_pod_resources(&model.spec);
    if !invalid.is_empty() {
        return Err(invalid);
    }
    Ok(NodePod::new(
        model,
        container_ids(pod),
        class_choice(pod, namespace),
    ))
}

/// Node allocatable memory in bytes, if reported.
pub fn node_allocatable_memory(node: &core::Node) -> Result<Option<i64>, Problem> {
    status_memory(node, "allocatable", |s| s.allocatable.as_ref())
}

/// Node memory capacity in bytes, if reported.
pub fn node_capacity_memory(node: &core::Node) -> Result<Option<i64>, Problem> {
    status_memory(node, "capacity", |s| s.capacity.as_ref())
}

fn status_memory(
    node: &core::Node,
    field: &str,
    list: impl Fn(&core::NodeStatus) -> Option<&BTreeMap<String, K8sQuantity>>,
) -> Result<Option<i64>, Problem> {
    let Some(q) = node
        .status
        .as_ref()
        .and_then(list)
        .and_then(|a| a.get("memory"))
    else {
        return Ok(None);
    };
    Quantity::parse(&q.0)
        .map(|v| Some(v.value()))
        .map_err(|e| Problem::new(format!("status.{field}.memory"), e.to_string()))
}

/// What the rules read of a Node's status (`NodeStatusFacts`); a figure that is not a
/// quantity counts as not reported.
pub fn node_status_facts(node: &core::Node) -> NodeStatusFacts {
    // A field of `status.nodeInfo`, when reported (an empty text is not).
    let info = |field: fn(&core::NodeSystemInfo) -> &String| {
        node.status
            .as_ref()
            .and_then(|s| s.node_info.as_ref())
            .map(field)
            .filter(|v| !v.is_empty())
            .cloned()
    };
    NodeStatusFacts {
        allocatable_memory: node_allocatable_memory(node).ok().flatten(),
        capacity_memory: node_capacity_memory(node).ok().flatten(),
        kubelet_version: info(|i| &i.kubelet_version),
        architecture: info(|i| &i.architecture),
    }
}

/// The kernel version the Node's kubelet reports, if any.
pub fn node_kernel_version(node: &core::Node) -> Option<String> {
    node.status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.kernel_version.clone())
        .filter(|k| !k.is_empty())
}

/// The Node's labels (none: empty).
pub fn node_labels(node: &core::Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}
