//! The cgroups proactive reclaim acts on (issue 46): apart from the step controller
//! (`crate::feedback::reclaim`), which the policy's settings name, because choosing them reads
//! the computed node (`crate::node`), which reads the policy.

use crate::feedback::reclaim::{Reclaim, ReclaimMode};
use crate::node::DesiredNode;
use crate::pod::qos::QosClass;
use crate::settings::NodeSettings;

/// A cgroup reclaim acts on: a container of a pod nodemem manages, of a QoS class the
/// policy names, with its floor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target<'n> {
    /// The pod's namespace.
    pub namespace: &'n str,
    /// The pod's name.
    pub pod: &'n str,
    /// The container's name.
    pub container: &'n str,
    /// Its cgroup (relative to the cgroup root).
    pub path: &'n str,
    /// Its pod's QoS class.
    pub qos: QosClass,
    /// Its memory request (0 without one): never asked for below it.
    pub floor: i64,
}

/// The containers of `desired` reclaim acts on: those with a cgroup, in pods nodemem
/// manages (an opted-out pod is left alone), of the QoS classes in `classes` (the
/// policy's default is Burstable and BestEffort: a Guaranteed container only when
/// named, and never below its request either).
pub fn targets<'n>(desired: &'n DesiredNode<'_>, classes: &[QosClass]) -> Vec<Target<'n>> {
    desired
        .managed_containers()
        .filter(|(pod, _, _)| classes.contains(&pod.qos))
        .map(|(pod, c, path)| Target {
            namespace: pod.namespace,
            pod: pod.name,
            container: c.name,
            path,
            qos: pod.qos,
            floor: c.memory.request.max(0),
        })
        .collect()
}

/// The containers of `desired` reclaim acts on under `settings`, each with the reclaim
/// its workload class gives it (the pool's for a pod in no class): a class may turn it
/// off, observe, or take actively at its own pace, on the QoS classes the pool's
/// reclaim names (Burstable and BestEffort without one).
pub fn class_targets<'n>(
    desired: &'n DesiredNode<'_>,
    settings: &NodeSettings,
) -> Vec<(Target<'n>, Reclaim)> {
    desired
        .managed_containers()
        .filter_map(|(pod, c, path)| {
            let reclaim = match pod.class.and_then(|name| settings.class(name)) {
                Some(class) => class.reclaim(settings.reclaim.as_ref())?,
                None => settings.reclaim.clone()?,
            };
            reclaim.classes.contains(&pod.qos).then(|| {
                let target = Target {
                    namespace: pod.namespace,
                    pod: pod.name,
                    container: c.name,
                    path,
                    qos: pod.qos,
                    floor: c.memory.request.max(0),
                };
                (target, reclaim)
            })
        })
        .collect()
}

/// The node's reclaim as its status names it: on when the pool's or any class's is;
/// Active when any is; the pace the pool's (or its first class's with one).
pub fn headline(settings: &NodeSettings) -> Option<Reclaim> {
    let mut all = settings.reclaim.iter().cloned().chain(
        settings
            .classes
            .iter()
            .filter_map(|c| c.reclaim(settings.reclaim.as_ref())),
    );
    let mut first = all.next()?;
    if all.any(|r| r.mode == ReclaimMode::Active) {
        first.mode = ReclaimMode::Active;
    }
    Some(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: i64 = 1 << 20;

    #[test]
    fn targets_are_the_managed_containers_of_the_named_classes_with_their_requests() {
        use crate::node::{desired_node, NodeFacts, NodeInput, NodePod};
        use crate::pod::{Container, ContainerKind, Pod, PodSpec, Resources, CPU, MEMORY};
        use crate::quantity::Quantity;
        use crate::settings::NodeSettings;
        use crate::values::cgroup_layout::{ContainerId, ContainerRuntime};
        let pod = |uid: &str, resources: &[(&str, &str)], limits: bool, opted_out: bool| {
            let list: crate::pod::ResourceList = resources
                .iter()
                .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap()))
                .collect();
            let container = Container {
                name: "c".into(),
                kind: ContainerKind::App,
                resources: Resources {
                    requests: list.clone(),
                    limits: if limits { list } else { Default::default() },
                },
            };
            let id = ContainerId {
                runtime: ContainerRuntime::Containerd,
                id: format!("{uid}c"),
            };
            NodePod::new(
                Pod {
                    namespace: "ns".into(),
                    name: uid.into(),
                    uid: uid.into(),
                    spec: PodSpec {
                        containers: vec![container],
                        ..PodSpec::default()
                    },
                },
                [("c".to_string(), id)].into(),
                crate::class::ClassChoice::from_opt_out(opted_out),
            )
        };
        let pods = [
            pod("g", &[(MEMORY, "128Mi"), (CPU, "1")], true, false),
            pod("b", &[(MEMORY, "64Mi")], false, false),
            pod("e", &[], false, false),
            pod("o", &[(MEMORY, "32Mi")], false, true),
        ];
        let facts = NodeFacts::default();
        let desired = desired_node(NodeInput {
            settings: &NodeSettings::default(),
            facts: &facts,
            pods: &pods,
            memory_manager: None,
        })
        .unwrap();
        let floors = |classes: &[QosClass]| -> Vec<(QosClass, i64)> {
            targets(&desired, classes)
                .into_iter()
                .map(|t| (t.qos, t.floor))
                .collect()
        };
        // The default: Burstable and BestEffort; the opted-out pod never.
        assert_eq!(
            floors(&[QosClass::Burstable, QosClass::BestEffort]),
            [(QosClass::Burstable, 64 * MI), (QosClass::BestEffort, 0)]
        );
        assert_eq!(
            floors(&[
                QosClass::Guaranteed,
                QosClass::Burstable,
                QosClass::BestEffort
            ]),
            [
                (QosClass::Guaranteed, 128 * MI),
                (QosClass::Burstable, 64 * MI),
                (QosClass::BestEffort, 0)
            ]
        );
        assert!(targets(&desired, &[QosClass::Burstable])
            .iter()
            .all(|t| t.path.contains("podb")));
    }
}
