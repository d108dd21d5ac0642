//! `cargo bench -p nodemem --bench controller_apf`: a rollout over thousands of
//! simulated nodes through nodemem's own API Priority and Fairness levels, on an
//! apiserver as small as a managed control plane's (issue 64).
//!
//! The apiserver has 200 seats in all (NODEMEM_APF_SEATS; an EKS standard control plane
//! has about as many), and deploy/flowcontrol/ is applied as it ships: the agents share
//! the seats of `nodemem-agents` and one queue 128 deep, beyond which the apiserver
//! answers 429; the controller has `nodemem-controller`. 2,000 Node objects
//! (NODEMEM_APF_NODES), each with its agent's own identity (the agent service account's
//! token bound to a pod on the node; deploy/agent's RBAC and admission policy), and the
//! release controller. The agents are simulated in this process, one task each, as the
//! real one meets the apiserver: a watch of its own config by name with its own
//! identity, and for each new revision its acknowledgement (`observedRevision`,
//! `Applied` and `Healthy`) through the client the agent uses (a 429 retried twice in
//! the client, honouring Retry-After) and the agent's status writer's backoff after
//! that (1 s doubling to 16 s, jittered, never below Retry-After).
//!
//! A policy over every node rolls out (`maxUnavailable: 25%`, `minReadySeconds: 0`)
//! while a plain user reads `/api/v1` one request after another (the built-in
//! `global-default` level). Figures: the seats each level has; the requests the
//! apiserver turned away per level; the agents' acknowledgements that met a 429 and
//! were written again; every node's config acknowledged at the policy's revision (listed
//! at the end: nothing lost) and the policy's `readyNodes`; the plain user's p50 and p99
//! during the rollout against the same reads just before it, agents and controller
//! idle (same run).

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is the run failing

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use nodemem_api::{NodeMemoryConfig, NodeMemoryPolicy};
use nodemem_testkit::control_plane::Options;
use nodemem_testkit::Identity;
use serde_json::json;

/// The agent status writer's longest wait between writes (`status_writer.rs`).
const STATUS_BACKOFF_CAP: Duration = Duration::from_secs(16);

/// What the simulated agents did, shared by their tasks.
#[derive(Default)]
struct Agents {
    /// Agents whose watch has listed their config's absence or presence.
    listed: AtomicUsize,
    /// Node -> the revision it acknowledged last.
    acked: std::sync::Mutex<BTreeMap<String, String>>,
    /// Acknowledgements the client gave up on (a 429 past its brief retries), each
    /// written again after the backoff.
    throttled: AtomicUsize,
    /// Acknowledgements that failed otherwise (also written again).
    failed: AtomicUsize,
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let nodes = env_or("NODEMEM_APF_NODES", 2000);
    let seats = env_or("NODEMEM_APF_SEATS", 200) as u32;
    let cluster = common::Cluster::start_with(&Options {
        seats: Some(seats),
        ..Options::default()
    });
    let repo = nodemem_testkit::binaries::repo_root();
    let path = |p: &str| repo.join(p).display().to_string();
    nodemem_testkit::clients::kubectl(
        cluster.cp.admin_kubeconfig(),
        &[
            "apply",
            "--server-side",
            "-f",
            &path("deploy/agent"),
            "-f",
            &path("deploy/flowcontrol/flowcontrol.yaml"),
        ],
    )
    .unwrap();
    cluster.create_nodes(nodes, "apf", "apf");

    let agents = start_agents(&cluster, nodes);
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut controller = cluster.spawn_controller(&[], log.as_file());
    let plain = cluster
        .runtime
        .block_on(cluster.cp.client(&Identity::User {
            name: "plain".into(),
            groups: vec!["system:authenticated".into()],
        }))
        .unwrap();
    cluster.runtime.block_on(async {
        // The controller listed and found nothing to do.
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    let before = cluster.runtime.block_on(apiserver_metrics(&cluster.client));
    let quiet = cluster
        .runtime
        .block_on(plain_reads_for(&plain, Duration::from_secs(20), None));

    let (took, loaded, revision) = cluster.runtime.block_on(roll_out(
        &cluster.client,
        &plain,
        &agents,
        nodes,
        log.path(),
    ));
    let after = cluster.runtime.block_on(apiserver_metrics(&cluster.client));
    let ready = cluster
        .runtime
        .block_on(nothing_lost(&cluster.client, nodes, &revision));
    let _ = controller.kill();
    let _ = controller.wait();
    report(&Report {
        nodes,
        seats,
        took,
        before: &before,
        after: &after,
        agents: &agents,
        quiet: &quiet,
        loaded: &loaded,
        ready,
    });
}

/// Each node's agent identity and its simulated agent, once every agent's config
/// watch has listed.
fn start_agents(cluster: &common::Cluster, nodes: usize) -> Arc<Agents> {
    let name = |i: usize| format!("apf-{i:05}");
    let started = Instant::now();
    let clients: Vec<(String, Client)> = cluster.runtime.block_on(async {
        futures::stream::iter(0..nodes)
            .map(|i| {
                let cp = &cluster.cp;
                async move {
                    let kubeconfig = cp.kubeconfig(&Identity::Agent(name(i))).await.unwrap();
                    let client =
                        nodemem_plumbing::kubeclient::client_with_brief_retries(Some(&kubeconfig))
                            .await
                            .unwrap();
                    (name(i), client)
                }
            })
            .buffered(32)
            .collect()
            .await
    });
    println!(
        "controller_apf: {nodes} agent identities (pod and bound token each) in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let agents = Arc::new(Agents::default());
    for (node, client) in clients {
        cluster
            .runtime
            .spawn(simulated_agent(node, client, agents.clone()));
    }
    cluster.runtime.block_on(async {
        let since = Instant::now();
        while agents.listed.load(Ordering::Relaxed) < nodes {
            assert!(
                since.elapsed() < Duration::from_secs(600),
                "the agents' watches did not list"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    println!(
        "controller_apf: {nodes} config watches listed, each with its agent's identity, {:.1} s after the first",
        started.elapsed().as_secs_f64()
    );
    agents
}

/// The policy created and rolled out while a plain user reads: the rollout's time,
/// the reads' latencies during it, and the policy's revision.
async fn roll_out(
    client: &Client,
    plain: &Client,
    agents: &Agents,
    nodes: usize,
    controller_log: &std::path::Path,
) -> (Duration, Vec<Duration>, String) {
    let policies: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<NodeMemoryPolicy>(&()));
    let rolling = Arc::new(AtomicBool::new(true));
    let started = Instant::now();
    let policy = policies
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
            "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
            "metadata": {"name": "apf"}, "spec": policy_spec()}))
            .unwrap(),
        )
        .await
        .unwrap();
    let revision = target_revision(&policy);
    let reader = tokio::spawn({
        let plain = plain.clone();
        let rolling = rolling.clone();
        async move { plain_reads_for(&plain, Duration::from_secs(3600), Some(&rolling)).await }
    });
    loop {
        let done = agents
            .acked
            .lock()
            .unwrap()
            .values()
            .filter(|r| **r == revision)
            .count();
        if done == nodes {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "the rollout did not finish: {done} of {nodes} nodes acknowledged; controller log:\n{}",
            std::fs::read_to_string(controller_log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = started.elapsed();
    rolling.store(false, Ordering::Relaxed);
    (took, reader.await.unwrap(), revision)
}

/// The rollout's policy: every node, a quarter of them at a time, ready once
/// acknowledged.
fn policy_spec() -> serde_json::Value {
    json!({"nodeSelector": {"matchLabels": {"nodemem.io/pool": "apf"}},
        "memoryQoS": {"throttlingFactor": 0.9, "reservationPolicy": "TieredReservation"},
        "rollout": {"maxUnavailable": "25%", "minReadySeconds": 0}})
}

/// The revision the controller writes for `policy` (its settings' hash, as the configs
/// carry it).
fn target_revision(policy: &DynamicObject) -> String {
    common::config_spec("apf", &policy.data["spec"])["revision"]
        .as_str()
        .unwrap()
        .to_string()
}

/// One simulated agent: its config watched by name with its own identity, each new
/// revision acknowledged with the agent's backoff until written.
async fn simulated_agent(node: String, client: Client, agents: Arc<Agents>) {
    let configs: Api<DynamicObject> =
        Api::all_with(client, &ApiResource::erase::<NodeMemoryConfig>(&()));
    let by_name = watcher::Config::default().fields(&format!("metadata.name={node}"));
    let mut events = Box::pin(watcher::watcher(configs.clone(), by_name).default_backoff());
    let mut listed = false;
    let mut last = String::new();
    while let Some(event) = events.next().await {
        let config = match event {
            Ok(watcher::Event::InitDone) if !listed => {
                listed = true;
                agents.listed.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => c,
            _ => continue,
        };
        let Some(revision) = config.data["spec"]["revision"].as_str().map(str::to_string) else {
            continue;
        };
        if revision == last {
            continue;
        }
        acknowledge(&configs, &config, &agents).await;
        agents
            .acked
            .lock()
            .unwrap()
            .insert(node.clone(), revision.clone());
        last = revision;
    }
}

/// What the agent writes once it applied its config's revision, written again after
/// the status writer's backoff until the apiserver takes it.
async fn acknowledge(configs: &Api<DynamicObject>, c: &DynamicObject, agents: &Agents) {
    let name = c.metadata.name.clone().unwrap();
    let generation = c.metadata.generation;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let condition = |type_: &str| {
        json!({"type": type_, "status": "True", "reason": type_,
        "message": "", "observedGeneration": generation, "lastTransitionTime": now})
    };
    let status = json!({"apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
        "metadata": {"uid": c.metadata.uid},
        "status": {"observedRevision": c.data["spec"]["revision"], "managedPods": 0,
            "conditions": [condition("Applied"), condition("Healthy")]}});
    let mut failures = 0;
    loop {
        let written = configs
            .patch_status(
                &name,
                &PatchParams::apply("nodemem-agent").force(),
                &Patch::Apply(&status),
            )
            .await;
        let Err(e) = written else { return };
        failures += 1;
        let refused = matches!(&e, kube::Error::Api(s) if s.code == 429);
        let counter = if refused {
            &agents.throttled
        } else {
            &agents.failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let jitter = 0.5 + fastrand::f64() / 2.0;
        let retry_after = nodemem_api::backoff::retry_after(&e);
        tokio::time::sleep(nodemem_api::backoff::delay(
            failures,
            jitter,
            retry_after,
            STATUS_BACKOFF_CAP,
        ))
        .await;
    }
}

/// A plain user's reads of `/api/v1`, one after another, for `at_most` or until
/// `while_set` is cleared: each one's latency, sorted.
async fn plain_reads_for(
    plain: &Client,
    at_most: Duration,
    while_set: Option<&AtomicBool>,
) -> Vec<Duration> {
    let started = Instant::now();
    let mut took = Vec::new();
    while started.elapsed() < at_most && while_set.is_none_or(|s| s.load(Ordering::Relaxed)) {
        let req = http::Request::get("/api/v1").body(Vec::new()).unwrap();
        let at = Instant::now();
        plain.request_text(req).await.unwrap();
        took.push(at.elapsed());
    }
    took.sort();
    took
}

/// Every node's config on `revision` and acknowledged at it (listed now: nothing
/// lost), and the policy's `readyNodes` once it says all of them (or what it says
/// after a minute).
async fn nothing_lost(client: &Client, nodes: usize, revision: &str) -> i64 {
    let configs: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<NodeMemoryConfig>(&()));
    let list = configs.list(&Default::default()).await.unwrap();
    let whole = list
        .items
        .iter()
        .filter(|c| {
            c.data["spec"]["revision"] == revision
                && c.data["status"]["observedRevision"] == revision
        })
        .count();
    assert_eq!(
        (list.items.len(), whole),
        (nodes, nodes),
        "every node's config on the revision and acknowledged at it"
    );
    let policies: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<NodeMemoryPolicy>(&()));
    let since = Instant::now();
    loop {
        let ready = policies.get("apf").await.unwrap().data["status"]["readyNodes"]
            .as_i64()
            .unwrap_or(0);
        if ready == nodes as i64 || since.elapsed() > Duration::from_secs(60) {
            return ready;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The apiserver's /metrics.
async fn apiserver_metrics(client: &Client) -> String {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    client.request_text(req).await.unwrap()
}

/// The sum of a metric's series whose labels include `label`.
fn sum_with(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

struct Report<'a> {
    nodes: usize,
    seats: u32,
    took: Duration,
    before: &'a str,
    after: &'a str,
    agents: &'a Agents,
    quiet: &'a [Duration],
    loaded: &'a [Duration],
    ready: i64,
}

fn report(r: &Report) {
    let ms = |d: &[Duration], q: f64| nodemem_testkit::stats::percentile(d, q).as_secs_f64() * 1e3;
    println!(
        "controller_apf: {} nodes rolled out (maxUnavailable 25%) in {:.1} s on an apiserver of {} seats; every config on the revision and acknowledged; the policy's readyNodes {}",
        r.nodes,
        r.took.as_secs_f64(),
        r.seats,
        r.ready
    );
    for level in [
        "nodemem-agents",
        "nodemem-controller",
        "global-default",
        "workload-low",
    ] {
        let label = format!("priority_level=\"{level}\"");
        let seats = sum_with(r.after, "apiserver_flowcontrol_nominal_limit_seats", &label);
        let delta = |name: &str| sum_with(r.after, name, &label) - sum_with(r.before, name, &label);
        // The time requests waited in the level's queue for a seat (the wait APF adds).
        let waited = delta("apiserver_flowcontrol_request_wait_duration_seconds_sum");
        let waits = delta("apiserver_flowcontrol_request_wait_duration_seconds_count");
        println!(
            "controller_apf: level {level}: {seats} seats; during the rollout {} requests dispatched, {} turned away, {:.2} ms waited for a seat on average",
            delta("apiserver_flowcontrol_dispatched_requests_total"),
            delta("apiserver_flowcontrol_rejected_requests_total"),
            if waits > 0.0 { waited / waits * 1e3 } else { 0.0 }
        );
    }
    println!(
        "controller_apf: the agents' acknowledgements that met a 429 past the client's retries and were written again after the backoff: {}; that failed otherwise: {}",
        r.agents.throttled.load(Ordering::Relaxed),
        r.agents.failed.load(Ordering::Relaxed)
    );
    let (q50, q99, l50, l99) = (
        ms(r.quiet, 0.5),
        ms(r.quiet, 0.99),
        ms(r.loaded, 0.5),
        ms(r.loaded, 0.99),
    );
    println!(
        "controller_apf: a plain user's reads (global-default): before the rollout p50 {q50:.2} ms, p99 {q99:.2} ms ({} reads); during it p50 {l50:.2} ms, p99 {l99:.2} ms ({} reads): p99 {:.2}x",
        r.quiet.len(),
        r.loaded.len(),
        l99 / q99
    );
}
