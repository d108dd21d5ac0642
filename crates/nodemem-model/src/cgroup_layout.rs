//! Where the kubelet puts pod and container cgroups, relative to the cgroup v2 mount,
//! for both cgroup drivers (`pkg/kubelet/cm/cgroup_manager_linux.go`: the systemd
//! driver turns `kubepods/burstable/pod<uid>` into nested `.slice` units and escapes
//! `-` in the UID as `_`; containerd names container scopes `cri-containerd-<id>.scope`,
//! CRI-O `crio-<id>.scope`; with the cgroupfs driver containerd uses the bare ID and
//! CRI-O `crio-<id>`).
//! Pure path arithmetic: the agent and the test harness's fake kubelet share it. The
//! identifiers are joined as given; the agent's cgroup layer refuses any that would
//! leave the cgroup root.

use crate::qos::QosClass;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CgroupDriver {
    #[default]
    Systemd,
    Cgroupfs,
}

/// The container runtime, which names container cgroups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ContainerRuntime {
    #[default]
    Containerd,
    CriO,
}

/// A container as the kubelet reports it in `status.containerStatuses[].containerID`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContainerId {
    pub runtime: ContainerRuntime,
    pub id: String,
}

impl ContainerId {
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
pub fn kubepods(driver: CgroupDriver) -> String {
    match driver {
        CgroupDriver::Systemd => "kubepods.slice".to_string(),
        CgroupDriver::Cgroupfs => "kubepods".to_string(),
    }
}

/// The QoS-level cgroup; Guaranteed pods live directly under kubepods.
pub fn qos_dir(driver: CgroupDriver, qos: QosClass) -> String {
    let class = match qos {
        QosClass::Guaranteed => return kubepods(driver),
        QosClass::Burstable => "burstable",
        QosClass::BestEffort => "besteffort",
    };
    match driver {
        CgroupDriver::Systemd => format!("kubepods.slice/kubepods-{class}.slice"),
        CgroupDriver::Cgroupfs => format!("kubepods/{class}"),
    }
}

/// The pod cgroup.
pub fn pod_dir(driver: CgroupDriver, qos: QosClass, uid: &str) -> String {
    let parent = qos_dir(driver, qos);
    match driver {
        CgroupDriver::Systemd => {
            let escaped = uid.replace('-', "_");
            let unit = match qos {
                QosClass::Guaranteed => format!("kubepods-pod{escaped}.slice"),
                QosClass::Burstable => format!("kubepods-burstable-pod{escaped}.slice"),
                QosClass::BestEffort => format!("kubepods-besteffort-pod{escaped}.slice"),
            };
            format!("{parent}/{unit}")
        }
        CgroupDriver::Cgroupfs => format!("{parent}/pod{uid}"),
    }
}

/// A container cgroup.
pub fn container_dir(
    driver: CgroupDriver,
    qos: QosClass,
    uid: &str,
    container: &ContainerId,
) -> String {
    let pod = pod_dir(driver, qos, uid);
    let id = &container.id;
    match (driver, container.runtime) {
        (CgroupDriver::Systemd, ContainerRuntime::Containerd) => {
            format!("{pod}/cri-containerd-{id}.scope")
        }
        (CgroupDriver::Systemd, ContainerRuntime::CriO) => format!("{pod}/crio-{id}.scope"),
        (CgroupDriver::Cgroupfs, ContainerRuntime::Containerd) => format!("{pod}/{id}"),
        (CgroupDriver::Cgroupfs, ContainerRuntime::CriO) => format!("{pod}/crio-{id}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "6a4f2e3b-1c9d-4a5e-8f7b-2d3e4f5a6b7c";

    fn containerd(id: &str) -> ContainerId {
        ContainerId {
            runtime: ContainerRuntime::Containerd,
            id: id.to_string(),
        }
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
}
