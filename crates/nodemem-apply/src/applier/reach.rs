//! What a pass covers: the whole node, the cgroups that just appeared, or the pods an
//! event changed (with the node-level cgroups their requests are summed into).

use nodemem_model::node::DesiredNode;

/// What a pass covers: the whole node, the cgroups that just appeared, or the pods an
/// event changed (with the node-level cgroups their requests are summed into).
#[derive(Clone, Copy, Debug)]
pub enum Reach<'a> {
    /// Every cgroup of the node (resyncs, config changes).
    Node,
    /// The cgroups that just appeared (inotify), by path.
    Cgroups(&'a std::collections::BTreeSet<String>),
    /// The pods an event changed, by UID.
    Pods(&'a std::collections::BTreeSet<String>),
}

impl Reach<'_> {
    /// The cgroups a pass over `desired` covers; None: the whole node.
    pub(crate) fn cgroups(
        &self,
        desired: &DesiredNode<'_>,
    ) -> Option<std::borrow::Cow<'_, std::collections::BTreeSet<String>>> {
        match *self {
            Reach::Node => None,
            Reach::Cgroups(paths) => Some(std::borrow::Cow::Borrowed(paths)),
            Reach::Pods(uids) => Some(std::borrow::Cow::Owned(pods_reach(desired, uids))),
        }
    }
}

/// The cgroups of these pods and the node-level cgroups above them.
fn pods_reach(
    desired: &DesiredNode<'_>,
    uids: &std::collections::BTreeSet<String>,
) -> std::collections::BTreeSet<String> {
    use nodemem_model::pod::qos::QosClass;
    use nodemem_model::values::cgroup_layout::{kubepods, qos_dir};
    let d = desired.cgroup_driver;
    let mut paths: std::collections::BTreeSet<String> = [
        kubepods(d),
        qos_dir(d, QosClass::Burstable),
        qos_dir(d, QosClass::BestEffort),
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    for p in desired.pods.iter().filter(|p| uids.contains(p.uid)) {
        paths.insert(p.path.clone());
        paths.extend(p.containers.iter().filter_map(|c| c.path.clone()));
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemem_model::node::{desired_node, NodeFacts, NodeInput, NodePod};
    use nodemem_model::settings::NodeSettings;

    #[test]
    fn a_pod_event_reaches_that_pod_and_the_node_level_cgroups() {
        use nodemem_model::pod::{Container, ContainerKind, Pod, PodSpec};
        use nodemem_model::values::cgroup_layout::{ContainerId, ContainerRuntime};
        let pod = |uid: &str| {
            NodePod::new(
                Pod {
                    namespace: "ns".into(),
                    name: uid.into(),
                    uid: uid.into(),
                    spec: PodSpec {
                        containers: vec![Container {
                            name: "c".into(),
                            kind: ContainerKind::App,
                            resources: Default::default(),
                        }],
                        ..PodSpec::default()
                    },
                },
                [(
                    "c".to_string(),
                    ContainerId {
                        runtime: ContainerRuntime::Containerd,
                        id: format!("{uid}c"),
                    },
                )]
                .into(),
                nodemem_model::class::ClassChoice::Pool,
            )
        };
        let pods = vec![pod("a"), pod("b")];
        let facts = NodeFacts::default();
        let desired = desired_node(NodeInput {
            settings: &NodeSettings::default(),
            facts: &facts,
            pods: &pods,
            memory_manager: None,
        })
        .unwrap();
        let reach = pods_reach(&desired, &["b".to_string()].into());
        let want: std::collections::BTreeSet<String> = [
            "kubepods.slice",
            "kubepods.slice/kubepods-burstable.slice",
            "kubepods.slice/kubepods-besteffort.slice",
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podb.slice",
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podb.slice/cri-containerd-bc.scope",
        ]
        .into_iter()
        .map(str::to_string)
        .collect();
        assert_eq!(reach, want);
    }
}
