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

/// The CPU resource's name.
pub const CPU: &str = "cpu";
/// The memory resource's name.
pub const MEMORY: &str = "memory";
/// What hugepages resources' names start with (`hugepages-2Mi`).
pub const HUGEPAGES_PREFIX: &str = "hugepages-";

/// Resource name -> quantity, as in `core/v1.ResourceList`.
pub type ResourceList = BTreeMap<String, Quantity>;

/// Requests and limits of a container or of the whole pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// `resources.requests`.
    pub requests: ResourceList,
    /// `resources.limits`.
    pub limits: ResourceList,
}

impl Resources {
    /// The request for `name`, zero when none.
    pub fn request(&self, name: &str) -> Quantity {
        self.requests.get(name).copied().unwrap_or_default()
    }

    /// The limit for `name`, zero when none.
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
    /// `init`, `sidecar` or `app`, as metrics and status name the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerKind::Init => "init",
            ContainerKind::Sidecar => "sidecar",
            ContainerKind::App => "app",
        }
    }
}

/// A container of the spec, with what the memory rules read of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Container {
    /// Its name.
    pub name: String,
    /// Init, sidecar or app.
    pub kind: ContainerKind,
    /// Its requests and limits.
    pub resources: Resources,
}

/// What the memory rules need from a pod's spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSpec {
    /// Init containers (including sidecars) in spec order.
    pub init_containers: Vec<Container>,
    /// App containers, `spec.containers`.
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
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its UID, which names its cgroup.
    pub uid: String,
    /// What the rules read of its spec.
    pub spec: PodSpec,
}

/// Resources that pod-level `spec.resources` may set (KEP-2837) and that decide the
/// QoS class.
pub fn is_pod_level_resource(name: &str) -> bool {
    name == CPU || name == MEMORY
}

/// Whether `name` is a hugepages resource (`hugepages-<size>`).
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
