//! `cargo bench -p nodemem-apply --bench node`: the agent core's benchmarks (see
//! common/mod.rs) with the allocator as the shipped `nodemem` binary sets it up (glibc,
//! `nodemem_plumbing::allocator::tune_allocator`), so the figures are those of what ships.

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is the run failing

mod common;

fn main() {
    nodemem_plumbing::allocator::tune_allocator();
    common::run("glibc malloc, tuned as the nodemem binary");
}
