//! Where the kubelet puts pod and container cgroups, relative to the cgroup v2 mount,
//! for both cgroup drivers (`pkg/kubelet/cm/cgroup_manager_linux.go`: the systemd
//! driver turns `kubepods/burstable/pod<uid>` into nested `.slice` units and escapes
//! `-` in the UID as `_`; containerd names container scopes `cri-containerd-<id>.scope`).
//! Pure path arithmetic: the agent and the test harness's fake kubelet share it.

use crate::qos::QosClass;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CgroupDriver {
    #[default]
    Systemd,
    Cgroupfs,
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

/// A container cgroup (containerd as the runtime).
pub fn container_dir(driver: CgroupDriver, qos: QosClass, uid: &str, container_id: &str) -> String {
    let pod = pod_dir(driver, qos, uid);
    match driver {
        CgroupDriver::Systemd => format!("{pod}/cri-containerd-{container_id}.scope"),
        CgroupDriver::Cgroupfs => format!("{pod}/{container_id}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "6a4f2e3b-1c9d-4a5e-8f7b-2d3e4f5a6b7c";

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
            container_dir(d, QosClass::BestEffort, UID, "abc"),
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
            container_dir(d, QosClass::Burstable, UID, "abc"),
            format!("kubepods/burstable/pod{UID}/abc")
        );
    }
}
