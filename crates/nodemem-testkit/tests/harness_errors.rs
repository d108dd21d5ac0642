//! The harness fails clearly and cleans up: missing binaries are named with the fix,
//! and a child process dies with the test that panicked while holding it.

use std::path::Path;
use std::time::Duration;

use nodemem_testkit::process::Process;
use nodemem_testkit::ControlPlane;

#[test]
fn missing_control_plane_binaries_are_named_with_the_fix() {
    let empty = tempfile::tempdir().unwrap();
    // This test binary never starts a real control plane, so pointing the (process-wide,
    // cached) binary location at an empty directory affects nothing else.
    std::env::set_var("NODEMEM_CONTROL_PLANE_BIN", empty.path());
    let err = ControlPlane::start()
        .err()
        .expect("no binaries, no control plane");
    let text = err.to_string();
    assert!(text.contains("etcd is missing"), "{text}");
    assert!(
        text.contains("tests/scripts/build-control-plane.sh"),
        "{text}"
    );
}

fn alive(pid: u32) -> bool {
    // A zombie still has a /proc entry; its state letter is Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.split_whitespace().nth(2).is_none_or(|st| st != "Z"))
        .unwrap_or(false)
}

#[test]
fn a_panicking_test_takes_its_processes_down() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sleep.log");
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let p = Process::spawn("sleep", Path::new("sleep"), &["1000".to_string()], &log).unwrap();
        tx.send(p.pid()).unwrap();
        panic!("a failing test while holding the process");
    });
    let pid = rx.recv().unwrap();
    assert!(worker.join().is_err(), "the thread panicked");
    // Drop ran during unwinding: SIGTERM to the process group.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} survived the panic"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_component_that_exits_reports_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("false.log");
    let mut p = Process::spawn(
        "sh",
        Path::new("sh"),
        &["-c".into(), "echo boom: bad flag >&2; exit 3".into()],
        &log,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = p.exited() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(3));
    assert_eq!(p.log_tail(5), "boom: bad flag");
}
