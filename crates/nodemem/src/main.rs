use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    nodemem_plumbing::allocator::tune_allocator();
    // Installed (or linked) as `kubectl-nodemem`, the binary is the kubectl plugin.
    if std::env::args_os()
        .next()
        .is_some_and(|a| nodemem_plugin::invoked_as_plugin(&a))
    {
        let out = nodemem_plugin::run(&nodemem_plugin::PluginCli::parse());
        let _ = std::io::stdout().write_all(out.stdout.as_bytes());
        for problem in &out.stderr {
            eprintln!("error: {problem}");
        }
        return ExitCode::from(out.code);
    }
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
