//! The slice of a Pod that memory rules read: container and pod-level requests and
//! limits, init and sidecar containers, and RuntimeClass overhead.
//!
//! Adapters (the CLI, the agent) convert `core/v1` Pods into these types; the rules
//! never see Kubernetes client types.

pub mod aggregate;
pub mod defaulting;
pub mod profile;
pub mod qos;
pub mod validation;

use std::collections::BTreeMap;

use crate::quantity::Quantity;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const HUGEPAGES_PREFIX: &str = "hugepages-";

/// Resource name -> quantity, as in `core/v1.ResourceList`.
pub type ResourceList = BTreeMap<String, Quantity>;

/// Requests and limits of a container or of the whole pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub requests: ResourceList,
    pub limits: ResourceList,
}

impl Resources {
    pub fn request(&self, name: &str) -> Quantity {
        self.requests.get(name).copied().unwrap_or_default()
    }

    pub fn limit(&self, name: &str) -> Quantity {
        self.limits.get(name).copied().unwrap_or_default()
    }
}

/// Where a container runs in the pod lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ContainerKind {
    /// `spec.initContainers[]` without `restartPolicy: Always`: runs to completion
    /// before the app containers, one at a time.
    Init,
    /// `spec.initContainers[]` with `restartPolicy: Always` (KEP-753): runs alongside
    /// the app containers.
    Sidecar,
    /// `spec.containers[]`.
    App,
}

impl ContainerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerKind::Init => "init",
            ContainerKind::Sidecar => "sidecar",
            ContainerKind::App => "app",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Container {
    pub name: String,
    pub kind: ContainerKind,
    pub resources: Resources,
}

/// What the memory rules need from a pod's spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSpec {
    /// Init containers (including sidecars) in spec order.
    pub init_containers: Vec<Container>,
    pub containers: Vec<Container>,
    /// `spec.resources` (KEP-2837 pod-level resources), if present.
    pub resources: Option<Resources>,
    /// `spec.overhead` (RuntimeClass pod overhead).
    pub overhead: ResourceList,
}

impl PodSpec {
    /// App containers first, then init containers, the order the kubelet's QoS
    /// computation walks them in.
    pub fn all_containers(&self) -> impl Iterator<Item = &Container> {
        self.containers.iter().chain(self.init_containers.iter())
    }
}

/// A pod as the rules see it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub spec: PodSpec,
}

/// Resources that pod-level `spec.resources` may set (KEP-2837) and that decide the
/// QoS class.
pub fn is_pod_level_resource(name: &str) -> bool {
    name == CPU || name == MEMORY
}

pub fn is_hugepages(name: &str) -> bool {
    name.starts_with(HUGEPAGES_PREFIX)
}

/// True for `hugepages-<size>` where size is a positive binary quantity (`2Mi`, `1Gi`).
pub fn is_valid_hugepages_name(name: &str) -> bool {
    name.strip_prefix("hugepages-")
        .and_then(|size| Quantity::parse(size).ok())
        .is_some_and(|q| q.value() > 0)
}

/// Init and sidecar containers in spec order, then app containers: the order in which
/// the memory rules list a pod's containers (`memory_qos::PodValues::containers`).
pub fn ordered_containers(spec: &PodSpec) -> impl Iterator<Item = &Container> {
    spec.init_containers.iter().chain(spec.containers.iter())
}
