//! The agent's own seccomp filter (`nodemem_agent::confine`), installed in this test
//! binary's process as the agent installs it in its own (one test in a binary of its
//! own: the filter holds the whole process from then on). Each refused call is made
//! before and after: before, the kernel answers it as usual (not EPERM); after, the
//! filter refuses it with EPERM, on a thread started before the filter and on one
//! started after; and the process's status says what a node's `/proc/<pid>/status`
//! shows of a confined agent.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing
#![cfg(target_os = "linux")]

use std::io::Error;

/// What the kernel answers: Ok, or the errno.
fn answer(rc: libc::c_long) -> Result<libc::c_long, i32> {
    if rc < 0 {
        Err(Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(rc)
    }
}

/// Calls that answer without side effects when not refused: `ptrace(PTRACE_CONT)` of
/// this process, which nothing traces (ESRCH); `process_vm_readv` of this process's
/// own memory (8 bytes); `keyctl(KEYCTL_GET_KEYRING_ID)` of this thread's key ring;
/// `mount` with null arguments (EFAULT).
fn calls() -> Vec<(&'static str, Result<libc::c_long, i32>)> {
    let pid = unsafe { libc::getpid() };
    let mut word = 0u64;
    let source = 42u64;
    let local = libc::iovec {
        iov_base: &mut word as *mut u64 as *mut libc::c_void,
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: &source as *const u64 as *mut libc::c_void,
        iov_len: 8,
    };
    // SAFETY: each call gets valid pointers or null, and none of them changes this
    // process when the kernel answers it.
    unsafe {
        vec![
            (
                "ptrace",
                answer(libc::syscall(
                    libc::SYS_ptrace,
                    libc::PTRACE_CONT,
                    pid,
                    0,
                    0,
                )),
            ),
            (
                "process_vm_readv",
                answer(libc::syscall(
                    libc::SYS_process_vm_readv,
                    pid,
                    &local as *const libc::iovec,
                    1,
                    &remote as *const libc::iovec,
                    1,
                    0,
                )),
            ),
            (
                "keyctl",
                answer(libc::syscall(
                    libc::SYS_keyctl,
                    0,  // KEYCTL_GET_KEYRING_ID
                    -1, // KEY_SPEC_THREAD_KEYRING
                    0,
                )),
            ),
            (
                "mount",
                answer(libc::syscall(
                    libc::SYS_mount,
                    std::ptr::null::<u8>(),
                    std::ptr::null::<u8>(),
                    std::ptr::null::<u8>(),
                    0,
                    std::ptr::null::<u8>(),
                )),
            ),
        ]
    }
}

fn status_field(name: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
        .unwrap_or_default()
}

#[test]
fn the_agent_refuses_itself_the_calls_it_never_makes_on_every_thread() {
    // Before: the kernel's own answers, none of them the filter's EPERM.
    for (name, answer) in calls() {
        assert_ne!(answer, Err(libc::EPERM), "{name} before the filter");
    }
    assert_eq!(status_field("Seccomp:"), "0", "no filter before");
    // A thread started before the filter is held by it too (TSYNC).
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let earlier = std::thread::spawn(move || {
        wait.recv().unwrap();
        calls()
    });
    let refused = nodemem_agent::confine::confine().expect("the filter installs");
    assert_eq!(refused, nodemem_agent::confine::REFUSED.len());
    assert!(refused >= 30, "{refused}");
    go.send(()).unwrap();
    let later = std::thread::spawn(calls);
    for (thread, answers) in [
        ("this thread", calls()),
        ("a thread started before", earlier.join().unwrap()),
        ("a thread started after", later.join().unwrap()),
    ] {
        for (name, answer) in answers {
            assert_eq!(answer, Err(libc::EPERM), "{name} on {thread}");
        }
    }
    // What a node shows of the agent's process.
    assert_eq!(status_field("Seccomp:"), "2", "filter mode");
    assert_eq!(status_field("NoNewPrivs:"), "1");
    // The agent's own work still runs: files, threads, sockets.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), "x").unwrap();
    assert_eq!(std::fs::read_to_string(dir.path().join("f")).unwrap(), "x");
    std::net::TcpListener::bind("127.0.0.1:0").unwrap();
}
