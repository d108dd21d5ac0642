//! How the agent uses glibc's malloc. It computes in bursts and idles for minutes: during
//! a burst freed memory stays in the heap (by default glibc hands it back after every
//! whole-node computation and faults it in again on the next, doubling the cost of
//! one), and once a pass is done the agent gives it back explicitly, so an idle agent
//! stays small. mimalloc was faster by default but its heaps kept twice the memory of
//! an idle in-cluster agent (BENCHMARKS.md).

/// Call first thing in `main` (the `nodemem` binary and the benchmarks do).
pub fn tune_allocator() {
    // SAFETY: mallopt only sets glibc's tunables.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
    }
}

/// Gives the memory a pass freed back to the kernel.
pub fn release_free_memory() {
    // SAFETY: malloc_trim only walks glibc's own free lists.
    unsafe { libc::malloc_trim(0) };
}
