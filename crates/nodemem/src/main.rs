use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

// The agent recomputes whole nodes (thousands of small values) on resyncs; glibc's
// malloc hands the freed memory back to the kernel after each and page-faults it in
// again, doubling the cost (BENCHMARKS.md). mimalloc keeps it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = nodemem::Cli::parse();
    match nodemem::run(&cli) {
        Ok(out) => {
            // A closed pipe (`| head`) is not an error worth a panic.
            let _ = std::io::stdout().write_all(out.stdout.as_bytes());
            for problem in &out.stderr {
                eprintln!("error: {problem}");
            }
            ExitCode::from(out.code)
        }
        Err(err) => {
            for problem in &err.problems {
                eprintln!("error: {problem}");
            }
            ExitCode::FAILURE
        }
    }
}
