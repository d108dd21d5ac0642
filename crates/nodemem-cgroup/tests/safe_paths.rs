//! Property: whatever bytes a pod UID or container ID holds, nodemem either refuses
//! it by name or builds a path that stays under the cgroup root, one component per
//! identifier; and a write through such a path never touches anything outside.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Component;

use nodemem_cgroup::{check_identifier, CgroupFs, CgroupPath};
use nodemem_model::pod::qos::QosClass;
use nodemem_model::values::cgroup_layout::{
    container_dir, pod_dir, CgroupDriver, ContainerId, ContainerRuntime,
};
use proptest::prelude::*;

/// Identifiers biased towards the dangerous: dots, slashes, NULs, long runs.
fn hostile() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..300),
        proptest::collection::vec(
            prop_oneof![Just(b'.'), Just(b'/'), Just(0u8), Just(b'a'), Just(b'-')],
            0..12
        ),
        Just(b"..".to_vec()),
        Just(b"../../../etc/passwd".to_vec()),
        Just(vec![b'x'; 256]),
    ]
}

fn resolve(fs: &CgroupFs, path: &CgroupPath) -> Vec<String> {
    // Lexical resolution: what the kernel would walk.
    let mut stack: Vec<String> = Vec::new();
    for c in fs.dir(path).strip_prefix(fs.root()).unwrap().components() {
        match c {
            Component::Normal(n) => stack.push(n.to_string_lossy().into_owned()),
            Component::ParentDir => {
                stack.pop();
                stack.push("<escaped>".into());
            }
            other => stack.push(format!("<{other:?}>")),
        }
    }
    stack
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn identifiers_are_refused_or_contained(uid in hostile(), id in hostile(), crio in any::<bool>(), systemd in any::<bool>()) {
        let root = tempfile::tempdir().unwrap();
        let fs = CgroupFs::new(root.path().join("cgroup"));
        std::fs::create_dir_all(fs.root()).unwrap();
        let outside = root.path().join("outside");
        std::fs::write(&outside, "untouched").unwrap();

        let (Some(uid), Some(id)) = (std::str::from_utf8(&uid).ok(), std::str::from_utf8(&id).ok()) else {
            // Non-UTF-8 never becomes a String; from the file system it is refused.
            let err = CgroupPath::from_os(OsStr::from_bytes(&[b'a', 0xff])).unwrap_err();
            prop_assert!(err.to_string().contains("is not UTF-8"));
            return Ok(());
        };
        let checked = check_identifier("pod UID", uid).and(check_identifier("container ID", id));
        let driver = if systemd { CgroupDriver::Systemd } else { CgroupDriver::Cgroupfs };
        let runtime = if crio { ContainerRuntime::CriO } else { ContainerRuntime::Containerd };
        let rel = container_dir(driver, QosClass::Burstable, uid, &ContainerId { runtime, id: id.to_string() });
        match checked {
            Err(e) => {
                // Refused by name, with the value in the message.
                let named = if check_identifier("pod UID", uid).is_err() { uid } else { id };
                let quoted = format!("{named:?}");
                let message = e.to_string();
                prop_assert!(message.contains(&quoted), "{} does not name {}", message, quoted);
            }
            Ok(()) => {
                let path = CgroupPath::new(&rel).expect("checked identifiers give a valid path");
                let parts = resolve(&fs, &path);
                let pod_parts = pod_dir(driver, QosClass::Burstable, uid).split('/').count();
                prop_assert_eq!(parts.len(), pod_parts + 1, "one component per identifier: {:?}", parts);
                prop_assert!(parts.iter().all(|p| !p.starts_with('<')), "{:?}", parts);
                // The directory does not exist: the write is refused and creates nothing.
                prop_assert!(fs.write(&path, "memory.min", "1").is_err());
            }
        }
        // Whatever the layout made of it, a path check alone also never lets it out.
        if let Ok(path) = CgroupPath::new(&rel) {
            prop_assert!(resolve(&fs, &path).iter().all(|p| !p.starts_with('<')));
        }
        prop_assert_eq!(std::fs::read_to_string(&outside).unwrap(), "untouched");
        let mut entries = std::fs::read_dir(fs.root()).unwrap();
        prop_assert!(entries.next().is_none(), "nothing was created under the root");
    }
}
