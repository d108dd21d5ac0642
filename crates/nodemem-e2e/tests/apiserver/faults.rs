//! Faults with real agent processes on the real apiserver (issue 18): an agent killed
//! (SIGKILL) in the middle of applying.
//!
//! The write sequence is the agent's own record (`nodemem_apply::write` at trace
//! level, logged after the kernel took each value), checked against the tree: the tree
//! frozen after the kill must be the record replayed on the tree as it was before the
//! change (at most the one write in flight unrecorded), and the tree after the restart
//! must be the whole record replayed. Every prefix of that sequence is then checked:
//! no cgroup's memory.min or memory.low may ever exceed its parent's.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write as _};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::Client;
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_testkit::kubelet::FakeKubelet;
use nodemem_testkit::Identity;
use serde_json::{json, Value};

use crate::agent::{
    agent_command, applied_with_logs, expected_on, node_without_kubelet, set_config_on,
    tree_mismatches,
};
use crate::common::{admin, cluster, create_pod, eventually};

const NODE: &str = "fault-kill-1";
const NS: &str = "fault-kill";
const PROTECTION: [&str; 2] = ["memory.min", "memory.low"];
/// The pipe between the agent's stderr and the test: one page, so the agent runs at
/// most a few log lines ahead of the reader that kills it.
const PIPE_BYTES: libc::c_int = 4096;

/// One write the agent reports having made.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Wrote {
    cgroup: String,
    file: String,
    value: String,
}

fn parse_write(line: &str) -> Option<Wrote> {
    let v: Value = serde_json::from_str(line).ok()?;
    if v["target"] != "nodemem_apply::write" {
        return None;
    }
    let field = |k: &str| v["fields"][k].as_str().map(str::to_string);
    Some(Wrote {
        cgroup: field("cgroup")?,
        file: field("file")?,
        value: field("value")?,
    })
}

/// What the reader thread has seen of an agent's stderr.
#[derive(Default)]
struct Seen {
    lines: Vec<String>,
    writes: usize,
    /// SIGKILL once `writes` reaches this.
    kill_at: Option<usize>,
}

/// The agent binary with its stderr read line by line by the test: every line kept (and
/// copied to a log file), the writes counted, and SIGKILL sent right after the n-th
/// write when armed.
struct PipedAgent {
    child: Child,
    log: PathBuf,
    seen: Arc<Mutex<Seen>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl PipedAgent {
    fn spawn(tree_root: &Path, dir: &Path, kubeconfig: &Path, log: PathBuf) -> PipedAgent {
        let mut child = agent_command(NODE, tree_root, dir, kubeconfig)
            .args(["--log-format", "json"])
            .env("RUST_LOG", "info,nodemem_apply::write=trace")
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the agent");
        let stderr = child.stderr.take().unwrap();
        // SAFETY: resizing a pipe we own; a failure leaves the default size (the
        // check that the kill came mid-pass then tells).
        unsafe { libc::fcntl(stderr.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES) };
        let seen = Arc::new(Mutex::new(Seen::default()));
        let pid = child.id() as libc::pid_t;
        let reader = {
            let (seen, log) = (seen.clone(), log.clone());
            std::thread::spawn(move || {
                let mut file = std::fs::File::create(&log).unwrap();
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    let _ = writeln!(file, "{line}");
                    let mut seen = seen.lock().unwrap();
                    if parse_write(&line).is_some() {
                        seen.writes += 1;
                        if seen.kill_at.is_some_and(|n| seen.writes >= n) {
                            // SAFETY: our own child, not yet waited for.
                            unsafe { libc::kill(pid, libc::SIGKILL) };
                            seen.kill_at = None;
                        }
                    }
                    seen.lines.push(line);
                }
            })
        };
        PipedAgent {
            child,
            log,
            seen,
            reader: Some(reader),
        }
    }

    /// Counts writes from now: SIGKILL right after the `n`-th.
    fn arm_kill(&self, n: usize) {
        let mut seen = self.seen.lock().unwrap();
        seen.kill_at = Some(seen.writes + n);
    }

    fn line_count(&self) -> usize {
        self.seen.lock().unwrap().lines.len()
    }

    /// Writes recorded in lines `from..`.
    fn writes_since(&self, from: usize) -> Vec<Wrote> {
        self.seen.lock().unwrap().lines[from..]
            .iter()
            .filter_map(|l| parse_write(l))
            .collect()
    }

    fn writes(&self) -> Vec<Wrote> {
        self.writes_since(0)
    }

    fn errors(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .lines
            .iter()
            .filter(|l| l.contains(r#""level":"ERROR""#))
            .cloned()
            .collect()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the process to end (after a kill) and for its last lines.
    fn wait_dead(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while matches!(self.child.try_wait(), Ok(None)) {
            assert!(
                Instant::now() < deadline,
                "the agent did not die; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
    }
}

impl Drop for PipedAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// memory.min and memory.low of every cgroup below the root: (path, file) -> bytes.
type Protection = BTreeMap<(String, String), u64>;

fn read_protection(root: &Path) -> Protection {
    fn walk(root: &Path, rel: &str, out: &mut Protection) {
        let dir = if rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(rel)
        };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name().to_string_lossy().to_string();
            let child = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            for file in PROTECTION {
                if let Ok(text) = std::fs::read_to_string(root.join(&child).join(file)) {
                    let bytes = text.trim().parse().unwrap_or_else(|_| {
                        panic!("{child}/{file} holds {text:?}, not a number of bytes")
                    });
                    out.insert((child.clone(), file.to_string()), bytes);
                }
            }
            walk(root, &child, out);
        }
    }
    let mut out = Protection::new();
    walk(root, "", &mut out);
    out
}

fn parent(path: &str) -> Option<&str> {
    path.rsplit_once('/').map(|(p, _)| p)
}

/// The cgroup's protection in `file` when it exceeds its parent's.
fn above_parent(state: &Protection, path: &str, file: &str) -> Option<String> {
    let parent = parent(path)?;
    let value = |p: &str| state.get(&(p.to_string(), file.to_string())).copied();
    let (c, p) = (value(path)?, value(parent)?);
    (c > p).then(|| format!("{path}/{file} = {c} > {parent}/{file} = {p}"))
}

/// After a write to `path`'s `file`: the cgroup itself against its parent, and its
/// direct children against it.
fn violations_around(state: &Protection, path: &str, file: &str) -> Vec<String> {
    let prefix = format!("{path}/");
    let children = state
        .range((prefix.clone(), String::new())..)
        .take_while(|((p, _), _)| p.starts_with(&prefix))
        .filter(|((p, f), _)| f == file && parent(p) == Some(path))
        .map(|((p, _), _)| p.as_str());
    std::iter::once(path)
        .chain(children)
        .filter_map(|p| above_parent(state, p, file))
        .collect()
}

fn all_violations(state: &Protection) -> Vec<String> {
    state
        .keys()
        .filter_map(|(path, file)| above_parent(state, path, file))
        .collect()
}

/// Replays `writes` (protection files only) on `state`; after each, the violations it
/// created, with the write's index.
fn replay(state: &mut Protection, writes: &[Wrote]) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    for (i, w) in writes.iter().enumerate() {
        if !PROTECTION.contains(&w.file.as_str()) {
            continue;
        }
        let bytes = w.value.parse().unwrap_or_else(|_| panic!("{w:?}"));
        state.insert((w.cgroup.clone(), w.file.clone()), bytes);
        let v = violations_around(state, &w.cgroup, &w.file);
        if !v.is_empty() {
            out.push((i, v));
        }
    }
    out
}

/// A deterministic sequence of kill points, seeded from the clock and printed so a
/// failing run can be repeated (NODEMEM_FAULT_SEED).
fn kill_points(rounds: usize, max: usize) -> (u64, Vec<usize>) {
    let seed = std::env::var("NODEMEM_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    let mut x = seed | 1;
    let points = (0..rounds)
        .map(|_| {
            // xorshift64
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            1 + (x % max as u64) as usize
        })
        .collect();
    (seed, points)
}

/// What the node computation predicts for `memory_qos` on this node's pods.
async fn predicted(client: &Client, memory_qos: &Value) -> BTreeMap<(String, String), String> {
    expected_on(client, NODE, CgroupDriver::Systemd, memory_qos.clone()).await
}

/// An agent over 150 pods killed with SIGKILL at seeded random points in six
/// reservation-policy changes converges after each restart without an error, and its
/// own trace record of every write, checked against the frozen tree at the kill and the
/// tree after the restart, never protects a child above its parent at any prefix.
#[tokio::test]
async fn an_agent_killed_mid_apply_converges_and_never_protects_a_child_above_its_parent() {
    let cp = cluster();
    let client = admin().await;
    let tree = node_without_kubelet(&client, NODE, NS, CgroupDriver::Systemd, 2).await;
    let _kubelet = FakeKubelet::start(
        client.clone(),
        BTreeMap::from([(NODE.to_string(), tree.clone())]),
    );
    let kubeconfig = cp.kubeconfig(&Identity::Agent(NODE.into())).await.unwrap();
    // 150 pods of every QoS class: a pass from one reservation policy to another is
    // hundreds of writes, so a kill lands inside it.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    const PODS: usize = 150;
    for i in 0..PODS {
        let resources = match i % 3 {
            0 => json!({"requests": {"memory": "16Mi"}, "limits": {"memory": "64Mi"}}),
            1 => json!({"requests": {"cpu": "10m", "memory": "16Mi"},
                        "limits": {"cpu": "10m", "memory": "16Mi"}}),
            _ => json!({}),
        };
        create_pod(
            &pods,
            json!({"metadata": {"name": format!("p{i}")},
                "spec": {"nodeName": NODE, "containers": [
                    {"name": "app", "image": "x", "resources": resources},
                    {"name": "side", "image": "x", "resources": resources}]}}),
        )
        .await;
    }
    eventually(
        "every pod running",
        Duration::from_secs(120),
        &String::new,
        async || {
            let listed = pods.list(&ListParams::default()).await.ok()?.items;
            let running = listed
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            (running == PODS).then_some(())
        },
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let spawn = |n: usize| {
        PipedAgent::spawn(
            tree.root(),
            dir.path(),
            &kubeconfig,
            dir.path().join(format!("agent-{n}.log")),
        )
    };
    let settings = [
        json!({"throttlingFactor": 0.9, "reservationPolicy": "None"}),
        json!({"throttlingFactor": 0.8, "reservationPolicy": "TieredReservation"}),
        json!({"throttlingFactor": 0.7, "reservationPolicy": "HardReservation"}),
        json!({"throttlingFactor": 0.6, "reservationPolicy": "None"}),
        json!({"throttlingFactor": 0.5, "reservationPolicy": "HardReservation"}),
        json!({"throttlingFactor": 0.9, "reservationPolicy": "TieredReservation"}),
        json!({"throttlingFactor": 0.8, "reservationPolicy": "None"}),
    ];
    set_config_on(&client, NODE, "kill-0", settings[0].clone()).await;
    let mut agent = spawn(0);
    applied_with_logs(&client, NODE, "kill-0", &|| agent.log()).await;
    let wrong = tree_mismatches(&tree, &predicted(&client, &settings[0]).await);
    assert!(wrong.is_empty(), "{wrong:#?}\n{}", agent.log());

    let (seed, points) = kill_points(settings.len() - 1, 120);
    eprintln!("kill points {points:?} (NODEMEM_FAULT_SEED={seed})");
    let (mut summary, mut mid_pass_kills) = (Vec::new(), 0);
    for (round, memory_qos) in settings.iter().enumerate().skip(1) {
        let revision = format!("kill-{round}");
        let before = read_protection(tree.root());
        assert_eq!(all_violations(&before), Vec::<String>::new());
        let from_line = agent.line_count();
        agent.arm_kill(points[round - 1]);
        set_config_on(&client, NODE, &revision, memory_qos.clone()).await;
        agent.wait_dead();

        // The record up to the kill, replayed, is the frozen tree (plus at most the
        // one write the kernel took before its log line was written).
        let mut killed = agent.writes_since(from_line);
        let at_kill = read_protection(tree.root());
        let mut replayed = before.clone();
        replay(&mut replayed, &killed);
        let unrecorded: Vec<_> = at_kill
            .iter()
            .filter(|(k, v)| replayed.get(*k) != Some(*v))
            .collect();
        assert!(
            unrecorded.len() <= 1,
            "round {round}: the tree differs from the agent's record in {unrecorded:?}"
        );
        killed.extend(unrecorded.iter().map(|((cgroup, file), value)| Wrote {
            cgroup: cgroup.clone(),
            file: file.clone(),
            value: value.to_string(),
        }));
        let expected = predicted(&client, memory_qos).await;
        let mid_pass = !tree_mismatches(&tree, &expected).is_empty();
        mid_pass_kills += usize::from(mid_pass);

        // Restarted, it converges without an error.
        let next = spawn(round);
        let killed_agent = std::mem::replace(&mut agent, next);
        applied_with_logs(&client, NODE, &revision, &|| agent.log()).await;
        let wrong = tree_mismatches(&tree, &expected);
        assert!(
            wrong.is_empty(),
            "round {round}: {wrong:#?}\n{}",
            agent.log()
        );
        assert_eq!(agent.errors(), Vec::<String>::new(), "round {round}");

        // Every prefix of the whole sequence, from the tree before the change.
        let mut sequence = killed.clone();
        sequence.extend(agent.writes());
        let mut state = before.clone();
        let violations = replay(&mut state, &sequence);
        assert!(
            violations.is_empty(),
            "round {round} (seed {seed}): a child protected above its parent after write \
             {:?}\nkilled agent log:\n{}",
            violations.first(),
            killed_agent.log()
        );
        assert_eq!(
            state,
            read_protection(tree.root()),
            "round {round}: the record replayed is not the tree"
        );
        summary.push(format!(
            "round {round}: killed after {} writes ({}), {} writes after the restart",
            killed.len(),
            if mid_pass { "mid-pass" } else { "pass done" },
            agent.writes().len()
        ));
        drop(killed_agent);
    }
    eprintln!("{}", summary.join("\n"));
    assert!(
        mid_pass_kills * 2 >= summary.len(),
        "fewer than half the kills came mid-pass, the test proved little:\n{}",
        summary.join("\n")
    );
}

/// The check itself: a child raised before its parent, or a parent lowered before its
/// child, is caught at the write that does it; the planner's order is not.
#[test]
fn the_replay_catches_a_child_protected_above_its_parent() {
    let w = |cgroup: &str, value: u64| Wrote {
        cgroup: cgroup.into(),
        file: "memory.min".into(),
        value: value.to_string(),
    };
    let before: Protection = [("k", 0), ("k/b", 0), ("k/b/p", 0), ("k/bx", 0)]
        .into_iter()
        .map(|(p, v)| ((p.to_string(), "memory.min".to_string()), v))
        .collect();
    let raise_in_order = [w("k", 30), w("k/b", 20), w("k/b/p", 10)];
    assert_eq!(replay(&mut before.clone(), &raise_in_order), vec![]);
    let child_first = [w("k", 30), w("k/b/p", 10), w("k/b", 20)];
    assert_eq!(
        replay(&mut before.clone(), &child_first),
        vec![(
            1,
            vec!["k/b/p/memory.min = 10 > k/b/memory.min = 0".to_string()]
        )]
    );
    let mut raised = before.clone();
    replay(&mut raised, &raise_in_order);
    let parent_lowered_first = [w("k/b", 0), w("k/b/p", 0)];
    assert_eq!(
        replay(&mut raised.clone(), &parent_lowered_first),
        vec![(
            0,
            vec!["k/b/p/memory.min = 10 > k/b/memory.min = 0".to_string()]
        )]
    );
    // A sibling whose name extends the parent's is not its child.
    let sibling = [w("k", 5), w("k/bx", 5)];
    assert_eq!(replay(&mut before.clone(), &sibling), vec![]);
    assert_eq!(all_violations(&raised), Vec::<String>::new());
}
