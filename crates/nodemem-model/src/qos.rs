//! Pod QoS class, as `ComputePodQOS` in `pkg/apis/core/v1/helper/qos` computes it,
//! including KEP-2837 pod-level resources.
//!
//! Only CPU and memory decide the class; zero quantities count as unset. With pod-level
//! resources present they alone decide; otherwise every container (app, init and
//! sidecar) is summed and every container must set both CPU and memory limits for the
//! pod to be Guaranteed.

use std::collections::BTreeMap;

use crate::pod::{is_pod_level_resource, PodSpec, Resources, CPU, MEMORY};
use crate::quantity::Quantity;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

/// True when `spec.resources` names CPU or memory (`IsPodLevelResourcesSet`).
pub fn has_pod_level_resources(spec: &PodSpec) -> bool {
    spec.resources.as_ref().is_some_and(|r| {
        r.requests
            .keys()
            .chain(r.limits.keys())
            .any(|n| is_pod_level_resource(n))
    })
}

/// The pod's QoS class. Expects apiserver defaulting to have been applied.
pub fn qos_class(spec: &PodSpec) -> QosClass {
    let mut requests: BTreeMap<&str, Quantity> = BTreeMap::new();
    let mut limits: BTreeMap<&str, Quantity> = BTreeMap::new();
    let mut guaranteed = true;

    let collect = |resources: &Resources,
                   requests: &mut BTreeMap<&str, Quantity>,
                   limits: &mut BTreeMap<&str, Quantity>|
     -> bool {
        for name in [CPU, MEMORY] {
            let q = resources.request(name);
            if q > 0 {
                let e = requests.entry(name).or_default();
                *e = e.saturating_add(q);
            }
        }
        let mut found = 0;
        for name in [CPU, MEMORY] {
            let q = resources.limit(name);
            if q > 0 {
                let e = limits.entry(name).or_default();
                *e = e.saturating_add(q);
                found += 1;
            }
        }
        found == 2
    };

    if has_pod_level_resources(spec) {
        let pod = spec
            .resources
            .as_ref()
            .expect("checked by has_pod_level_resources");
        guaranteed &= collect(pod, &mut requests, &mut limits);
    } else {
        for container in spec.all_containers() {
            guaranteed &= collect(&container.resources, &mut requests, &mut limits);
        }
    }

    if requests.is_empty() && limits.is_empty() {
        return QosClass::BestEffort;
    }
    if guaranteed {
        guaranteed = requests
            .iter()
            .all(|(name, req)| limits.get(name) == Some(req));
    }
    if guaranteed && requests.len() == limits.len() {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}
