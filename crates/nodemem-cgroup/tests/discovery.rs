//! Discovery on temp-dir roots shaped like the kernel's (the VM tier runs it on the
//! real ones).

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::path::Path;

use nodemem_cgroup::discover::{discover, DiscoveryError};
use nodemem_cgroup::Roots;
use nodemem_model::values::cgroup_layout::CgroupDriver;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn roots(dir: &Path) -> Roots {
    Roots {
        cgroup: dir.join("cgroup"),
        sys: dir.join("sys"),
        proc: dir.join("proc"),
    }
}

fn node(dir: &Path, kubepods: &str) -> Roots {
    let r = roots(dir);
    write(&r.proc.join("sys/kernel/osrelease"), "6.1.0-56-amd64\n");
    write(
        &r.cgroup.join("cgroup.controllers"),
        "cpuset cpu io memory hugetlb pids\n",
    );
    write(
        &r.cgroup.join(kubepods).join("cgroup.controllers"),
        "cpuset memory pids\n",
    );
    write(
        &r.sys.join("devices/system/node/node0/meminfo"),
        "Node 0 MemTotal:        1048576 kB\nNode 0 MemFree:          524288 kB\n",
    );
    write(
        &r.sys
            .join("devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"),
        "4\n",
    );
    write(
        &r.sys.join("devices/system/node/node1/meminfo"),
        "Node 1 MemTotal:        2097152 kB\n",
    );
    write(&r.sys.join("devices/system/node/possible"), "0-1\n");
    r
}

#[test]
fn discovers_a_systemd_node_with_two_numa_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let d = discover(&node(dir.path(), "kubepods.slice"), None).unwrap();
    assert_eq!(d.kernel_version, "6.1.0-56-amd64");
    assert_eq!(d.cgroup_driver, CgroupDriver::Systemd);
    assert!(d.has_controller("memory") && d.has_controller("cpuset"));
    // SAFETY: sysconf has no preconditions.
    assert_eq!(d.page_size, unsafe { libc::sysconf(libc::_SC_PAGESIZE) }
        as i64);
    let t = d.topology.unwrap();
    assert_eq!(t.nodes[&0]["memory"], (1 << 30) - (8 << 20));
    assert_eq!(t.nodes[&0]["hugepages-2Mi"], 8 << 20);
    assert_eq!(t.nodes[&1]["memory"], 2 << 30);
}

#[test]
fn cgroupfs_driver_override_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let r = node(dir.path(), "kubepods");
    assert_eq!(
        discover(&r, None).unwrap().cgroup_driver,
        CgroupDriver::Cgroupfs
    );
    let wrong = discover(&r, Some(CgroupDriver::Systemd)).unwrap_err();
    assert!(matches!(wrong, DiscoveryError::NoKubepods(_)), "{wrong}");

    std::fs::remove_file(r.cgroup.join("cgroup.controllers")).unwrap();
    let v1 = discover(&r, None).unwrap_err();
    assert!(
        v1.to_string().ends_with(
            "not a cgroup v2 hierarchy (no cgroup.controllers); nodemem needs cgroup v2"
        ),
        "{v1}"
    );

    let dir = tempfile::tempdir().unwrap();
    let r = node(dir.path(), "kubepods.slice");
    write(
        &r.sys.join("devices/system/node/node1/meminfo"),
        "Node 1 MemTotal: lots kB\n",
    );
    let bad = discover(&r, None).unwrap_err().to_string();
    assert!(
        bad.ends_with("node1: meminfo: MemTotal value \"lots\" is not a number"),
        "{bad}"
    );
}
