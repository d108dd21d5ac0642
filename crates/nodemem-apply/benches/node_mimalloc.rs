//! `cargo bench -p nodemem-apply --bench node_mimalloc`: the same benchmarks with
//! mimalloc, for comparison with the allocator the binary ships (glibc, tuned).

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is the run failing

mod common;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    common::run("mimalloc");
}
