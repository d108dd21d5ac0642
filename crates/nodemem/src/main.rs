//! The `nodemem` binary: parses the command line and hands each subcommand to its crate
//! (agent, controller, plugin, simulate, crds, sandbox); invoked as `kubectl-nodemem` or
//! `kubectl_complete-nodemem` it is the plugin.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    nodemem_plumbing::allocator::tune_allocator();
    // Linked as `kubectl_complete-nodemem`: kubectl asks it to complete `kubectl nodemem`.
    if std::env::args_os()
        .next()
        .is_some_and(|a| nodemem_plugin::invoked_for_completion(&a))
    {
        let words: Vec<String> = std::env::args_os()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let _ = std::io::stdout().write_all(nodemem_plugin::complete::answer(&words).as_bytes());
        return ExitCode::SUCCESS;
    }
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
