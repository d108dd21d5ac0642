//! Why this crate does not build on cgroups-rs (the design card's suggestion, to be
//! decided by a test): run cgroups-rs on the same temp-dir tree our layer is tested on.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::path::PathBuf;

use cgroups_rs::fs::hierarchies::V2;
use cgroups_rs::fs::memory::{MemController, SetMemory};
use cgroups_rs::fs::{Hierarchy, MaxValue};
use nodemem_cgroup::{CgroupFs, CgroupPath};

#[test]
fn cgroups_rs_cannot_target_an_injected_root() {
    // The only constructor of the v2 hierarchy takes no root.
    assert_eq!(V2::new().root(), PathBuf::from("/sys/fs/cgroup"));
}

#[test]
fn cgroups_rs_creates_missing_interface_files_where_nodemem_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let cg = dir.path().join("kubepods");
    std::fs::create_dir_all(&cg).unwrap();
    // A cgroup whose memory controller is not enabled has no memory.* files.
    let ours = CgroupFs::new(dir.path());
    let kp = CgroupPath::new("kubepods").unwrap();
    assert!(ours.write(&kp, "memory.min", "4096").is_err());
    assert!(!cg.join("memory.min").exists());

    let theirs = MemController::new(cg.clone(), dir.path().to_path_buf(), true);
    let result = theirs.set_mem(SetMemory {
        min: Some(MaxValue::Value(4096)),
        low: None,
        high: None,
        max: None,
    });
    assert!(result.is_ok(), "cgroups-rs reports success: {result:?}");
    assert_eq!(
        std::fs::read_to_string(cg.join("memory.min")).unwrap(),
        "4096",
        "and has created a plain file the kernel would never have"
    );
}
