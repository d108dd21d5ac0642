//! How the agent uses glibc's malloc. It computes in bursts and idles for minutes: during
//! a burst freed memory stays in the heap (by default glibc hands it back after every
//! whole-node computation and faults it in again on the next, doubling the cost of
//! one), and once a pass is done the agent gives it back explicitly, so an idle agent
//! stays small. mimalloc was faster by default but its heaps kept twice the memory of
//! an idle in-cluster agent (BENCHMARKS.md).

//!
//! Elsewhere than glibc (the kubectl plugin built for macOS or Windows, a musl build)
//! both are no-ops: the tuning is the agent's, which runs on Linux nodes.

/// Call first thing in `main` (the `nodemem` binary and the benchmarks do).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune_allocator() {
    // SAFETY: mallopt only sets glibc's tunables.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
    }
}

/// Gives the memory a pass freed back to the kernel.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_memory() {
    // SAFETY: malloc_trim only walks glibc's own free lists.
    unsafe { libc::malloc_trim(0) };
}

/// No glibc: nothing to tune.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune_allocator() {}

/// No glibc: the allocator gives memory back on its own terms.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory() {}
