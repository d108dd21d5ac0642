//! `nodemem sandbox` end to end, as a user runs it, and the `kubectl nodemem` plugin
//! through kubectl's own plugin mechanism against it:
//!
//! 1. The live view, driven in tmux: the screen shows the pools, the nodes and one
//!    node's cgroup values, then the ready text; Ctrl-C stops everything.
//! 2. Piped into another program (not a terminal), as a script or CI runs it: plain
//!    lines, as with `--no-ui` (the live view would print nothing there). Until ready,
//!    then with the kubectl and PATH it prints: `kubectl get nmp`, a policy of the same
//!    priority over running pools (no node moves), `kubectl nodemem
//!    status|explain|recommend|diff|pause|resume|rollback` (recommend on the observed
//!    batch pool). `diff` is checked against `nodemem simulate` on the same node and pods, and against the
//!    cgroup files the agents write after the change is applied; SIGINT then leaves no
//!    process and no directory behind.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::repo;

const READY_TIMEOUT: Duration = Duration::from_secs(300);

fn nodemem() -> &'static str {
    nodemem_e2e::nodemem().to_str().expect("a UTF-8 path")
}

/// What a command printed and how it exited.
struct Ran {
    stdout: String,
    stderr: String,
    code: i32,
}

/// A sandbox whose output goes to a pipe (no `--no-ui`: not being a terminal is
/// enough); its stdout lines are collected as they come.
struct NoUi {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl NoUi {
    fn start() -> Self {
        let mut child = Command::new(nodemem())
            .args(["sandbox", "--repo"])
            .arg(repo())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("start the sandbox");
        let lines = Arc::new(Mutex::new(Vec::new()));
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for l in BufReader::new(stream).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(l);
                }
            });
        }
        NoUi { child, lines }
    }

    fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    fn wait_for_line(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.contains(needle))
            {
                return l.clone();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the sandbox exited ({status}) before {needle:?}:\n{}",
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} from the sandbox in {timeout:?}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The value printed after `prefix` on the line holding it.
    fn printed(&mut self, prefix: &str) -> String {
        let line = self.wait_for_line(prefix, Duration::from_secs(5));
        line.split_once(prefix).unwrap().1.trim().to_string()
    }
}

impl Drop for NoUi {
    /// After a failed assertion too: Ctrl-C first (the sandbox cleans up after itself),
    /// then SIGKILL if it does not stop.
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        // SAFETY: signalling our own child.
        unsafe {
            libc::kill(pid, libc::SIGINT);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: signalling our own child's process group.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// The user's shell after following the ready text.
struct Shell {
    env: Vec<(String, String)>,
    dir: PathBuf,
}

impl Shell {
    fn run(&self, program: &str, args: &[&str]) -> Ran {
        let out = Command::new(program)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        Ran {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            code: out.status.code().unwrap_or(-1),
        }
    }

    /// `kubectl ARGS` that must succeed.
    fn kubectl(&self, args: &[&str]) -> String {
        let r = self.run("kubectl", args);
        assert_eq!(r.code, 0, "kubectl {args:?}: {}{}", r.stdout, r.stderr);
        r.stdout
    }

    fn json(&self, args: &[&str]) -> Value {
        serde_json::from_str(&self.kubectl(args))
            .unwrap_or_else(|e| panic!("kubectl {args:?}: not JSON: {e}"))
    }
}

fn wait_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Processes whose command line mentions `text`.
fn processes_mentioning(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(text) {
                out.push(cmd);
            }
        }
    }
    out
}

/// tmux on a server of this test's own (so it has this process's environment).
fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux")
        .args(["-L", &format!("nodemem-test-{}", std::process::id())])
        .args(args)
        .output()
        .expect("tmux (tests/scripts/install-prereqs.sh installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Ends the tmux server even when an assertion fails: Ctrl-C first, so the sandbox
/// cleans up after itself.
struct TmuxServer(String);

impl Drop for TmuxServer {
    fn drop(&mut self) {
        tmux(&["send-keys", "-t", &self.0, "C-c"]);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline
            && !tmux(&["capture-pane", "-p", "-t", &self.0]).contains("SANDBOX-EXIT")
        {
            std::thread::sleep(Duration::from_millis(200));
        }
        tmux(&["kill-server"]);
    }
}

/// The live view, as a person sees it in a 160x60 terminal.
fn live_view_in_tmux() {
    let session = format!("nodemem-sandbox-{}", std::process::id());
    let command = format!(
        "{} sandbox --repo {}; echo SANDBOX-EXIT $?; sleep 60",
        nodemem(),
        repo().display()
    );
    tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "160",
        "-y",
        "60",
        &command,
    ]);
    let _server = TmuxServer(session.clone());
    let screen = || tmux(&["capture-pane", "-p", "-t", &session]);
    let ready = wait_until("the live view's ready text", READY_TIMEOUT, || {
        let s = screen();
        (s.contains("sandbox ready") && s.contains("cgroup files on general-1 now:")).then_some(s)
    });
    // The tables of the live view, with values from general-1's cgroup files.
    for expected in [
        "POLICY",
        "MATCHED",
        "ROLLOUT",
        "numa-database-2",
        "MEMORY.HIGH",
        "cache-general-1",
        "Guaranteed",
        // The Guaranteed cache pod's memory.min, in the units every view uses.
        "1Gi",
        "export KUBECONFIG=",
        "kubectl nodemem explain",
    ] {
        assert!(
            ready.contains(expected),
            "{expected:?} not on screen:\n{ready}"
        );
    }
    let general = ready
        .lines()
        .find(|l| l.trim_start().starts_with("general "))
        .unwrap_or_else(|| panic!("no general row:\n{ready}"));
    assert!(general.contains("Complete"), "{general}");
    tmux(&["send-keys", "-t", &session, "C-c"]);
    let stopped = wait_until("the sandbox to stop", Duration::from_secs(60), || {
        let s = screen();
        s.contains("SANDBOX-EXIT").then_some(s)
    });
    assert!(stopped.contains("sandbox stopped"), "{stopped}");
    assert!(stopped.contains("SANDBOX-EXIT 0"), "{stopped}");
}

/// The NodeMemoryConfigs' revisions of the general pool, one per line.
fn general_revisions(shell: &Shell) -> String {
    shell.kubectl(&[
        "get",
        "nmc",
        "-o",
        "jsonpath={range .items[?(@.spec.policy==\"general\")]}{.spec.revision}{\"\\n\"}{end}",
    ])
}

/// Every cgroup file a diff row names holds the row's `side` ("from" or "to").
fn files_hold(tree: &Path, rows: &[Value], side: &str) {
    for row in rows {
        let path = tree
            .join(row["path"].as_str().unwrap())
            .join(row["file"].as_str().unwrap());
        let on_disk = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            Some(on_disk.trim()),
            row[side].as_str(),
            "{} ({side})",
            path.display()
        );
    }
}

/// The lines of a README code block that follow the command line `command`, up to the
/// block's end.
fn readme_block(readme: &str, command: &str) -> Vec<String> {
    readme
        .lines()
        .skip_while(|l| !l.starts_with(command))
        .skip(1)
        .take_while(|l| !l.starts_with("```") && !l.starts_with("$ "))
        .map(str::to_string)
        .collect()
}

/// A table's rows (after the header that starts with `header`, up to a blank line),
/// whitespace normalised.
fn table_rows(lines: &[String], header: &str) -> Vec<String> {
    lines
        .iter()
        .skip_while(|l| !l.trim_start().starts_with(header))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.trim() != "...")
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// The README's tour quotes real output: its figures are what the sandbox shows now.
/// The explain of numa-database-1 (every pod's values), the diff of the tour's `sed` of
/// the general policy (its first node's rows, the revisions and the summary) and the
/// revisions `status` prints.
fn readme_figures_hold(shell: &Shell) {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let quoted = readme_block(&readme, "$ kubectl nodemem explain numa-database-1");
    let live = shell.run("kubectl", &["nodemem", "explain", "numa-database-1"]);
    let live_lines: Vec<String> = live.stdout.lines().map(str::to_string).collect();
    let (mut q, mut l) = (
        table_rows(&quoted, "NAMESPACE"),
        table_rows(&live_lines, "NAMESPACE"),
    );
    q.sort();
    l.sort();
    assert!(!q.is_empty(), "README quotes no pods of numa-database-1");
    assert_eq!(
        q, l,
        "README's explain numa-database-1 is not what the sandbox shows:\n{}",
        live.stdout
    );

    // The tour's own sed line, run as a user runs it (from the repository).
    let sed = readme
        .lines()
        .find(|l| l.starts_with("$ sed ") && l.contains("examples/general/policy.yaml"))
        .expect("the tour's sed line")
        .trim_start_matches("$ ")
        .to_string();
    let ran = Command::new("sh")
        .args([
            "-c",
            &format!("{sed} && mv general.yaml {}", shell.dir.display()),
        ])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let edited = std::fs::read_to_string(shell.dir.join("general.yaml")).unwrap();
    assert!(
        edited.contains("minReadySeconds: 10"),
        "the tour keeps the sandbox's pace (minReadySeconds 10): {edited}"
    );
    let quoted = readme_block(&readme, "$ kubectl nodemem diff -f general.yaml");
    let live = shell.run("kubectl", &["nodemem", "diff", "-f", "general.yaml"]);
    assert_eq!(live.code, 1, "{}{}", live.stdout, live.stderr);
    let live_lines: Vec<String> = live.stdout.lines().map(str::to_string).collect();
    let normal = |l: &str| l.split_whitespace().collect::<Vec<_>>().join(" ");
    let live_normal: Vec<String> = live_lines.iter().map(|l| normal(l)).collect();
    for line in quoted
        .iter()
        .filter(|l| l.trim() != "..." && !l.trim().is_empty())
    {
        assert!(
            live_normal.contains(&normal(line)),
            "README's diff line {line:?} is not in what the sandbox prints:\n{}",
            live.stdout
        );
    }
    let quoted = readme_block(&readme, "$ kubectl nodemem status");
    let live = shell.run("kubectl", &["nodemem", "status"]);
    let revisions = |lines: &[String]| -> BTreeMap<String, String> {
        table_rows(lines, "POLICY")
            .iter()
            // The lines under the table name a policy with a colon (its classes).
            .filter(|r| !r.split(' ').next().unwrap_or("").ends_with(':'))
            .map(|r| {
                let cols: Vec<&str> = r.split(' ').collect();
                (cols[0].to_string(), cols[3].to_string())
            })
            .collect()
    };
    eprintln!("$ kubectl nodemem status\n{}", live.stdout);
    let live_lines: Vec<String> = live.stdout.lines().map(str::to_string).collect();
    assert_eq!(
        revisions(&quoted),
        revisions(&live_lines),
        "README's status revisions:\n{}",
        live.stdout
    );
}

/// Leaving a policy (a user's path): an override of the general pool at priority 1,
/// deleted once it runs on two nodes. The nodes go back through general's rollout, and
/// no node runs the values of neither policy for a moment: each general node's
/// container memory.high (path and both values from `kubectl nodemem diff -o json`) is
/// sampled every 20 ms throughout.
fn delete_an_override(shell: &Shell, roots: &BTreeMap<String, PathBuf>) {
    let overlap = "apiVersion: nodemem.io/v1alpha1\nkind: NodeMemoryPolicy\nmetadata:\n  name: overlap\nspec:\n  priority: 1\n  nodeSelector:\n    matchLabels:\n      nodemem.io/pool: general\n  memoryQoS:\n    throttlingFactor: 0.8\n    reservationPolicy: TieredReservation\n  rollout:\n    maxUnavailable: 1\n    minReadySeconds: 1\n";
    std::fs::write(shell.dir.join("overlap.yaml"), overlap).unwrap();
    let diff = shell.run(
        "kubectl",
        &["nodemem", "diff", "-f", "overlap.yaml", "-o", "json"],
    );
    assert_eq!(diff.code, 1, "{}{}", diff.stdout, diff.stderr);
    let diff: Value = serde_json::from_str(&diff.stdout).unwrap();
    // Per general node: a container's memory.high file, general's value, the override's.
    let mut watched: BTreeMap<String, (PathBuf, String, String)> = BTreeMap::new();
    for n in diff["nodes"].as_array().unwrap() {
        let node = n["node"].as_str().unwrap();
        let row = n["cgroups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| {
                c["file"] == "memory.high" && c["owner"].as_str().unwrap().matches('/').count() == 2
            })
            .unwrap_or_else(|| panic!("no container memory.high changes on {node}: {n}"));
        let file = roots[node]
            .join(row["path"].as_str().unwrap())
            .join("memory.high");
        watched.insert(
            node.to_string(),
            (
                file,
                row["from"].as_str().unwrap().to_string(),
                row["to"].as_str().unwrap().to_string(),
            ),
        );
    }
    assert_eq!(watched.len(), 3, "the general pool: {diff}");
    let high = |file: &Path| {
        std::fs::read_to_string(file)
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    let sampler = crate::common::Sampler::start(
        watched
            .iter()
            .map(|(n, (f, _, _))| (n.clone(), f.clone()))
            .collect(),
    );
    shell.kubectl(&["apply", "-f", "overlap.yaml"]);
    wait_until(
        "the override on two nodes",
        Duration::from_secs(120),
        || {
            let on = watched.values().filter(|(f, _, to)| high(f) == *to).count();
            (on >= 2).then_some(())
        },
    );
    shell.kubectl(&["delete", "nmp", "overlap", "--wait=false"]);
    wait_until(
        "the nodes back on general, the override gone",
        Duration::from_secs(180),
        || {
            let gone = shell.run("kubectl", &["get", "nmp", "overlap"]).code != 0;
            let back = watched.values().all(|(f, from, _)| high(f) == *from);
            (gone && back).then_some(())
        },
    );
    let samples = sampler.finish();
    let outside = crate::common::longest_outside(&samples, |node, v| {
        let (_, from, to) = &watched[node];
        v == from || v == to
    });
    let worst = outside.values().max().copied().unwrap_or_default();
    eprintln!(
        "sandbox: a deleted override's nodes went back to general; longest time a node ran the values of neither policy: {:.3} s over {} samples",
        worst.as_secs_f64(),
        samples.len()
    );
    assert_eq!(worst, Duration::ZERO, "{outside:?}");
}

/// An agent killed (SIGKILL) is started again as its DaemonSet would, with a line
/// saying so; the sandbox goes on.
fn an_agent_killed_comes_back(sandbox: &mut NoUi, shell: &Shell) {
    // Among this sandbox's own processes: another sandbox on the machine (a user's
    // `make sandbox`) runs agents with the same arguments.
    let sandbox_pid = sandbox.child.id();
    let pid = |name: &str| -> Option<i32> {
        let wanted = format!("--node-name {name} ");
        nodemem_testkit::process::descendants(sandbox_pid)
            .into_iter()
            .find(|(_, cmd)| cmd.contains(" agent ") && format!("{cmd} ").contains(&wanted))
            .map(|(pid, _)| pid as i32)
    };
    let before = pid("general-3").expect("the agent of general-3 runs");
    // SAFETY: a process of this test's sandbox.
    unsafe { libc::kill(before, libc::SIGKILL) };
    let line = sandbox.wait_for_line("agent general-3 exited", Duration::from_secs(30));
    assert!(
        line.contains("started again, as its DaemonSet would"),
        "{line}"
    );
    let after = wait_until(
        "the agent of general-3 again",
        Duration::from_secs(30),
        || pid("general-3"),
    );
    assert_ne!(after, before);
    // It reports its node again (a pass on start), and once that report is
    // minReadySeconds old the pool counts the node ready again.
    wait_until(
        "general's pool ready again",
        Duration::from_secs(90),
        || {
            let p = shell.json(&["get", "nmp", "general", "-o", "json"]);
            (p["status"]["readyNodes"] == 3).then_some(())
        },
    );
}

/// `nodemem sandbox` end to end: its live view driven in tmux (tables, one node's
/// cgroup values, the ready text, Ctrl-C), then `--no-ui` with what a user types
/// through the real kubectl and its plugin mechanism: `kubectl get nmp`, no drift in
/// `kubectl diff -k` after the rollout and a GitOps field manager's server-side apply
/// without conflicts, `kubectl nodemem status|explain` (JSON and tables, a NUMA node's
/// pinned pods), `diff` (exit 0/1/2; its values equal `nodemem simulate`'s on the same
/// node, pods and policy, and equal the cgroup files the agents write after `kubectl
/// apply`), `pause` (nothing moves) and `resume`, `rollback` (files back to the old
/// values, recorded in status, an Event; a second one refused), the ready text's "break
/// a node" command stopping a new rollout at the node it broke (`MaxFailures`,
/// `OOMKillBurst`), and a SIGINT that leaves no process or directory; the sandbox walks
/// the delete-an-override path on its general pool (0.000 s without values of either
/// policy), restarts an agent killed with SIGKILL as its DaemonSet would (the agent
/// found among the sandbox's own descendants, `nodemem_testkit::process::descendants`,
/// never by matching command lines across the machine) and waits for the pool to be
/// ready again, checks the figures the README's tour quotes (explain, diff, status)
/// against what it prints; the shell completes `kubectl nodemem` through the real
/// kubectl's plugin completion (subcommands, `-o` values, the cluster's policies and
/// nodes), a `--dry-run` (client and server) pauses nothing and says so, and the
/// plugin's write names `kubectl-nodemem` in `managedFields`.
#[test]
fn the_sandbox_runs_live_and_the_plugin_drives_it() {
    live_view_in_tmux();

    let mut sandbox = NoUi::start();
    sandbox.wait_for_line("sandbox ready", READY_TIMEOUT);
    let kubeconfig = sandbox.printed("export KUBECONFIG=");
    let path = sandbox
        .printed("export PATH=")
        .replace("$PATH", &std::env::var("PATH").unwrap());
    let bed_dir = sandbox.printed("Logs:");
    let mut roots = BTreeMap::new();
    for l in sandbox.output().lines() {
        // node general-1: pool general, cgroup root /tmp/..., agent log ...
        if let Some(rest) = l.strip_prefix("node ") {
            if let Some((node, more)) = rest.split_once(": pool ") {
                if let Some(root) = more.split(", cgroup root ").nth(1) {
                    let root = root.split(", agent log").next().unwrap();
                    roots.insert(node.to_string(), PathBuf::from(root));
                }
            }
        }
    }
    assert_eq!(roots.len(), 7, "{}", sandbox.output());
    let work = tempfile::tempdir().unwrap();
    let shell = Shell {
        env: vec![
            ("KUBECONFIG".into(), kubeconfig.clone()),
            ("PATH".into(), path),
        ],
        dir: work.path().to_path_buf(),
    };

    // kubectl get nmp shows every example policy rolled out.
    let nmp = shell.kubectl(&["get", "nmp", "--no-headers"]);
    for name in ["general", "numa-database", "batch", "database", "starter"] {
        let row = nmp
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} not in\n{nmp}"));
        assert!(row.contains("Complete"), "{row}");
    }

    readme_figures_hold(&shell);

    // The batch pool observes reclaim (examples/batch): its nodes say what they would
    // take, and nothing is written.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let out = shell
            .run("kubectl", &["nodemem", "explain", "batch-1"])
            .stdout;
        if out.contains("Reclaim (Observe, revision") && out.contains("would reclaim") {
            assert!(!out.contains("reclaimed "), "{out}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "batch-1 reports no reclaim in Observe:\n{out}"
        );
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
    // kubectl get -o wide says it too: the reclaim the policy asks, and the one the
    // node's agent reports running with its figures.
    let wide_row = |kind: &str, name: &str| -> (Vec<String>, Vec<String>) {
        let out = shell.kubectl(&["get", kind, name, "-o", "wide"]);
        let mut lines = out
            .lines()
            .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>());
        (
            lines.next().unwrap_or_default(),
            lines.next().unwrap_or_default(),
        )
    };
    let (header, row) = wide_row("nmp", "batch");
    assert_eq!(
        header.last().map(String::as_str),
        Some("RECLAIM"),
        "{header:?}"
    );
    assert_eq!(row.last().map(String::as_str), Some("Observe"), "{row:?}");
    let (header, row) = wide_row("nmc", "batch-1");
    assert!(
        header.ends_with(&["RECLAIM", "RECLAIMED", "RECLAIMABLE"].map(String::from)),
        "{header:?}"
    );
    let figures = &row[row.len() - 3..];
    assert_eq!(figures[0], "Observe", "{row:?}");
    assert_eq!(figures[1], "0", "Observe reclaims nothing: {row:?}");
    assert!(
        figures[2].parse::<i64>().is_ok(),
        "reclaimable bytes: {row:?}"
    );
    // Turning it Active (the example's file: its enforcement is Agent, the sandbox's
    // overlay observes) is said on each node, and not as a spec change of no effect.
    let batch = std::fs::read_to_string(repo().join("examples/batch/policy.yaml")).unwrap();
    let active = batch.replace("mode: Observe", "mode: Active");
    assert_ne!(batch, active);
    std::fs::write(shell.dir.join("batch-active.yaml"), active).unwrap();
    let diff = shell.run("kubectl", &["nodemem", "diff", "-f", "batch-active.yaml"]);
    assert_eq!(diff.code, 1, "{}{}", diff.stdout, diff.stderr);
    assert!(
        diff.stdout.contains("  reclaim Observe (stall target 1000 us/s, steps up to 10 permille every 6 s, back-off over 100 refaults/s, Burstable, BestEffort) -> Active (")
            && !diff.stdout.contains("spec.reclaim"),
        "{}",
        diff.stdout
    );

    // GitOps: after the rollout the tree shows no drift (the controller writes status
    // only), and a GitOps tool's server-side apply does not conflict with the
    // controller's field manager.
    let overlay = repo().join("deploy/sandbox");
    let overlay = overlay.to_str().unwrap();
    let drift = shell.run("kubectl", &["diff", "-k", overlay]);
    assert_eq!(
        drift.code, 0,
        "kubectl diff -k shows drift:\n{}{}",
        drift.stdout, drift.stderr
    );
    let ssa = shell.run(
        "kubectl",
        &[
            "apply",
            "--server-side",
            "--field-manager=argocd-controller",
            "-k",
            overlay,
        ],
    );
    assert_eq!(ssa.code, 0, "{}{}", ssa.stdout, ssa.stderr);
    let drift = shell.run(
        "kubectl",
        &[
            "diff",
            "--server-side",
            "--field-manager=argocd-controller",
            "-k",
            overlay,
        ],
    );
    assert_eq!(drift.code, 0, "{}{}", drift.stdout, drift.stderr);

    // The tie rule (issue 18; once the sandbox surprise): `bad3`, created after the
    // pools with the same (default) priority and a selector that takes every node.
    // The diff shows it would change no node; applied, it reports the tie and takes no
    // node; with a higher priority the diff names every node it would take.
    let bad3 = |priority: i32| {
        format!(
            "apiVersion: nodemem.io/v1alpha1\nkind: NodeMemoryPolicy\nmetadata:\n  name: bad3\nspec:\n  priority: {priority}\n  nodeSelector: {{}}\n  memoryQoS:\n    throttlingFactor: 0.5\n"
        )
    };
    std::fs::write(work.path().join("bad3.yaml"), bad3(0)).unwrap();
    std::fs::write(work.path().join("bad3-high.yaml"), bad3(1)).unwrap();
    let tie_diff = shell.run(
        "kubectl",
        &["nodemem", "diff", "-f", "bad3.yaml", "-o", "json"],
    );
    assert_eq!(tie_diff.code, 0, "{}{}", tie_diff.stdout, tie_diff.stderr);
    let take = shell.run(
        "kubectl",
        &["nodemem", "diff", "-f", "bad3-high.yaml", "-o", "json"],
    );
    assert_eq!(take.code, 1, "{}{}", take.stdout, take.stderr);
    let take: Value = serde_json::from_str(&take.stdout).unwrap();
    let taken: Vec<(String, String)> = take["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["policy"]["to"] == "bad3")
        .map(|n| {
            (
                n["node"].as_str().unwrap().to_string(),
                n["policy"]["from"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        taken,
        [
            ("batch-1".to_string(), "batch".to_string()),
            ("batch-2".into(), "batch".into()),
            ("general-1".into(), "general".into()),
            ("general-2".into(), "general".into()),
            ("general-3".into(), "general".into()),
        ],
        "numa-database (priority 200) keeps its nodes"
    );
    let owners = || {
        shell.kubectl(&[
            "get",
            "nmc",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.spec.policy}/{.spec.revision}{\"\\n\"}{end}",
        ])
    };
    let before = owners();
    shell.kubectl(&["apply", "-f", "bad3.yaml"]);
    let conflicting = wait_until("bad3 to report the tie", Duration::from_secs(60), || {
        let n = shell.kubectl(&[
            "get",
            "nmp",
            "bad3",
            "-o",
            "jsonpath={.status.conflictingNodes}",
        ]);
        (n.trim() == "5").then_some(n)
    });
    assert_eq!(conflicting.trim(), "5");
    assert_eq!(
        shell
            .kubectl(&[
                "get",
                "nmp",
                "bad3",
                "-o",
                "jsonpath={.status.matchedNodes}"
            ])
            .trim(),
        "0"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(owners(), before, "a tie moved a node");
    shell.kubectl(&["delete", "-f", "bad3.yaml"]);

    delete_an_override(&shell, &roots);
    an_agent_killed_comes_back(&mut sandbox, &shell);

    // status
    let status = shell.json(&["nodemem", "status", "-o", "json"]);
    let general = status["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "general")
        .unwrap();
    assert_eq!(
        (general["matched"].as_i64(), general["ready"].as_i64()),
        (Some(3), Some(3))
    );
    assert_eq!(general["state"], "Complete");
    assert!(status["failingNodes"].as_array().unwrap().is_empty());
    // kubectl's connection flags: --kubeconfig instead of KUBECONFIG, --context.
    let flags = Shell {
        env: shell
            .env
            .iter()
            .filter(|(k, _)| k != "KUBECONFIG")
            .cloned()
            .chain([("KUBECONFIG".to_string(), "/nonexistent".to_string())])
            .collect(),
        dir: shell.dir.clone(),
    };
    let by_flag = flags.run(
        "kubectl",
        &[
            "nodemem",
            "status",
            "-o",
            "json",
            "--kubeconfig",
            &kubeconfig,
        ],
    );
    assert_eq!(by_flag.code, 0, "{}", by_flag.stderr);
    assert_eq!(
        serde_json::from_str::<Value>(&by_flag.stdout).unwrap()["policies"],
        status["policies"]
    );
    let context = shell.kubectl(&["config", "current-context"]);
    let by_context = shell.run(
        "kubectl",
        &["nodemem", "status", "--context", context.trim()],
    );
    assert_eq!(by_context.code, 0, "{}", by_context.stderr);
    let no_context = shell.run(
        "kubectl",
        &["nodemem", "status", "--context", "no-such-context"],
    );
    assert_eq!(no_context.code, 1);
    assert!(
        no_context.stderr.contains("no-such-context"),
        "{}",
        no_context.stderr
    );
    let table = shell.kubectl(&["nodemem", "status"]);
    assert!(
        table.contains("POLICY") && table.contains("numa-database"),
        "{table}"
    );

    // recommend: the observed batch pool (its containers' memory use written into
    // their cgroups by the sandbox) gets a factor once six containers were seen for a
    // minute; report on batch-1 (1800Mi, limit 2Gi) needs 0.85.
    let recommended = wait_until("batch's recommendation", Duration::from_secs(120), || {
        let r = shell.run("kubectl", &["nodemem", "recommend", "batch"]);
        (r.code == 0 && r.stdout.contains("Recommended")).then_some(r.stdout)
    });
    assert!(
        recommended.contains("throttlingFactor 0.85 keeps 100% of 6 container(s) under memory.high (target 99%); the current 0.8 throttles 16.67%"),
        "{recommended}"
    );
    let batch = shell.kubectl(&["nodemem", "recommend", "batch", "-o", "yaml"]);
    assert!(batch.contains("throttlingFactor: 0.85"), "{batch}");
    assert!(batch.contains("enforcement: Observe"), "{batch}");
    let batch_nmc = shell.json(&["get", "nmc", "batch-1", "-o", "json"]);
    let observation = &batch_nmc["status"]["observation"];
    assert_eq!(observation["throttledContainers"], 1, "{observation:#}");
    assert_eq!(
        observation["worst"][0]["container"], "report",
        "{observation:#}"
    );

    // explain: the NUMA database node's Guaranteed pods are pinned, values as set.
    let explain = shell.json(&["nodemem", "explain", "numa-database-1", "-o", "json"]);
    assert_eq!(explain["policy"], "numa-database");
    assert_eq!(explain["rolloutState"], "Ready");
    assert!(explain["why"].as_str().unwrap().contains("only policy"));
    let postgres = explain["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "postgres-numa-database-1")
        .unwrap();
    assert_eq!(postgres["qosClass"], "Guaranteed");
    assert_eq!(postgres["memoryMin"], (6i64 << 30).to_string());
    assert!(
        matches!(postgres["cpusetMems"].as_str(), Some("0") | Some("1")),
        "{postgres}"
    );
    let yaml = shell.kubectl(&["nodemem", "explain", "general-1", "-o", "yaml"]);
    assert!(yaml.contains("policy: general"), "{yaml}");
    let missing = shell.run("kubectl", &["nodemem", "explain", "no-such-node"]);
    assert_eq!(missing.code, 1);
    assert!(
        missing.stderr.contains("node no-such-node not found"),
        "{}",
        missing.stderr
    );

    // diff: the unchanged example changes nothing; a lower factor changes memory.high.
    let same = shell.run(
        "kubectl",
        &[
            "nodemem",
            "diff",
            "-f",
            repo()
                .join("examples/general/policy.yaml")
                .to_str()
                .unwrap(),
        ],
    );
    // The example as in Git differs from the sandbox's overlay in its rollout pace
    // only: the diff says so (a change, exit 1) and no value changes.
    assert_eq!(same.code, 1, "{}{}", same.stdout, same.stderr);
    assert!(
        same.stdout
            .contains("policy general: spec.rollout.minReadySeconds 10 -> 60")
            && same
                .stdout
                .contains("0 node(s) change, 0 cgroup value(s) change"),
        "{}",
        same.stdout
    );
    let original = std::fs::read_to_string(repo().join("examples/general/policy.yaml")).unwrap();
    // With the overlay's pace, nothing changes.
    std::fs::write(
        shell.dir.join("general-paced.yaml"),
        original.replace("minReadySeconds: 60", "minReadySeconds: 10"),
    )
    .unwrap();
    let paced = shell.run("kubectl", &["nodemem", "diff", "-f", "general-paced.yaml"]);
    assert_eq!(paced.code, 0, "{}{}", paced.stdout, paced.stderr);
    assert!(paced.stdout.contains("No changes"), "{}", paced.stdout);
    // A lower factor (and the sandbox's short minReadySeconds, as its overlay sets).
    let changed = original
        .replace("throttlingFactor: 0.9", "throttlingFactor: 0.7")
        .replace("minReadySeconds: 60", "minReadySeconds: 5");
    assert_ne!(original, changed);
    std::fs::write(work.path().join("general.yaml"), &changed).unwrap();
    let bad = original.replace("throttlingFactor: 0.9", "throttlingFactor: 1.5");
    std::fs::write(work.path().join("bad.yaml"), &bad).unwrap();
    let refused = shell.run("kubectl", &["nodemem", "diff", "-f", "bad.yaml"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("throttlingFactor"),
        "{}",
        refused.stderr
    );
    let diff = shell.run(
        "kubectl",
        &["nodemem", "diff", "-f", "general.yaml", "-o", "json"],
    );
    assert_eq!(diff.code, 1, "{}{}", diff.stdout, diff.stderr);
    let diff: Value = serde_json::from_str(&diff.stdout).unwrap();
    let nodes: Vec<&str> = diff["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["general-1", "general-2", "general-3"]);
    let people = shell.run("kubectl", &["nodemem", "diff", "-f", "general.yaml"]);
    assert_eq!(people.code, 1);
    assert!(
        people
            .stdout
            .contains("node general-1: policy general -> general"),
        "{}",
        people.stdout
    );

    // The diff agrees with simulate on the same node, pods and policy.
    let node_doc = shell.kubectl(&["get", "node", "general-1", "-o", "yaml"]);
    std::fs::write(work.path().join("node.yaml"), node_doc).unwrap();
    let pods_doc = shell.kubectl(&[
        "get",
        "pods",
        "-A",
        "--field-selector",
        "spec.nodeName=general-1",
        "-o",
        "yaml",
    ]);
    std::fs::write(work.path().join("pods.yaml"), pods_doc).unwrap();
    let sim = shell.run(
        nodemem(),
        &[
            "simulate",
            "--policy",
            "general.yaml",
            "--node",
            "node.yaml",
            "--pods",
            "pods.yaml",
            "-o",
            "json",
        ],
    );
    assert_eq!(sim.code, 0, "{}", sim.stderr);
    let sim_json: Value = serde_json::from_str(&sim.stdout).unwrap();
    let predicted = nodemem_testkit::simulate::predicted_values(&sim_json);
    let g1 = &diff["nodes"][0];
    // Both computed by the rules the node's kubelet chooses, and both say which.
    let rules = g1["kubeletRules"].as_str().unwrap_or_default();
    assert!(rules.contains(" rules: "), "{g1}");
    assert_eq!(sim_json["kubeletRules"].as_str(), Some(rules));
    assert!(
        people.stdout.contains(&format!("  kubelet {rules}\n")),
        "{}",
        people.stdout
    );
    let rows = g1["cgroups"].as_array().unwrap();
    assert!(rows.len() >= 4, "{g1}");
    for row in rows {
        let key = (
            row["owner"].as_str().unwrap().to_string(),
            row["file"].as_str().unwrap().to_string(),
        );
        assert_eq!(
            predicted.get(&key).map(String::as_str),
            row["to"].as_str(),
            "simulate and diff disagree on {key:?}"
        );
    }

    // kubectl completes the plugin's words through kubectl_complete-nodemem: its
    // subcommands, and the cluster's policies and nodes.
    let complete = |words: &[&str]| {
        let mut args = vec!["__complete", "nodemem"];
        args.extend(words);
        shell.kubectl(&args)
    };
    let subcommands = complete(&[""]);
    assert!(
        subcommands.lines().any(|l| l.starts_with("pause\t"))
            && subcommands.lines().any(|l| l.starts_with("explain\t"))
            && subcommands.lines().last() == Some(":4"),
        "{subcommands}"
    );
    let policies = complete(&["pause", "gen"]);
    assert_eq!(policies.lines().collect::<Vec<_>>(), ["general", ":4"]);
    let nodes = complete(&["explain", ""]);
    assert!(nodes.lines().any(|l| l == "general-1"), "{nodes}");
    let formats = complete(&["status", "-o", ""]);
    assert!(formats.lines().any(|l| l.starts_with("yaml")), "{formats}");

    // A dry run (the apiserver's, or none sent) says so and pauses nothing.
    let paused = || {
        shell.kubectl(&[
            "get",
            "nmp",
            "general",
            "-o",
            "jsonpath={.spec.rollout.paused}",
        ])
    };
    let before = paused();
    assert_ne!(before, "true");
    for (flag, said) in [
        ("--dry-run=server", "general paused (server dry run)"),
        ("--dry-run", "general paused (dry run)"),
    ] {
        let out = shell.kubectl(&["nodemem", "pause", "general", flag]);
        assert!(out.contains(said), "{out}");
        assert_eq!(paused(), before, "{flag} paused it");
    }
    // pause: the applied change waits; resume: it rolls out.
    assert!(shell
        .kubectl(&["nodemem", "pause", "general"])
        .contains("general paused"));
    // The plugin's write is its own in managedFields (and the audit log).
    let managers = shell.json(&[
        "get",
        "nmp",
        "general",
        "--show-managed-fields",
        "-o",
        "json",
    ]);
    assert!(
        managers["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["manager"] == "kubectl-nodemem"),
        "{managers}"
    );
    let first_revision = general["revision"].as_str().unwrap().to_string();
    shell.kubectl(&["apply", "-f", "general.yaml"]);
    let new_revision = g1["revision"]["to"].as_str().unwrap().to_string();
    wait_until("the Paused state", Duration::from_secs(60), || {
        let s = shell.json(&["nodemem", "status", "-o", "json"]);
        let p = s["policies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "general")
            .cloned()?;
        (p["state"] == "Paused" && p["revision"] == new_revision.as_str()).then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    let configs = general_revisions(&shell);
    assert!(
        configs.lines().all(|r| r == first_revision),
        "paused, yet a node moved:\n{configs}"
    );
    assert!(shell
        .kubectl(&["nodemem", "resume", "general"])
        .contains("general resumed"));
    // Every node runs `revision` and the policy's `condition` is True with `reason`:
    // Ready once the spec runs, Stalled RolledBack once it is rolled back and the pool
    // is back on the revision before (RollingBack on the way).
    let settled = |revision: &str, condition: &str, reason: &str| {
        let s = shell.json(&["get", "nmp", "general", "-o", "json"]);
        let said = s["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == condition && c["status"] == "True" && c["reason"] == reason);
        let configs = general_revisions(&shell);
        (said && configs.lines().count() == 3 && configs.lines().all(|r| r == revision))
            .then_some(())
    };
    wait_until(
        "the new revision everywhere",
        Duration::from_secs(120),
        || settled(&new_revision, "Ready", "AllNodesReady"),
    );

    // What the agents wrote is what diff said, file by file.
    let tree = &roots["general-1"];
    files_hold(tree, rows, "to");

    // rollback: back to the first revision, recorded in status; a second one is refused.
    let out = shell.kubectl(&["nodemem", "rollback", "general"]);
    assert!(
        out.contains(&format!(
            "rolling back from revision {new_revision} to {first_revision}"
        )),
        "{out}"
    );
    wait_until("the rollback", Duration::from_secs(120), || {
        settled(&first_revision, "Stalled", "RolledBack")
    });
    let policy = shell.json(&["get", "nmp", "general", "-o", "json"]);
    assert_eq!(
        policy["status"]["rolledBackRevision"],
        new_revision.as_str()
    );
    let said = |type_: &str| {
        policy["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == type_)
            .map(|c| (c["status"].clone(), c["reason"].clone()))
            .unwrap_or_else(|| panic!("no {type_} in {policy}"))
    };
    // The spec does not run: Ready stays False, and nothing moves without a person.
    for (type_, status) in [
        ("Degraded", "True"),
        ("Stalled", "True"),
        ("Ready", "False"),
    ] {
        assert_eq!(
            said(type_),
            (Value::from(status), Value::from("RolledBack")),
            "{type_}"
        );
    }
    files_hold(tree, rows, "from");
    let again = shell.run("kubectl", &["nodemem", "rollback", "general"]);
    assert_eq!(again.code, 1);
    assert!(
        again.stderr.contains("already rolled back"),
        "{}",
        again.stderr
    );
    let events = shell.kubectl(&[
        "get",
        "events",
        "-A",
        "--field-selector",
        "reason=RollbackRequested",
        "-o",
        "name",
    ]);
    assert!(!events.trim().is_empty(), "no RollbackRequested event");

    // The ready text's "break a node": a new revision, then OOM kills written into
    // general-2's pods while it updates stop the rollout (failurePolicy: Pause). The
    // revision waits 20 s on each node instead of the 5 s set above: general-2 must
    // not count as ready before the break lands (on a loaded machine a few kubectl
    // calls took longer than 5 s, and general-3 moved before the failure was seen).
    let break_command = sandbox.printed("    for f in ");
    let break_command = format!("for f in {break_command}");
    shell.kubectl(&[
        "patch",
        "nmp",
        "general",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"memoryQoS":{"throttlingFactor":0.75},"rollout":{"minReadySeconds":20}}}"#,
    ]);
    let third = wait_until("a third revision", Duration::from_secs(30), || {
        let r = shell.kubectl(&["get", "nmp", "general", "-o", "jsonpath={.status.revision}"]);
        (r != first_revision && r != new_revision && !r.is_empty()).then_some(r)
    });
    wait_until("general-2 to update", Duration::from_secs(150), || {
        let r = shell.kubectl(&["get", "nmc", "general-2", "-o", "jsonpath={.spec.revision}"]);
        (r == third).then_some(())
    });
    let broke = shell.run("bash", &["-c", &break_command]);
    assert_eq!(broke.code, 0, "{}", broke.stderr);
    let failing = wait_until("the rollout to stop", Duration::from_secs(60), || {
        let s = shell.json(&["nodemem", "status", "-o", "json"]);
        let p = s["policies"]
            .as_array()?
            .iter()
            .find(|p| p["name"] == "general")?
            .clone();
        (p["state"] == "MaxFailures").then_some(s["failingNodes"].clone())
    });
    assert_eq!(failing[0]["node"], "general-2", "{failing}");
    assert_eq!(failing[0]["reason"], "OOMKillBurst", "{failing}");
    let general3 = shell.kubectl(&["get", "nmc", "general-3", "-o", "jsonpath={.spec.revision}"]);
    assert_ne!(general3, third, "general-3 must not move after the failure");

    // Ctrl-C: every process ends, every directory goes.
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(sandbox.child.id() as i32, libc::SIGINT);
    }
    let status = wait_until("the sandbox to exit", Duration::from_secs(60), || {
        sandbox.child.try_wait().unwrap()
    });
    assert!(status.success(), "{status}\n{}", sandbox.output());
    assert!(sandbox.output().contains("sandbox stopped"));
    let cp_dir = Path::new(&kubeconfig).parent().unwrap().to_path_buf();
    for dir in std::iter::once(PathBuf::from(&bed_dir))
        .chain(std::iter::once(cp_dir.clone()))
        .chain(roots.values().cloned())
    {
        assert!(!dir.exists(), "{} is left behind", dir.display());
    }
    let left = processes_mentioning(&cp_dir.display().to_string());
    assert!(left.is_empty(), "processes left behind: {left:?}");
}
