//! The control plane's binaries for the sandbox: the versioned cache when warm, else a
//! build from the Go modules (`tests/scripts/build-control-plane.sh`) with its progress
//! shown the whole time: the build's own stage lines, the elapsed time and an estimate.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nodemem_plumbing::CliError;

/// A cold build on a 2-core machine (measured: ~8 minutes for the control plane,
/// ~2.5 more for helm).
const COLD_ESTIMATE: Duration = Duration::from_secs(11 * 60);

/// How often the progress line is refreshed while the build prints nothing.
const TICK: Duration = Duration::from_secs(15);

/// Runs the build script (a no-op on a warm cache) and returns the bin directory.
/// `line` hears every progress line, with the elapsed time and the estimate left.
pub fn control_plane(repo: &Path, line: &dyn Fn(&str)) -> Result<PathBuf, CliError> {
    if let Some(dir) = std::env::var_os("NODEMEM_CONTROL_PLANE_BIN") {
        return Ok(PathBuf::from(dir));
    }
    run_script(repo, TICK, line)
}

fn run_script(repo: &Path, tick: Duration, line: &dyn Fn(&str)) -> Result<PathBuf, CliError> {
    let script = repo.join("tests/scripts/build-control-plane.sh");
    let mut child = Command::new("bash")
        .arg(&script)
        // The sandbox runs no real node: the older kubelets are the tests' own.
        .env("NODEMEM_OLDER_KUBELETS", "")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| CliError::one(format!("cannot run {}: {e}", script.display())))?;
    let started = Instant::now();
    let stderr = child.stderr.take().expect("piped");
    // The build prints a stage line now and then; a ticker keeps the elapsed time and
    // the estimate moving in between so no minute passes silently.
    let (tx, rx) = std::sync::mpsc::channel::<Option<String>>();
    let reader_tx = tx.clone();
    let reader = std::thread::spawn(move || {
        let mut tail = Vec::new();
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            tail.push(l.clone());
            if l.starts_with(">>") || l.starts_with("error") {
                let _ = reader_tx.send(Some(l));
            }
        }
        let _ = reader_tx.send(None);
        tail
    });
    let mut stage = "checking the build cache".to_string();
    loop {
        match rx.recv_timeout(tick) {
            Ok(Some(l)) => stage = l.trim_start_matches(">> ").to_string(),
            Ok(None) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
        let elapsed = started.elapsed();
        let left = COLD_ESTIMATE.saturating_sub(elapsed);
        line(&format!(
            "building the control plane from Go modules (first run only, cached after): {stage} [{}:{:02} elapsed, about {} min left]",
            elapsed.as_secs() / 60,
            elapsed.as_secs() % 60,
            left.as_secs().div_ceil(60)
        ));
    }
    let tail = reader.join().unwrap_or_default();
    let out = child
        .wait_with_output()
        .map_err(|e| CliError::one(format!("{}: {e}", script.display())))?;
    if !out.status.success() {
        let last: Vec<&String> = tail.iter().rev().take(15).collect();
        return Err(CliError::many(
            std::iter::once(format!("{} failed ({})", script.display(), out.status))
                .chain(last.into_iter().rev().cloned())
                .collect(),
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    Ok(PathBuf::from(stdout.lines().last().unwrap_or("").trim()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn fake_repo(script: &str) -> tempfile::TempDir {
        let repo = tempfile::tempdir().unwrap();
        let dir = repo.path().join("tests/scripts");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("build-control-plane.sh"), script).unwrap();
        repo
    }

    #[test]
    fn a_slow_build_reports_its_stage_elapsed_time_and_estimate_while_silent() {
        let repo = fake_repo(
            "echo '>> building kube-apiserver v1.36.3' >&2\nsleep 1\necho 'go: noise' >&2\necho /cache/bin\n",
        );
        let lines = Mutex::new(Vec::new());
        let bin = run_script(repo.path(), Duration::from_millis(200), &|l| {
            lines.lock().unwrap().push(l.to_string())
        })
        .unwrap();
        assert_eq!(bin, PathBuf::from("/cache/bin"));
        let lines = lines.into_inner().unwrap();
        // The stage line at once, then a refresh every tick while the build is silent.
        assert!(lines.len() >= 3, "{lines:?}");
        assert!(
            lines
                .iter()
                .all(|l| l.contains("building kube-apiserver v1.36.3")
                    && l.contains("elapsed, about")
                    && l.contains("min left")),
            "{lines:?}"
        );
        assert!(
            !lines.iter().any(|l| l.contains("go: noise")),
            "only stage lines are shown"
        );
    }

    #[test]
    fn a_failed_build_says_so_with_the_end_of_its_output() {
        let repo = fake_repo("echo '>> building etcd' >&2\necho 'error: no Go' >&2\nexit 3\n");
        let err = run_script(repo.path(), Duration::from_millis(100), &|_| {}).unwrap_err();
        assert!(err.problems[0].contains("failed"), "{:?}", err.problems);
        assert!(
            err.problems.iter().any(|p| p == "error: no Go"),
            "{:?}",
            err.problems
        );
    }
}
