//! `cargo bench -p nodemem-agent --bench node_system_alloc`: the same benchmarks with
//! glibc's malloc, for comparison (it returns freed memory to the kernel between whole-
//! node computations and takes page faults to get it back).

mod common;

fn main() {
    common::run("glibc malloc (system)");
}
