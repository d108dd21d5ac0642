//! Shared by the CLI test files: run the real `nodemem` binary from the repository root.

use std::path::PathBuf;
use std::process::Command;

/// Read at run time (cargo sets it for the test): a target directory shared by two
/// checkouts keeps a test built in the other one while its sources are unchanged.
pub fn repo() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join("../..")
}

/// Runs `nodemem ARGS` in the repository root: exit code, stdout, stderr.
pub fn nodemem(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodemem"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("run nodemem");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Runs `nodemem ARGS` in the repository root with `env` added: how it ended (a signal
/// too), stdout, stderr.
#[allow(dead_code)] // not every test file uses it
pub fn nodemem_env(
    args: &[&str],
    env: &[(&str, &str)],
) -> (std::process::ExitStatus, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodemem"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(repo())
        .output()
        .expect("run nodemem");
    (
        out.status,
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}
