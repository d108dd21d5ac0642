//! A fault a test arms, so that "the agent was killed between two writes" is a point a
//! test chooses, not a race it hopes to win: with `NODEMEM_TEST_KILL_AFTER_WRITES=n` in
//! its environment, the process sends itself SIGKILL right after its n-th cgroup write
//! since start (nothing after that write runs: no record, no log line). Unset, or not a
//! positive number: disarmed, one relaxed load per write.

use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that arms the fault.
pub const KILL_AFTER_WRITES_ENV: &str = "NODEMEM_TEST_KILL_AFTER_WRITES";

/// 0: disarmed.
static KILL_AFTER: AtomicU64 = AtomicU64::new(0);
static WRITES: AtomicU64 = AtomicU64::new(0);

/// Arms the fault from the environment; returns the write it kills after, if armed.
pub fn arm_from_env() -> Option<u64> {
    let n = std::env::var(KILL_AFTER_WRITES_ENV)
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0)?;
    KILL_AFTER.store(n, Ordering::Relaxed);
    Some(n)
}

/// Counts a write the kernel took; the armed one is the last thing the process does.
pub(crate) fn wrote() {
    let at = KILL_AFTER.load(Ordering::Relaxed);
    if at == 0 {
        return;
    }
    if WRITES.fetch_add(1, Ordering::Relaxed) + 1 == at {
        // SAFETY: raise() has no memory-safety preconditions; SIGKILL cannot be caught.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
    }
}
