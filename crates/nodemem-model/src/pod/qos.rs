//! Pod QoS class, as `ComputePodQOS` in `pkg/apis/core/v1/helper/qos` computes it,
//! including KEP-2837 pod-level resources.
//!
//! Only CPU and memory decide the class; zero quantities count as unset. With pod-level
//! resources present they alone decide; otherwise every container (app, init and
//! sidecar) is summed and every container must set both CPU and memory limits for the
//! pod to be Guaranteed.

use crate::pod::{is_pod_level_resource, PodSpec, Resources, CPU, MEMORY};
use crate::quantity::Quantity;

/// A pod's QoS class, as the kubelet derives it (`GetPodQOS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QosClass {
    /// Every container has equal CPU and memory requests and limits.
    Guaranteed,
    /// Some request or limit, not Guaranteed.
    Burstable,
    /// No request or limit at all.
    BestEffort,
}

impl QosClass {
    /// The class's name, as the kubelet spells it.
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
    // Sums per resource, [cpu, memory]; None until a positive amount is seen (fixed
    // slots, not maps: this runs for every pod on every node event).
    type Sums = [Option<Quantity>; 2];
    let mut requests: Sums = [None, None];
    let mut limits: Sums = [None, None];
    let mut guaranteed = true;

    let add = |sums: &mut Sums, i: usize, q: Quantity| {
        sums[i] = Some(sums[i].unwrap_or_default().saturating_add(q));
    };
    let mut collect = |resources: &Resources| -> bool {
        let mut found = 0;
        for (i, name) in [CPU, MEMORY].into_iter().enumerate() {
            let q = resources.request(name);
            if q > 0 {
                add(&mut requests, i, q);
            }
            let q = resources.limit(name);
            if q > 0 {
                add(&mut limits, i, q);
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
        guaranteed &= collect(pod);
    } else {
        for container in spec.all_containers() {
            guaranteed &= collect(&container.resources);
        }
    }

    let count = |sums: &Sums| sums.iter().filter(|s| s.is_some()).count();
    if count(&requests) == 0 && count(&limits) == 0 {
        return QosClass::BestEffort;
    }
    if guaranteed {
        guaranteed = requests
            .iter()
            .zip(&limits)
            .all(|(req, lim)| req.is_none() || req == lim);
    }
    if guaranteed && count(&requests) == count(&limits) {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}
