//! Where the kubelet puts pod and container cgroups, relative to the cgroup v2 mount,
//! for both cgroup drivers (`pkg/kubelet/cm/cgroup_manager_linux.go`: the systemd
//! driver turns `kubepods/burstable/pod<uid>` into nested `.slice` units and escapes
//! `-` in the UID as `_`; containerd names container scopes `cri-containerd-<id>.scope`,
//! CRI-O `crio-<id>.scope`; with the cgroupfs driver containerd uses the bare ID and
//! CRI-O `crio-<id>`).
//! Pure path arithmetic: the agent and the test harness's fake kubelet share it. The
//! identifiers are joined as given; the agent's cgroup layer refuses any that would
//! leave the cgroup root.

use crate::pod::qos::QosClass;

/// How the kubelet names cgroups (its `cgroupDriver`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CgroupDriver {
    /// systemd's slices and scopes (`kubepods.slice`).
    #[default]
    Systemd,
    /// Plain directories (`kubepods`).
    Cgroupfs,
}

/// The container runtime, which names container cgroups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ContainerRuntime {
    /// containerd (`cri-containerd-<id>.scope`).
    #[default]
    Containerd,
    /// CRI-O (`crio-<id>.scope`).
    CriO,
}

/// A container as the kubelet reports it in `status.containerStatuses[].containerID`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContainerId {
    /// The runtime, from the ID's `<runtime>://` prefix.
    pub runtime: ContainerRuntime,
    /// The ID, without the prefix.
    pub id: String,
}

impl ContainerId {
    /// A containerd container (the runtime Kubernetes nodes run most).
    pub fn containerd(id: &str) -> Self {
        ContainerId {
            runtime: ContainerRuntime::Containerd,
            id: id.to_string(),
        }
    }

    /// `containerd://<id>` or `cri-o://<id>`; None for another scheme or no ID.
    pub fn parse(text: &str) -> Option<Self> {
        let (scheme, id) = text.split_once("://")?;
        let runtime = match scheme {
            "containerd" => ContainerRuntime::Containerd,
            "cri-o" => ContainerRuntime::CriO,
            _ => return None,
        };
        (!id.is_empty()).then(|| ContainerId {
            runtime,
            id: id.to_string(),
        })
    }
}

/// The node-level pods cgroup.
pub fn kubepods(driver: CgroupDriver) -> &'static str {
    match driver {
        CgroupDriver::Systemd => "kubepods.slice",
        CgroupDriver::Cgroupfs => "kubepods",
    }
}

/// The QoS-level cgroup; Guaranteed pods live directly under kubepods.
pub fn qos_dir(driver: CgroupDriver, qos: QosClass) -> &'static str {
    match (driver, qos) {
        (_, QosClass::Guaranteed) => kubepods(driver),
        (CgroupDriver::Systemd, QosClass::Burstable) => "kubepods.slice/kubepods-burstable.slice",
        (CgroupDriver::Systemd, QosClass::BestEffort) => "kubepods.slice/kubepods-besteffort.slice",
        (CgroupDriver::Cgroupfs, QosClass::Burstable) => "kubepods/burstable",
        (CgroupDriver::Cgroupfs, QosClass::BestEffort) => "kubepods/besteffort",
    }
}

const QOS_CLASSES: [QosClass; 3] = [
    QosClass::Guaranteed,
    QosClass::Burstable,
    QosClass::BestEffort,
];
const RUNTIMES: [ContainerRuntime; 2] = [ContainerRuntime::Containerd, ContainerRuntime::CriO];

/// What goes before and after the pod UID in a pod cgroup's name.
fn pod_affixes(driver: CgroupDriver, qos: QosClass) -> (&'static str, &'static str) {
    match (driver, qos) {
        (CgroupDriver::Systemd, QosClass::Guaranteed) => ("kubepods-pod", ".slice"),
        (CgroupDriver::Systemd, QosClass::Burstable) => ("kubepods-burstable-pod", ".slice"),
        (CgroupDriver::Systemd, QosClass::BestEffort) => ("kubepods-besteffort-pod", ".slice"),
        (CgroupDriver::Cgroupfs, _) => ("pod", ""),
    }
}

/// What goes before and after the container ID in a container cgroup's name.
fn container_affixes(
    driver: CgroupDriver,
    runtime: ContainerRuntime,
) -> (&'static str, &'static str) {
    match (driver, runtime) {
        (CgroupDriver::Systemd, ContainerRuntime::Containerd) => ("cri-containerd-", ".scope"),
        (CgroupDriver::Systemd, ContainerRuntime::CriO) => ("crio-", ".scope"),
        (CgroupDriver::Cgroupfs, ContainerRuntime::Containerd) => ("", ""),
        (CgroupDriver::Cgroupfs, ContainerRuntime::CriO) => ("crio-", ""),
    }
}

/// `name` without `prefix` and `suffix`, if it has both.
fn strip_affixes<'n>(name: &'n str, (prefix, suffix): (&str, &str)) -> Option<&'n str> {
    name.strip_prefix(prefix)?.strip_suffix(suffix)
}

/// The pod cgroup. Built in one allocation: it runs for every pod on every event.
pub fn pod_dir(driver: CgroupDriver, qos: QosClass, uid: &str) -> String {
    let parent = qos_dir(driver, qos);
    let (prefix, suffix) = pod_affixes(driver, qos);
    let mut path =
        String::with_capacity(parent.len() + 1 + prefix.len() + uid.len() + suffix.len());
    path.push_str(parent);
    path.push('/');
    path.push_str(prefix);
    match driver {
        // systemd unit names escape `-` (the slice hierarchy separator) as `_`.
        CgroupDriver::Systemd => path.extend(uid.chars().map(|c| if c == '-' { '_' } else { c })),
        CgroupDriver::Cgroupfs => path.push_str(uid),
    }
    path.push_str(suffix);
    path
}

/// A container cgroup.
pub fn container_dir(
    driver: CgroupDriver,
    qos: QosClass,
    uid: &str,
    container: &ContainerId,
) -> String {
    container_dir_under(&pod_dir(driver, qos, uid), driver, container)
}

/// A container cgroup under its pod's cgroup path (computed once per pod).
pub fn container_dir_under(pod: &str, driver: CgroupDriver, container: &ContainerId) -> String {
    let (prefix, suffix) = container_affixes(driver, container.runtime);
    let mut path =
        String::with_capacity(pod.len() + 1 + prefix.len() + container.id.len() + suffix.len());
    path.push_str(pod);
    path.push('/');
    path.push_str(prefix);
    path.push_str(&container.id);
    path.push_str(suffix);
    path
}

/// The pod and container a container cgroup belongs to (`path` relative to the cgroup
/// root), the inverse of [`container_dir`]: the agent sees a container's cgroup appear
/// before the kubelet reports the container's ID. None for any other directory (a QoS
/// or pod cgroup, CRI-O's conmon scope, a name no CRI runtime generates). The result
/// always builds `path` again.
pub fn container_of_path(driver: CgroupDriver, path: &str) -> Option<(String, ContainerId)> {
    let (pod, name) = path.rsplit_once('/')?;
    let pod_name = pod.rsplit('/').next()?;
    // The same affixes that build the names read them back; the full path is then
    // built again, so a pod name under another QoS class's parent is refused.
    let uid = QOS_CLASSES.into_iter().find_map(|qos| {
        let stem = strip_affixes(pod_name, pod_affixes(driver, qos))?;
        let uid = match driver {
            CgroupDriver::Systemd => stem.replace('_', "-"),
            CgroupDriver::Cgroupfs => stem.to_string(),
        };
        (pod_dir(driver, qos, &uid) == pod).then_some(uid)
    })?;
    // CRI runtimes name containers with hex IDs; anything else (conmon-<id>, a
    // directory someone made) is not a container's cgroup. With cgroupfs a containerd
    // name has no affixes, so `crio-<id>` only reads as CRI-O's.
    let container = RUNTIMES.into_iter().find_map(|runtime| {
        let id = strip_affixes(name, container_affixes(driver, runtime))?;
        (!id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric())).then(|| ContainerId {
            runtime,
            id: id.to_string(),
        })
    })?;
    Some((uid, container))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "6a4f2e3b-1c9d-4a5e-8f7b-2d3e4f5a6b7c";

    fn containerd(id: &str) -> ContainerId {
        ContainerId::containerd(id)
    }

    fn crio(id: &str) -> ContainerId {
        ContainerId {
            runtime: ContainerRuntime::CriO,
            id: id.to_string(),
        }
    }

    #[test]
    fn container_ids_name_their_runtime() {
        assert_eq!(
            ContainerId::parse("containerd://abc"),
            Some(containerd("abc"))
        );
        assert_eq!(ContainerId::parse("cri-o://abc"), Some(crio("abc")));
        assert_eq!(ContainerId::parse("docker://abc"), None);
        assert_eq!(ContainerId::parse("containerd://"), None);
        assert_eq!(ContainerId::parse(""), None);
    }

    #[test]
    fn crio_layout_matches_the_kubelet() {
        assert_eq!(
            container_dir(
                CgroupDriver::Systemd,
                QosClass::Guaranteed,
                UID,
                &crio("abc")
            ),
            "kubepods.slice/kubepods-pod6a4f2e3b_1c9d_4a5e_8f7b_2d3e4f5a6b7c.slice/crio-abc.scope"
        );
        assert_eq!(
            container_dir(
                CgroupDriver::Cgroupfs,
                QosClass::BestEffort,
                UID,
                &crio("abc")
            ),
            format!("kubepods/besteffort/pod{UID}/crio-abc")
        );
    }

    #[test]
    fn systemd_layout_matches_the_kubelet() {
        let d = CgroupDriver::Systemd;
        assert_eq!(
            qos_dir(d, QosClass::Burstable),
            "kubepods.slice/kubepods-burstable.slice"
        );
        assert_eq!(
            pod_dir(d, QosClass::Burstable, UID),
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6a4f2e3b_1c9d_4a5e_8f7b_2d3e4f5a6b7c.slice"
        );
        assert_eq!(
            pod_dir(d, QosClass::Guaranteed, UID),
            "kubepods.slice/kubepods-pod6a4f2e3b_1c9d_4a5e_8f7b_2d3e4f5a6b7c.slice"
        );
        assert_eq!(
            container_dir(d, QosClass::BestEffort, UID, &containerd("abc")),
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod6a4f2e3b_1c9d_4a5e_8f7b_2d3e4f5a6b7c.slice/cri-containerd-abc.scope"
        );
    }

    #[test]
    fn cgroupfs_layout_matches_the_kubelet() {
        let d = CgroupDriver::Cgroupfs;
        assert_eq!(kubepods(d), "kubepods");
        assert_eq!(
            pod_dir(d, QosClass::Guaranteed, UID),
            format!("kubepods/pod{UID}")
        );
        assert_eq!(
            container_dir(d, QosClass::Burstable, UID, &containerd("abc")),
            format!("kubepods/burstable/pod{UID}/abc")
        );
    }

    #[test]
    fn a_container_cgroup_names_its_pod_and_container_for_every_layout() {
        for driver in [CgroupDriver::Systemd, CgroupDriver::Cgroupfs] {
            for qos in [
                QosClass::Guaranteed,
                QosClass::Burstable,
                QosClass::BestEffort,
            ] {
                for id in [containerd("0123abcdef"), crio("fedc9876")] {
                    let path = container_dir(driver, qos, UID, &id);
                    assert_eq!(
                        container_of_path(driver, &path),
                        Some((UID.to_string(), id.clone())),
                        "{path}"
                    );
                    // The other driver's reading of the same path finds nothing.
                    let other = match driver {
                        CgroupDriver::Systemd => CgroupDriver::Cgroupfs,
                        CgroupDriver::Cgroupfs => CgroupDriver::Systemd,
                    };
                    assert_eq!(container_of_path(other, &path), None, "{path}");
                }
            }
        }
    }

    #[test]
    fn other_directories_are_not_containers() {
        let s = CgroupDriver::Systemd;
        let pod = pod_dir(s, QosClass::Burstable, UID);
        for path in [
            // QoS and pod cgroups.
            "kubepods.slice/kubepods-burstable.slice".to_string(),
            pod.clone(),
            // CRI-O's conmon, a name no runtime generates, an escape attempt.
            format!("{pod}/crio-conmon-abc.scope"),
            format!("{pod}/cri-containerd-.scope"),
            format!("{pod}/cri-containerd-../x.scope"),
            format!("{pod}/other.scope"),
            // A pod directory under the wrong QoS parent.
            format!("kubepods.slice/kubepods-besteffort.slice/kubepods-burstable-pod{}.slice/cri-containerd-abc.scope", UID.replace('-', "_")),
            // A container's child.
            format!("{pod}/cri-containerd-abc.scope/init"),
        ] {
            assert_eq!(container_of_path(s, &path), None, "{path}");
        }
        let c = CgroupDriver::Cgroupfs;
        for path in [
            format!("kubepods/burstable/pod{UID}"),
            format!("kubepods/burstable/pod{UID}/crio-conmon-abc"),
            format!("kubepods/burstable/pod{UID}/a.b"),
            format!("kubepods/burstable/{UID}/abc"),
            "abc".to_string(),
        ] {
            assert_eq!(container_of_path(c, &path), None, "{path}");
        }
    }
}
