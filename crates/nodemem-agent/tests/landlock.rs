//! The agent's capability drop and Landlock domain (`nodemem_agent::confine`), applied
//! to this test binary's process as the agent applies them to its own (a binary of its
//! own: both hold the thread from then on). After them: nothing is left in the
//! thread's capability sets, writes beneath the allowed tree succeed, and where the
//! kernel has Landlock, writes elsewhere (a sibling directory, a file appended to,
//! a directory created, a rename out of the tree) are refused while reads are not.
//! Without Landlock the ruleset says so (`Restricted::Not`), never that it holds.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing
#![cfg(target_os = "linux")]

use std::fs;
use std::io::ErrorKind;

use nodemem_agent::confine::{drop_capabilities, restrict_writes, Restricted};

/// The kernel's Landlock ABI version, or None (`landlock_create_ruleset` with
/// `LANDLOCK_CREATE_RULESET_VERSION`).
fn landlock_abi() -> Option<i64> {
    // SAFETY: a null attribute with size 0 and the version flag reads nothing.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    (v > 0).then_some(v)
}

fn status_line(name: &str) -> String {
    fs::read_to_string("/proc/thread-self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn the_agent_holds_no_capability_and_writes_only_beneath_its_trees() {
    let dir = tempfile::tempdir().unwrap();
    let allowed = dir.path().join("cgroup");
    let outside = dir.path().join("elsewhere");
    fs::create_dir_all(allowed.join("pod")).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("kept"), "before\n").unwrap();

    drop_capabilities().unwrap();
    for set in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
        assert_eq!(
            status_line(set),
            format!("{set}:\t0000000000000000"),
            "{set} after the drop"
        );
    }

    let how = restrict_writes(std::slice::from_ref(&allowed)).unwrap();
    // Beneath the tree: a write, a new file, a rename within it.
    fs::write(allowed.join("pod/memory.high"), "max\n").unwrap();
    fs::rename(
        allowed.join("pod/memory.high"),
        allowed.join("pod/memory.low"),
    )
    .unwrap();
    // Reads anywhere.
    assert_eq!(
        fs::read_to_string(outside.join("kept")).unwrap(),
        "before\n"
    );

    let attempts = [
        ("a new file", fs::write(outside.join("new"), "x").err()),
        (
            "an append",
            fs::OpenOptions::new()
                .append(true)
                .open(outside.join("kept"))
                .err(),
        ),
        ("a directory", fs::create_dir(outside.join("d")).err()),
        (
            "a rename out of the tree",
            fs::rename(allowed.join("pod/memory.low"), outside.join("moved")).err(),
        ),
    ];
    match landlock_abi() {
        Some(abi) => {
            eprintln!("Landlock ABI {abi}: {how:?}");
            assert!(
                matches!(how, Restricted::Fully | Restricted::Partly),
                "ABI {abi}: {how:?}"
            );
            for (what, err) in attempts {
                let err = err.unwrap_or_else(|| panic!("{what} outside the tree was allowed"));
                assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{what}: {err}");
            }
            assert_eq!(
                fs::read_to_string(outside.join("kept")).unwrap(),
                "before\n"
            );
        }
        None => {
            assert_eq!(how, Restricted::Not);
            eprintln!("this kernel has no Landlock: only the capability drop is checked here");
        }
    }
}
