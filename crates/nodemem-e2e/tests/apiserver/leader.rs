//! One leader at a time (issue 44, item 2): two controller replicas as real processes,
//! one of them with its clock an hour ahead (libfaketime, Debian's `faketime`), the
//! leader killed, and a leader whose way to the apiserver is cut (the test bed's
//! proxy) while a policy edit waits to be written. The apiserver's audit log names the
//! replica behind every write (each has its own client certificate): the writers'
//! sequence must read as leadership terms that never overlap, each handoff at least a
//! Lease duration after the last write of the replica before.

use std::path::Path;
use std::time::{Duration, Instant};

use kube::api::{Api, Patch, PatchParams};
use nodemem_testkit::control_plane::{AuditWrite, Identity, Options};
use nodemem_testkit::proxy::TcpProxy;
use serde_json::json;

use crate::common::{
    controller_command, create_policy, eventually, lease_holder, own_control_plane_with, policies,
    pool_nodes,
};

/// The replicas' Lease duration: renew deadline 4 s, retry 0.8 s.
const LEASE_SECONDS: u64 = crate::common::CONTROLLER_LEASE_SECONDS;

/// A replica in a process group of its own: `faketime` runs the controller as its
/// child, and killing the replica kills both.
struct Replica {
    child: std::process::Child,
}

impl Replica {
    fn kill(&mut self) {
        // SAFETY: kill(2) on the process group of a child this process started.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn(kubeconfig: &Path, identity: &str, log: &Path, clock_ahead: bool) -> Replica {
    let nodemem = nodemem_e2e::nodemem();
    let command = if clock_ahead {
        // faketime's advanced format: every clock of the process one hour ahead (the
        // monotonic clock too, by the same constant).
        let mut c = std::process::Command::new("faketime");
        c.args(["-f", "+1h"]).arg(nodemem);
        c
    } else {
        std::process::Command::new(nodemem)
    };
    use std::os::unix::process::CommandExt;
    let child = controller_command(command, kubeconfig, identity, "nodemem:test", log)
        .process_group(0)
        .spawn()
        .expect("start the controller (faketime is a prerequisite: make prereqs)");
    Replica { child }
}

/// Successful writes, by replica, in the order the apiserver received them.
fn writes(all: &[AuditWrite]) -> Vec<&AuditWrite> {
    let mut w: Vec<&AuditWrite> = all
        .iter()
        .filter(|w| w.user.starts_with("replica-") && w.code < 400)
        .collect();
    w.sort_by_key(|w| w.received);
    w
}

/// The writers' terms: (replica, first write, last write, writes), in order.
fn terms(writes: &[&AuditWrite]) -> Vec<(String, AuditWrite, AuditWrite, usize)> {
    let mut out: Vec<(String, AuditWrite, AuditWrite, usize)> = Vec::new();
    for w in writes {
        match out.last_mut() {
            Some((user, _, last, n)) if *user == w.user => {
                *last = (*w).clone();
                *n += 1;
            }
            _ => out.push((w.user.clone(), (*w).clone(), (*w).clone(), 1)),
        }
    }
    out
}

fn seconds_between(a: &AuditWrite, b: &AuditWrite) -> f64 {
    (b.received.as_millisecond() - a.received.as_millisecond()) as f64 / 1000.0
}

/// Two controller replicas as real processes with their own client certificates, one of
/// them under Debian's `faketime -f +1h`, and a control plane whose audit log records
/// every write (`control_plane::Options::audit_writes`): the replica an hour ahead
/// writes nothing while the leader renews; the leader killed, restarted, the other
/// killed, then the leader cut off by the proxy while an edit waits: it stops at its
/// renew deadline, and the apiserver's writes read as four terms a b a b, never
/// interleaved, each at least a Lease duration after the last write before it; the
/// replica an hour ahead fails no node at its takeover.
#[tokio::test]
async fn replicas_with_clocks_an_hour_apart_and_a_cut_off_leader_never_write_at_once() {
    let cp = own_control_plane_with(Options {
        audit_writes: true,
        ..Options::default()
    })
    .await;
    let admin = cp.client(&Identity::Admin).await.unwrap();
    pool_nodes(&admin, &[("lead-1", "lead"), ("lead-2", "lead")]).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = |name: &str| {
        let cp = &cp;
        let name = name.to_string();
        async move {
            cp.kubeconfig(&Identity::User {
                name,
                groups: vec!["system:masters".into()],
            })
            .await
            .unwrap()
        }
    };
    // Replica a reaches the apiserver through a proxy the test cuts; b directly.
    let target: std::net::SocketAddr = cp.server.trim_start_matches("https://").parse().unwrap();
    let proxy = TcpProxy::start(target).unwrap();
    let direct_a = kubeconfig("replica-a").await;
    let a_config = dir.path().join("a.kubeconfig");
    std::fs::write(
        &a_config,
        std::fs::read_to_string(&direct_a)
            .unwrap()
            .replace(&cp.server, &proxy.https_url()),
    )
    .unwrap();
    let b_config = kubeconfig("replica-b").await;
    let (a_log, b_log) = (dir.path().join("a.log"), dir.path().join("b.log"));
    let logs = || {
        format!(
            "replica a:\n{}\nreplica b:\n{}",
            std::fs::read_to_string(&a_log).unwrap_or_default(),
            std::fs::read_to_string(&b_log).unwrap_or_default()
        )
    };
    let holder = async || lease_holder(&admin).await;
    let held_by = |who: &'static str| {
        let holder = &holder;
        async move || (holder().await.as_deref() == Some(who)).then_some(())
    };
    let nmp = policies(admin.clone());
    create_policy(
        &nmp,
        "lead",
        json!({"nodeSelector": {"matchLabels": {"nodemem.io/pool": "lead"}},
               "memoryQoS": {"throttlingFactor": 0.9},
               "rollout": {"maxUnavailable": 2, "minReadySeconds": 0}}),
    )
    .await;
    let wait = Duration::from_secs(60);

    // 1. a leads; b starts with its clock an hour ahead, so a's renewTime reads an hour
    //    old to it. It must wait as long as a renews.
    let mut a = spawn(&a_config, "replica-a", &a_log, false);
    eventually("a to lead", wait, &logs, held_by("replica-a")).await;
    let mut b = spawn(&b_config, "replica-b", &b_log, true);
    eventually("b to stand by", wait, &logs, async || {
        std::fs::read_to_string(&b_log)
            .ok()?
            .contains("another replica leads")
            .then_some(())
    })
    .await;
    let b_line = std::fs::read_to_string(&b_log).unwrap();
    let b_time: k8s_openapi::jiff::Timestamp = b_line
        .split_whitespace()
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("b's log starts with its time: {b_line}"));
    let ahead = b_time.as_second() - k8s_openapi::jiff::Timestamp::now().as_second();
    assert!(
        (3300..=3700).contains(&ahead),
        "b's clock is an hour ahead: {ahead} s\n{b_line}"
    );
    tokio::time::sleep(Duration::from_secs(3 * LEASE_SECONDS)).await;
    assert_eq!(holder().await.as_deref(), Some("replica-a"), "{}", logs());
    let by_b = writes(&cp.audit_writes())
        .into_iter()
        .filter(|w| w.user == "replica-b")
        .count();
    assert_eq!(by_b, 0, "b wrote while a renewed\n{}", logs());

    // 2. a killed: b takes over a Lease duration after it last saw a renew.
    a.kill();
    eventually("b to lead", wait, &logs, held_by("replica-b")).await;
    // A term long enough to renew a few times.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 3. a again (a follower now), then b killed: a takes over.
    let mut a = spawn(&a_config, "replica-a", &a_log, false);
    eventually("a to stand by", wait, &logs, async || {
        (std::fs::read_to_string(&a_log)
            .ok()?
            .matches("another replica leads")
            .count()
            >= 1)
            .then_some(())
    })
    .await;
    b.kill();
    eventually("a to lead again", wait, &logs, held_by("replica-a")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    eventually("a to write the policy's configs", wait, &logs, async || {
        let configs: Api<nodemem_api::NodeMemoryConfig> = Api::all(admin.clone());
        (configs.list(&Default::default()).await.ok()?.items.len() == 2).then_some(())
    })
    .await;

    // 4. a's way to the apiserver cut while an edit waits to be written: a stops at its
    //    renew deadline; b (clock ahead, started again) takes over and writes the edit.
    proxy.cut();
    let cut = Instant::now();
    nmp.patch(
        "lead",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"memoryQoS": {"throttlingFactor": 0.8}}})),
    )
    .await
    .unwrap();
    let _b = spawn(&b_config, "replica-b", &b_log, true);
    let exited = eventually("a to stop leading", wait, &logs, async || {
        a.child
            .try_wait()
            .ok()?
            .map(|status| (status, cut.elapsed()))
    })
    .await;
    assert!(!exited.0.success(), "{exited:?}\n{}", logs());
    assert!(
        exited.1 <= Duration::from_secs(LEASE_SECONDS),
        "a stopped {:?} after the cut: it must stop at its renew deadline (4 s after its last renewal), before a follower may take over (6 s)\n{}",
        exited.1,
        logs()
    );
    assert!(
        std::fs::read_to_string(&a_log)
            .unwrap()
            .contains("the Lease was not renewed within its renew deadline"),
        "{}",
        logs()
    );
    eventually("b to lead again", wait, &logs, held_by("replica-b")).await;
    proxy.restore();
    eventually("b to write the edit", wait, &logs, async || {
        writes(&cp.audit_writes())
            .iter()
            .any(|w| w.user == "replica-b" && w.resource == "nodememoryconfigs")
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // What the apiserver saw: four terms, a b a b, never interleaved, each a Lease
    // duration after the one before ended (a follower waits that long after the last
    // renewal it saw).
    let all = cp.audit_writes();
    let w = writes(&all);
    let terms = terms(&w);
    let summary: Vec<String> = terms
        .iter()
        .map(|(u, first, last, n)| format!("{u}: {n} writes {}..{}", first.received, last.received))
        .collect();
    let users: Vec<&str> = terms.iter().map(|t| t.0.as_str()).collect();
    assert_eq!(
        users,
        ["replica-a", "replica-b", "replica-a", "replica-b"],
        "{summary:#?}\n{}",
        logs()
    );
    for pair in terms.windows(2) {
        let gap = seconds_between(&pair[0].2, &pair[1].1);
        assert!(
            gap >= LEASE_SECONDS as f64 - 0.1,
            "{} began {gap} s after {} last wrote: {summary:#?}",
            pair[1].0,
            pair[0].0
        );
    }
    // b's clock reads a's spec-change times an hour old: its deadlines count from when
    // it took over, so no node failed at the takeover (the agents have 600 s).
    let b_text = std::fs::read_to_string(&b_log).unwrap();
    assert!(!b_text.contains("NodeFailed"), "{}", logs());
    eprintln!(
        "terms: {summary:#?}; a stopped {:?} after the cut",
        exited.1
    );
}
