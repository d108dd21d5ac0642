//! `kubectl-nodemem`: the kubectl plugin as a binary of its own, built from portable
//! crates only (no inotify, no glibc tuning: those are the agent's), so that it builds
//! for the laptops kubectl runs on. Linked or copied as `kubectl_complete-nodemem`, it
//! answers kubectl's completion of `kubectl nodemem` (kubectl 1.26+). The `nodemem`
//! binary still serves as the plugin when it is named `kubectl-nodemem`.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
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
    let out = nodemem_plugin::run(&nodemem_plugin::PluginCli::parse());
    // A closed pipe (`| head`) is not an error worth a panic.
    let _ = std::io::stdout().write_all(out.stdout.as_bytes());
    for problem in &out.stderr {
        eprintln!("error: {problem}");
    }
    ExitCode::from(out.code)
}
