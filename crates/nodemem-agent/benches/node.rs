//! `cargo bench -p nodemem-agent --bench node`: the agent core's benchmarks (see
//! common/mod.rs) with the allocator the shipped `nodemem` binary uses (mimalloc, set
//! in crates/nodemem/src/main.rs), so the figures are those of what ships.

mod common;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    common::run("mimalloc (as the nodemem binary)");
}
