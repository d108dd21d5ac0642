//! The README's first hour, as the README writes it: its block of commands read from
//! README.md and run one by one in a shell, with the real kubectl and the plugin's own
//! binary (`kubectl-nodemem`) on the PATH, against a cluster where nodemem runs (the
//! kustomize install, real agent processes on two simulated nodes). One change, said
//! here and in the README: the starter policy's `minReadySeconds` is 1 second in the
//! copy of `examples/` the commands read (120 would make the test wait minutes per
//! batch).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nodemem_testkit::bed::{Bed, BedSpec, Install, PoolSpec};

use crate::common::Ran;

/// The README's first-hour block: the lines of the `sh` block after "The first hour, as
/// commands".
fn first_hour(readme: &str) -> Vec<String> {
    let after = readme
        .split_once("The first hour, as commands")
        .expect("README.md has its first-hour commands")
        .1;
    let block = after
        .split_once("```sh\n")
        .expect("a sh block")
        .1
        .split_once("```")
        .expect("the block ends")
        .0;
    block
        .lines()
        .map(|l| l.split("   #").next().unwrap().trim_end().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// A line as a user's shell runs it, in `dir`, with the cluster's kubeconfig and
/// kubectl and the plugin on the PATH.
fn shell(line: &str, dir: &Path, kubeconfig: &Path, path: &str) -> Ran {
    let out = Command::new("bash")
        .args(["-c", line])
        .current_dir(dir)
        .env("KUBECONFIG", kubeconfig)
        .env("PATH", path)
        .output()
        .unwrap();
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `line` until `done` holds for what it printed (an agent reports within its
/// pass; the controller within its tick), at most `within`.
fn until(
    line: &str,
    dir: &Path,
    kubeconfig: &Path,
    path: &str,
    within: Duration,
    done: impl Fn(&Ran) -> bool,
) -> Ran {
    let deadline = Instant::now() + within;
    loop {
        let ran = shell(line, dir, kubeconfig, path);
        if done(&ran) || Instant::now() > deadline {
            return ran;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The README's first-hour block, read from README.md and run line by line in bash with
/// the real kubectl and `kubectl-nodemem` (the plugin's own binary) on the PATH against
/// the kustomize install with two simulated nodes: label each node, apply the starter
/// (Observe), `status` and `explain NODE` (the node under the starter, Observe), the
/// starter switched to Agent with `sed`, `diff` (exit 1, cgroup values), apply,
/// `kubectl wait` Ready, `status` (Agent, Complete); the starter's `minReadySeconds` at
/// 1 second in the copy the commands read.
#[tokio::test(flavor = "multi_thread")]
async fn the_readmes_first_hour_runs_as_written() {
    let repo = nodemem_e2e::repo_root();
    let commands = first_hour(&std::fs::read_to_string(repo.join("README.md")).unwrap());
    assert_eq!(commands.len(), 9, "{commands:#?}");
    let spec = BedSpec {
        nodemem: nodemem_e2e::nodemem().into(),
        repo: repo.clone(),
        pools: vec![PoolSpec::new("quick", 2)],
        agent_resync_seconds: 2,
        install: Install::Manifests,
        controller_args: Vec::new(),
        pod_security_default: None,
    };
    let mut bed = Bed::start(&spec, &|_| {}).await.expect("the bed starts");
    let kubeconfig = bed.admin_kubeconfig().to_path_buf();
    // The user's directory: examples/ as in the checkout, the starter's
    // minReadySeconds at 1 second.
    let dir = tempfile::tempdir().unwrap();
    let starter = dir.path().join("examples/starter");
    std::fs::create_dir_all(&starter).unwrap();
    let policy = std::fs::read_to_string(repo.join("examples/starter/policy.yaml")).unwrap();
    assert!(policy.contains("minReadySeconds: 120"), "{policy}");
    std::fs::write(
        starter.join("policy.yaml"),
        policy.replace("minReadySeconds: 120", "minReadySeconds: 1"),
    )
    .unwrap();
    let bin = nodemem_testkit::binaries::control_plane_binaries().unwrap();
    let plugin: PathBuf = nodemem_e2e::nodemem().with_file_name("kubectl-nodemem");
    assert!(plugin.exists(), "{}", plugin.display());
    let path = format!(
        "{}:{}:{}",
        bin.kubectl.parent().unwrap().display(),
        plugin.parent().unwrap().display(),
        std::env::var("PATH").unwrap()
    );
    let nodes: Vec<String> = bed.nodes.keys().cloned().collect();
    assert_eq!(nodes.len(), 2);
    let controller_log = bed.controller_log().to_path_buf();
    let log = |ran: &Ran, line: &str| {
        format!(
            "{line}: exit {}\n{}{}\ncontroller:\n{}",
            ran.code,
            ran.stdout,
            ran.stderr,
            nodemem_testkit::process::tail(&controller_log, 20)
        )
    };
    for line in &commands {
        if let Some(dead) = bed.exited() {
            panic!("{dead}");
        }
        let ran = if line.starts_with("kubectl label node NODE") {
            // Each node of the pool.
            let mut last = None;
            for node in &nodes {
                let ran = shell(&line.replace("NODE", node), dir.path(), &kubeconfig, &path);
                assert_eq!(ran.code, 0, "{}", log(&ran, line));
                last = Some(ran);
            }
            last.unwrap()
        } else if line.contains("explain NODE") {
            // Once the agent has reported under the policy (within its pass).
            let line = line.replace("NODE", &nodes[0]);
            until(
                &line,
                dir.path(),
                &kubeconfig,
                &path,
                Duration::from_secs(60),
                |r| r.code == 0 && r.stdout.contains("starter") && r.stdout.contains("Observe"),
            )
        } else if line.contains("nodemem status starter") && line == &commands[2] {
            until(
                line,
                dir.path(),
                &kubeconfig,
                &path,
                Duration::from_secs(60),
                |r| r.code == 0 && r.stdout.contains("starter"),
            )
        } else if line.contains("nodemem diff") {
            let ran = shell(line, dir.path(), &kubeconfig, &path);
            // kubectl diff's convention: 1, changes.
            assert_eq!(ran.code, 1, "{}", log(&ran, line));
            assert!(ran.stdout.contains("memory."), "{}", log(&ran, line));
            continue;
        } else {
            shell(line, dir.path(), &kubeconfig, &path)
        };
        assert_eq!(ran.code, 0, "{}", log(&ran, line));
    }
    // The last status: the pool runs the policy under Agent, rolled out.
    let last = shell(&commands[8], dir.path(), &kubeconfig, &path);
    assert!(
        last.stdout.contains("Agent") && last.stdout.contains("Complete"),
        "{}",
        log(&last, &commands[8])
    );
    // The README's sed made the user's file: the spec's enforcement switched.
    let written = std::fs::read_to_string(dir.path().join("policy.yaml")).unwrap();
    assert!(
        written.contains("\n  enforcement: Agent\n") && !written.contains("enforcement: Observe"),
        "{written}"
    );
}
