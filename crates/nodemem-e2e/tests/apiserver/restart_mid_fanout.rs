//! The controller killed (SIGKILL) in the middle of a fan-out, on a control plane of its
//! own with 1,000 nodes (issue 32): the controller started again finishes the fan-out
//! without writing a config a second time, and when the policy changed while it was
//! down, it moves every node to the newest revision and none back to an older one;
//! when the policy is edited back to the revision the nodes ran before, only the nodes
//! the interrupted fan-out reached are written (back). And an edit that the apiserver
//! accepts but nodemem cannot run, made in the middle of a fan-out: the fan-out goes on
//! to the last accepted revision, the status says why (Accepted: Invalid, naming the
//! problem and the revision kept), and undoing the edit writes nothing.
//! Every config change is seen by a watch; the writes are the apiserver's own count.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use nodemem_api::NodeMemoryPolicy;
use nodemem_testkit::Identity;
use serde_json::json;

use crate::common::{
    next_config, own_control_plane, policies, spawn_controller_with, watch_configs, ConfigWatch,
    ControllerProcess,
};

const NODES: usize = 1000;
/// Where the first controller is killed: this many configs written.
const KILL_AT: usize = 300;

fn policy_spec(factor: f64) -> serde_json::Value {
    json!({"nodeSelector": {"matchLabels": {"nodemem.io/pool": "fan"}},
        "memoryQoS": {"throttlingFactor": factor, "reservationPolicy": "TieredReservation"},
        "rollout": {"maxUnavailable": "100%", "minReadySeconds": 0}})
}

/// The revision the policy's settings at `factor` roll out.
fn revision_of(factor: f64) -> String {
    let p: NodeMemoryPolicy = serde_json::from_value(json!({
        "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
        "metadata": {"name": "fan"}, "spec": policy_spec(factor)}))
    .unwrap();
    nodemem_api::revision::revision(&p.spec.settings)
}

/// The apiserver's count of applies to configs (spec writes; not status).
async fn config_applies(client: &Client) -> f64 {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| {
            l.contains("resource=\"nodememoryconfigs\"")
                && l.contains("subresource=\"\"")
                && l.contains("verb=\"APPLY\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Every node's revisions in the order the watch saw its config change.
#[derive(Default)]
struct Seen(BTreeMap<String, Vec<String>>);

impl Seen {
    fn record(&mut self, c: &kube::api::DynamicObject) {
        let node = c.metadata.name.clone().unwrap();
        let revision = c.data["spec"]["revision"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let seen = self.0.entry(node).or_default();
        if seen.last() != Some(&revision) {
            seen.push(revision);
        }
    }

    fn on(&self, revision: &str) -> usize {
        self.0
            .values()
            .filter(|r| r.last().map(String::as_str) == Some(revision))
            .count()
    }

    /// Reads the watch until `done` holds (or `wait` passes).
    async fn until(
        &mut self,
        watch: &mut ConfigWatch,
        wait: Duration,
        done: impl Fn(&Seen) -> bool,
    ) -> bool {
        let deadline = Instant::now() + wait;
        while !done(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            if let Some(c) = next_config(watch, left.min(Duration::from_secs(1))).await {
                self.record(&c);
            }
        }
        true
    }
}

/// Lets a slow controller write KILL_AT configs on `revision`, then kills it: how many
/// nodes it had moved there (fewer than all, or the test could not interrupt it).
async fn interrupt(
    controller: ControllerProcess,
    revision: &str,
    seen: &mut Seen,
    watch: &mut ConfigWatch,
) -> usize {
    let wait = Duration::from_secs(180);
    assert!(seen.until(watch, wait, |s| s.on(revision) >= KILL_AT).await);
    kill(controller, seen, watch).await;
    let at_kill = seen.on(revision);
    assert!(
        at_kill < NODES,
        "the fan-out to {revision} had finished before the kill"
    );
    at_kill
}

/// NODES Node objects `fan-NNNN` in pool `fan`, 16 created at a time.
async fn create_nodes(client: &Client) {
    crate::common::create_pool_nodes(client, "fan", 4, "fan", NODES, 16).await;
}

/// SIGKILL, as a node's failure or the OOM killer stops it; what it had in flight lands
/// (or not) before anything is counted.
async fn kill(mut controller: ControllerProcess, seen: &mut Seen, watch: &mut ConfigWatch) {
    controller.child.kill().unwrap();
    controller.child.wait().unwrap();
    seen.until(watch, Duration::from_secs(2), |_| false).await;
}

/// The controller killed with SIGKILL in the middle of a 1,000-node fan-out finishes it
/// after a restart with 1,000 applies in all (nothing written twice); killed again in
/// the next fan-out with the policy edited while it is down, it moves every node to the
/// newest revision and none back; killed a third time with the policy edited back to
/// the revision every node ran before, it writes only the 300 nodes the interrupted
/// fan-out reached (600 applies).
#[tokio::test]
async fn a_controller_killed_in_a_fan_out_finishes_it_writing_nothing_twice_and_nothing_older() {
    let cp = own_control_plane().await;
    let client = cp.client(&Identity::Admin).await.unwrap();
    create_nodes(&client).await;
    let (mut watch, _) = watch_configs(&client).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cp.kubeconfig(&Identity::Controller).await.unwrap();
    let log = dir.path().join("controller.log");
    // The first controller writes one config at a time, so that it is surely killed in
    // the middle; the one started again writes as it does by default.
    let spawn = |extra: &[&str]| -> ControllerProcess {
        spawn_controller_with(&kubeconfig, "restart-fan", "nodemem:test", &log, extra)
    };
    // A fan-out of 1000 configs beside the tier's other tests (the storm's 5,000 nodes
    // among them) on a slow machine, with the controller's restarts after a lost Lease
    // (`until_restarting`): a wait, not a promise of speed (the controller's rate is
    // BENCHMARKS.md's).
    let wait = Duration::from_secs(360);
    let policies = policies(client.clone());
    let mut seen = Seen::default();

    // 1. Killed in the first fan-out: started again, it writes only what is missing.
    let r1 = revision_of(0.9);
    let before = config_applies(&client).await;
    policies
        .create(
            &PostParams::default(),
            &crate::common::object(json!({
                "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
                "metadata": {"name": "fan"}, "spec": policy_spec(0.9)})),
        )
        .await
        .unwrap();
    let controller = spawn(&["--write-concurrency", "1"]);
    assert!(seen.until(&mut watch, wait, |s| s.on(&r1) >= KILL_AT).await);
    kill(controller, &mut seen, &mut watch).await;
    let at_kill = seen.on(&r1);
    assert!(
        at_kill < NODES,
        "the fan-out had finished before the kill ({at_kill} configs)"
    );
    let mut _controller = spawn(&[]);
    let (reached, restarts) = until_restarting(
        &mut seen,
        &mut watch,
        wait,
        |s| s.on(&r1) == NODES,
        &mut _controller,
        || spawn(&[]),
    )
    .await;
    assert!(
        reached,
        "the fan-out did not finish after the restart: {} of {NODES}; the controllers' log ends:\n{}",
        seen.on(&r1),
        log_tail(&log, 30)
    );
    let applies = config_applies(&client).await - before;
    eprintln!(
        "first fan-out: killed at {at_kill} configs; {applies} applies for {NODES} nodes ({restarts} restart(s) after a lost Lease)"
    );
    assert!(
        seen.0.values().all(|r| r.len() == 1),
        "a config was written more than once"
    );
    assert!(
        applies <= (NODES + 1 + in_flight(restarts)) as f64,
        "{applies} applies for {NODES} nodes: the restarted controller wrote again what was written"
    );
    drop(_controller);

    // 2. Killed in the second fan-out, the policy edited again while it is down.
    let (r2, r3) = (revision_of(0.8), revision_of(0.7));
    let set_factor = |factor: f64| {
        let policies = policies.clone();
        async move {
            policies
                .patch(
                    "fan",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"memoryQoS": {"throttlingFactor": factor}}})),
                )
                .await
                .unwrap();
        }
    };
    let before = config_applies(&client).await;
    set_factor(0.8).await;
    let at_kill = interrupt(
        spawn(&["--write-concurrency", "1"]),
        &r2,
        &mut seen,
        &mut watch,
    )
    .await;
    set_factor(0.7).await;
    let mut _controller = spawn(&[]);
    let (reached, restarts) = until_restarting(
        &mut seen,
        &mut watch,
        wait,
        |s| s.on(&r3) == NODES,
        &mut _controller,
        || spawn(&[]),
    )
    .await;
    assert!(
        reached,
        "not every node reached the newest revision: {} of {NODES} within {wait:?}; the controllers' log ends:\n{}",
        seen.on(&r3),
        log_tail(&log, 30)
    );
    let applies = config_applies(&client).await - before;
    eprintln!(
        "second fan-out: killed at {at_kill} configs on {r2}; {applies} applies to reach {r3} ({restarts} restart(s) after a lost Lease)"
    );
    // Each node: r1, then r2 or not, then r3; never back.
    for (node, revisions) in &seen.0 {
        let order: Vec<usize> = revisions
            .iter()
            .map(|r| [&r1, &r2, &r3].iter().position(|x| *x == r).unwrap())
            .collect();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]) && order.last() == Some(&2),
            "{node} moved {revisions:?} (r1 {r1}, r2 {r2}, r3 {r3})"
        );
    }
    assert!(
        applies <= (at_kill + NODES + 1 + in_flight(restarts)) as f64,
        "{applies} applies: more than the second fan-out's {at_kill}, one each to the newest \
         and {} in flight when a Lease was lost",
        in_flight(restarts)
    );
    drop(_controller);

    // 3. Killed in a third fan-out, the policy edited back to the revision every node
    // ran before it while the controller is down: the nodes the third fan-out reached
    // go back to it, the others are not written at all.
    let r4 = revision_of(0.6);
    let seen_before: BTreeMap<String, usize> =
        seen.0.iter().map(|(n, r)| (n.clone(), r.len())).collect();
    let before = config_applies(&client).await;
    set_factor(0.6).await;
    let at_kill = interrupt(
        spawn(&["--write-concurrency", "1"]),
        &r4,
        &mut seen,
        &mut watch,
    )
    .await;
    set_factor(0.7).await;
    let mut _controller = spawn(&[]);
    let (reached, restarts) = until_restarting(
        &mut seen,
        &mut watch,
        wait,
        |s| s.on(&r3) == NODES,
        &mut _controller,
        || spawn(&[]),
    )
    .await;
    assert!(
        reached,
        "not every node went back to {r3}: {} of {NODES}; the controllers' log ends:\n{}",
        seen.on(&r3),
        log_tail(&log, 30)
    );
    // A moment for a stray write to show.
    seen.until(&mut watch, Duration::from_secs(3), |_| false)
        .await;
    let applies = config_applies(&client).await - before;
    eprintln!(
        "third fan-out: killed at {at_kill} configs on {r4}; {applies} applies to go back to {r3} ({restarts} restart(s) after a lost Lease)"
    );
    for (node, revisions) in &seen.0 {
        let new = &revisions[seen_before[node]..];
        assert!(
            new.is_empty() || new == [r4.clone(), r3.clone()],
            "{node} moved {new:?} after the edit back (r3 {r3}, r4 {r4})"
        );
    }
    assert!(
        applies <= (2 * at_kill + 1 + in_flight(restarts)) as f64,
        "{applies} applies: more than the {at_kill} configs written on {r4} and each of them back"
    );
}

/// Policy `fan`'s `Accepted` condition: its reason and message.
async fn accepted(policies: &Api<kube::api::DynamicObject>) -> Option<(String, String)> {
    let p = policies.get_status("fan").await.unwrap();
    let conditions = p.data["status"]["conditions"].as_array()?.clone();
    let c = conditions.iter().find(|c| c["type"] == "Accepted")?;
    Some((
        c["reason"].as_str()?.to_string(),
        c["message"].as_str()?.to_string(),
    ))
}

/// An edit the apiserver accepts but nodemem cannot run (the Memory Manager's sum rule
/// broken) in the middle of a fan-out holds it on the last accepted revision, which
/// every node reaches, with `Accepted: Invalid` naming the problem and the revision
/// kept; undoing the edit writes nothing (1,000 applies in all).
#[tokio::test]
async fn an_edit_the_apiserver_accepts_but_nodemem_cannot_run_holds_a_fan_out_on_its_revision() {
    let cp = own_control_plane().await;
    let client = cp.client(&Identity::Admin).await.unwrap();
    create_nodes(&client).await;
    let (mut watch, _) = watch_configs(&client).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cp.kubeconfig(&Identity::Controller).await.unwrap();
    let log = dir.path().join("controller.log");
    let policies = policies(client.clone());
    let mut seen = Seen::default();
    let wait = Duration::from_secs(180);

    let r1 = revision_of(0.9);
    let before = config_applies(&client).await;
    policies
        .create(
            &PostParams::default(),
            &crate::common::object(json!({
                "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
                "metadata": {"name": "fan"}, "spec": policy_spec(0.9)})),
        )
        .await
        .unwrap();
    // One config at a time, so that the edit surely lands in the middle.
    let _controller = spawn_controller_with(
        &kubeconfig,
        "invalid-fan",
        "nodemem:test",
        &log,
        &["--write-concurrency", "1"],
    );
    assert!(seen.until(&mut watch, wait, |s| s.on(&r1) >= KILL_AT).await);
    // The schema accepts it; the kubelet's sum rule does not (reservedMemory must add up
    // to kubeReserved + systemReserved + evictionHard: 300Mi, not 200Mi).
    let broken = json!({"spec": {
        "memoryManager": {"policy": "Static",
            "reservedMemory": [{"numaNode": 0, "limits": {"memory": "200Mi"}}]},
        "nodeReserved": {"kubeReserved": "100Mi", "systemReserved": "100Mi", "evictionHard": "100Mi"}}});
    policies
        .patch("fan", &PatchParams::default(), &Patch::Merge(broken))
        .await
        .expect("the apiserver accepts the edit");
    let at_edit = seen.on(&r1);
    assert!(at_edit < NODES, "the fan-out had finished before the edit");
    // The fan-out goes on to the last accepted revision, and the status says why the
    // edit does not roll out.
    assert!(
        seen.until(&mut watch, wait, |s| s.on(&r1) == NODES).await,
        "the fan-out stopped at {} of {NODES} after the invalid edit",
        seen.on(&r1)
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let message = loop {
        let a = accepted(&policies).await;
        if let Some((_, message)) = a.clone().filter(|(r, _)| r == "Invalid") {
            break message;
        }
        assert!(
            Instant::now() < deadline,
            "the policy is not Invalid: {a:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        message.contains("reservedMemory") && message.contains(&r1),
        "Accepted Invalid: {message:?} (the problem and the revision kept)"
    );
    // The edit undone: the spec is r1's again, so nothing is written.
    policies
        .patch(
            "fan",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"memoryManager": null, "nodeReserved": null}})),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while accepted(&policies)
        .await
        .is_some_and(|(r, _)| r == "Invalid")
    {
        assert!(Instant::now() < deadline, "the policy stayed Invalid");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    seen.until(&mut watch, Duration::from_secs(3), |_| false)
        .await;
    let applies = config_applies(&client).await - before;
    eprintln!("invalid edit at {at_edit} configs; {applies} applies for {NODES} nodes; Accepted Invalid: {message}");
    assert!(
        seen.0.values().all(|r| r == std::slice::from_ref(&r1)),
        "a config carried another revision than {r1}"
    );
    assert!(
        applies <= (NODES + 1) as f64,
        "{applies} applies for {NODES} nodes: the invalid edit or its undoing wrote configs"
    );
}

/// [`Seen::until`] while `controller` runs, starting it again (`spawn`) whenever it
/// exits, as its Deployment's kubelet would: on a loaded apiserver a leader whose
/// renewal is not answered within its deadline exits by design (seen 2026-11-29 beside
/// the storm test: "lost the leader Lease; exiting so that one replica leads", the 4 s
/// deadline of the tests' 6 s Lease), and nothing else would finish the fan-out. With
/// how many times it was started again.
async fn until_restarting(
    seen: &mut Seen,
    watch: &mut ConfigWatch,
    wait: Duration,
    done: impl Fn(&Seen) -> bool,
    controller: &mut ControllerProcess,
    spawn: impl Fn() -> ControllerProcess,
) -> (bool, usize) {
    let deadline = Instant::now() + wait;
    let mut restarts = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if seen
            .until(watch, left.min(Duration::from_secs(5)), &done)
            .await
        {
            return (true, restarts);
        }
        if Instant::now() >= deadline {
            return (false, restarts);
        }
        if let Ok(Some(status)) = controller.child.try_wait() {
            eprintln!("the controller exited ({status}); started again, as its Deployment would");
            *controller = spawn();
            restarts += 1;
        }
    }
}

/// The applies a controller may have had in flight when it lost its Lease, `restarts`
/// times: its writes stop with it, but the apiserver may carry out those it had taken
/// after the next controller listed the configs (a loaded apiserver answers in seconds),
/// and the next one then writes them again. Bounded by the writes in flight at once
/// (`--write-concurrency`, at its default in these restarts).
fn in_flight(restarts: usize) -> usize {
    restarts * usize::from(nodemem_controller::DEFAULT_WRITE_CONCURRENCY)
}

/// The last `lines` lines of the controllers' log (every controller a test started
/// appends to it).
fn log_tail(log: &std::path::Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_else(|e| format!("({}: {e})", log.display()));
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
