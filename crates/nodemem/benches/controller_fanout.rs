//! `cargo bench -p nodemem --bench controller_fanout`: the controller's fan-out on the
//! real control plane.
//!
//! 2,000 Node objects (no kubelets: Node objects only). First the ceiling: a plain
//! client writes 2,000 NodeMemoryConfigs with the same spec by server-side apply, with
//! 1, 4, 16 and 64 writers at once (the apiserver serves many writes at a time); the
//! fastest is the ceiling. Its configs are the objects the controller writes (an
//! ownerReference to a policy too), and a watch of every config reads them as the
//! fan-out's measuring watch does. Then the release `nodemem controller` with its own identity
//! and its default `--write-concurrency` (NODEMEM_FANOUT_CONCURRENCY sets another):
//! from the policy's creation until every node's config carries the policy's revision
//! (seen through a watch). API writes are counted from the apiserver's own
//! `apiserver_request_total`: during the fan-out, and during a quiet period in which the
//! controller keeps reconciling (every second) with nothing to change. Then the
//! controller's resident memory (its peak too: the fan-out's events queue while its
//! writes run), and the best plain client once more (a run's first bulk write is the
//! slower one; the ratio is given against both).
//! NODEMEM_FANOUT_NODES changes the node count; NODEMEM_FANOUT_DIAG=1 adds the best
//! plain client with the controller's identity (RBAC, the admission policy's match).

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;
use kube::runtime::watcher;
use kube::Client;
use nodemem_api::{NodeMemoryConfig, NodeMemoryPolicy};
use nodemem_testkit::Identity;
use serde_json::json;

const QUIET: Duration = Duration::from_secs(15);

/// The apiserver's own /metrics.
async fn apiserver_metrics(client: &Client) -> String {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    client.request_text(req).await.unwrap()
}

/// Writes to NodeMemoryConfigs and NodeMemoryPolicies (any verb but reads) by this
/// apiserver's own count.
async fn writes(client: &Client) -> BTreeMap<String, f64> {
    writes_in(&apiserver_metrics(client).await)
}

fn writes_in(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let resource = ["nodememoryconfigs", "nodememorypolicies"]
            .into_iter()
            .find(|r| line.contains(&format!("resource=\"{r}\"")));
        let Some(resource) = resource else { continue };
        let verb = line
            .split("verb=\"")
            .nth(1)
            .and_then(|v| v.split('"').next())
            .unwrap_or("");
        if matches!(verb, "GET" | "LIST" | "WATCH") {
            continue;
        }
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *out.entry(format!("{resource} {verb}")).or_insert(0.0) += value;
    }
    out
}

/// Watches of NodeMemoryConfigs the apiserver closed because their reader fell behind
/// (`apiserver_terminated_watchers_total`).
fn terminated_config_watchers(text: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_terminated_watchers_total{") && l.contains("nodememoryconfigs")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn delta(after: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> (f64, String) {
    let mut total = 0.0;
    let mut parts = Vec::new();
    for (k, v) in after {
        let d = v - before.get(k).copied().unwrap_or(0.0);
        if d > 0.0 {
            total += d;
            parts.push(format!("{k}: {d}"));
        }
    }
    (total, parts.join(", "))
}

fn main() {
    let nodes: usize = std::env::var("NODEMEM_FANOUT_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let cluster = common::Cluster::start();
    let (cp, runtime, client) = (&cluster.cp, &cluster.runtime, cluster.client.clone());
    let configs: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<NodeMemoryConfig>(&()));

    cluster.create_nodes(nodes, "fan", "fan");

    // What the controller writes for the fan-out's policy: every field of it.
    let spec = common::config_spec("fan", &policy_spec("fan"));
    // The ceiling: a plain client writing the same objects the controller writes (the
    // spec, the annotation, an ownerReference to a policy) while a watch of every config
    // reads them, as the fan-out's measuring watch does; 1 to 64 writers at once. The
    // owner is a policy that selects no node (the controller is not running yet). Each
    // run's configs belong to no node: removed before the next run and before the
    // controller starts, so that each is measured alone.
    let owner = runtime.block_on(create_policy(&client, "owner", "none"));
    let mut ceilings = Vec::new();
    for writers in WRITERS {
        let prefix = format!("plain{writers}");
        let watching = drain_config_watch(runtime, &configs);
        let took = runtime.block_on(common::plain_writes(
            &configs,
            &spec,
            nodes,
            &prefix,
            Some(("owner", &owner)),
            writers,
        ));
        watching.abort();
        println!(
            "controller_fanout: a plain client with {writers} writer(s): {nodes} configs in {:.2} s",
            took.as_secs_f64()
        );
        runtime.block_on(common::remove_plain(&configs, nodes, &prefix));
        ceilings.push((writers, took));
    }
    let (best_writers, plain) = ceilings
        .iter()
        .copied()
        .min_by_key(|(_, took)| *took)
        .expect("at least one run");
    runtime.block_on(async {
        let policies: Api<DynamicObject> =
            Api::all_with(client.clone(), &ApiResource::erase::<NodeMemoryPolicy>(&()));
        policies.delete("owner", &Default::default()).await.unwrap();
    });

    // The controller.
    let log = tempfile::NamedTempFile::new().unwrap();
    let chosen = std::env::var("NODEMEM_FANOUT_CONCURRENCY").ok();
    let concurrency = chosen
        .clone()
        .unwrap_or_else(|| nodemem_controller::DEFAULT_WRITE_CONCURRENCY.to_string());
    let args: Vec<&str> = match &chosen {
        Some(c) => vec!["--write-concurrency", c.as_str()],
        None => Vec::new(),
    };
    let mut controller = cluster.spawn_controller(&args, log.as_file());
    std::thread::sleep(Duration::from_secs(3));
    let peak = PeakRss::sample(controller.id());
    let (fanout, first_seen, revision, before, terminated) = runtime.block_on(async {
        let mut events = common::listed_config_watch(&configs).await;
        let metrics = apiserver_metrics(&client).await;
        let (before, terminated_before) =
            (writes_in(&metrics), terminated_config_watchers(&metrics));
        let started = Instant::now();
        create_policy(&client, "fan", "fan").await;
        let mut written = std::collections::BTreeSet::new();
        let mut revision = String::new();
        let mut first_seen = None;
        while written.len() < nodes {
            let e = tokio::time::timeout(Duration::from_secs(120), events.next()).await;
            let Ok(Some(Ok(watcher::Event::Apply(c)))) = e else {
                assert!(
                    started.elapsed() < Duration::from_secs(600),
                    "fan-out did not finish"
                );
                continue;
            };
            revision = c.data["spec"]["revision"]
                .as_str()
                .unwrap_or("")
                .to_string();
            written.insert(c.metadata.name.clone().unwrap());
            first_seen.get_or_insert_with(|| started.elapsed());
        }
        let terminated =
            terminated_config_watchers(&apiserver_metrics(&client).await) - terminated_before;
        let first_seen = first_seen.unwrap_or_default();
        (started.elapsed(), first_seen, revision, before, terminated)
    });
    // The policy's status catches up (updated nodes): part of the fan-out's writes.
    let fanout_writes = runtime.block_on(async {
        let policies: Api<DynamicObject> =
            Api::all_with(client.clone(), &ApiResource::erase::<NodeMemoryPolicy>(&()));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let p = policies.get_status("fan").await.unwrap();
            if p.data["status"]["updatedNodes"].as_u64() == Some(nodes as u64) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the policy status did not catch up"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // A moment for a write in flight to be counted.
        tokio::time::sleep(Duration::from_secs(2)).await;
        writes(&client).await
    });
    let rss_after_fanout = nodemem_testkit::clients::cpu_ticks_and_rss_kib(controller.id())
        .unwrap()
        .1 as f64
        / 1024.0;
    let rss_peak = peak.stop();
    std::thread::sleep(QUIET);
    let quiet_writes = runtime.block_on(writes(&client));
    let rss = nodemem_testkit::clients::cpu_ticks_and_rss_kib(controller.id())
        .unwrap()
        .1 as f64
        / 1024.0;
    // NODEMEM_FANOUT_DIAG: a second fan-out by the same controller (the policy edited),
    // its connections and caches warm from the first.
    if std::env::var("NODEMEM_FANOUT_DIAG").is_ok() {
        let second = runtime.block_on(second_fanout(&client, &configs, nodes));
        println!(
            "controller_fanout diag: a second fan-out (the policy edited) by the same controller: {:.2} s",
            second.as_secs_f64()
        );
    }
    let _ = controller.kill();
    let _ = controller.wait();
    // The ceiling again after the fan-out: one run's ceilings differ by up to a quarter
    // on this machine (the first bulk write is the slower), so the ratio is given
    // against both. Owned by the fan-out's policy, watched as before.
    let fan_uid = runtime.block_on(async {
        let policies: Api<DynamicObject> =
            Api::all_with(client.clone(), &ApiResource::erase::<NodeMemoryPolicy>(&()));
        policies.get("fan").await.unwrap().metadata.uid.unwrap()
    });
    let watching = drain_config_watch(runtime, &configs);
    let plain_after = runtime.block_on(common::plain_writes(
        &configs,
        &spec,
        nodes,
        "after",
        Some(("fan", &fan_uid)),
        best_writers,
    ));
    // NODEMEM_FANOUT_DIAG: the same with the controller's identity (RBAC, the
    // admission policy's match).
    if std::env::var("NODEMEM_FANOUT_DIAG").is_ok() {
        let as_controller = runtime.block_on(async {
            let c = cp.client(&Identity::Controller).await.unwrap();
            let api: Api<DynamicObject> =
                Api::all_with(c, &ApiResource::erase::<NodeMemoryConfig>(&()));
            common::plain_writes(
                &api,
                &spec,
                nodes,
                "ident",
                Some(("fan", &fan_uid)),
                best_writers,
            )
            .await
        });
        println!(
            "controller_fanout diag: the best plain client with the controller's identity: {:.2} s",
            as_controller.as_secs_f64()
        );
        // And with a second watch of every config, as the controller's own.
        let second_watch = drain_config_watch(runtime, &configs);
        let two_watches = runtime.block_on(common::plain_writes(
            &configs,
            &spec,
            nodes,
            "twowatch",
            Some(("fan", &fan_uid)),
            best_writers,
        ));
        second_watch.abort();
        println!(
            "controller_fanout diag: the best plain client with a second watch of every config: {:.2} s",
            two_watches.as_secs_f64()
        );
    }
    watching.abort();
    let (total, detail) = delta(&fanout_writes, &before);
    let (quiet, quiet_detail) = delta(&quiet_writes, &fanout_writes);
    println!(
        "controller_fanout: {nodes} nodes, one policy (revision {revision}): every config written {:.2} s after the policy's creation (--write-concurrency {concurrency}); the best plain client ({best_writers} writers): {:.2} s before, {:.2} s after; ratio {:.2}x and {:.2}x (goal <= 1.2x)",
        fanout.as_secs_f64(),
        plain.as_secs_f64(),
        plain_after.as_secs_f64(),
        fanout.as_secs_f64() / plain.as_secs_f64(),
        fanout.as_secs_f64() / plain_after.as_secs_f64()
    );
    println!(
        "controller_fanout: the first config seen {:.0} ms after the policy's creation (the policy's way to the controller and its first decision), the rest in {:.2} s",
        first_seen.as_secs_f64() * 1000.0,
        (fanout - first_seen).as_secs_f64()
    );
    println!(
        "controller_fanout: config watches the apiserver closed during the fan-out for falling behind: {terminated} (goal: 0)"
    );
    println!(
        "controller_fanout: API writes during the fan-out: {total} = {:.2} per node ({detail}) (goal <= 2 per node per revision)",
        total / nodes as f64
    );
    println!(
        "controller_fanout: API writes in {} s of reconciling with nothing to change: {quiet} ({quiet_detail}) (goal: 0)",
        QUIET.as_secs()
    );
    println!("controller_fanout: controller resident memory at {nodes} nodes: {rss_peak:.1} MiB at its peak during the fan-out, {rss_after_fanout:.1} MiB after it, {rss:.1} MiB after the quiet period");
}

/// A policy `name` over the nodes of `pool` (every node at once); its uid.
/// The fan-out's policy: every node of `pool`, all at once.
fn policy_spec(pool: &str) -> serde_json::Value {
    json!({"nodeSelector": {"matchLabels": {"nodemem.io/pool": pool}},
        "memoryQoS": {"throttlingFactor": 0.9, "reservationPolicy": "TieredReservation"},
        "rollout": {"maxUnavailable": "100%"}})
}

async fn create_policy(client: &Client, name: &str, pool: &str) -> String {
    let policies: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<NodeMemoryPolicy>(&()));
    let policy = serde_json::from_value(json!({
        "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
        "metadata": {"name": name}, "spec": policy_spec(pool)}))
    .unwrap();
    let created = policies
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    created.metadata.uid.unwrap()
}

/// Edits the fan-out's policy (a new revision) and waits until every config carries
/// it: the time it took.
async fn second_fanout(client: &Client, configs: &Api<DynamicObject>, nodes: usize) -> Duration {
    let mut events = common::listed_config_watch(configs).await;
    let policies: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<NodeMemoryPolicy>(&()));
    let started = Instant::now();
    policies
        .patch(
            "fan",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"memoryQoS": {"throttlingFactor": 0.8}}})),
        )
        .await
        .unwrap();
    let mut written = std::collections::BTreeSet::new();
    while written.len() < nodes {
        let e = tokio::time::timeout(Duration::from_secs(120), events.next()).await;
        if let Ok(Some(Ok(watcher::Event::Apply(c)))) = e {
            if c.data["spec"]["memoryQoS"]["throttlingFactor"].as_f64() == Some(0.8) {
                written.insert(c.metadata.name.clone().unwrap());
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "second fan-out did not finish"
        );
    }
    started.elapsed()
}

/// A watch of every config that reads and drops its events, until aborted.
fn drain_config_watch(
    runtime: &tokio::runtime::Runtime,
    configs: &Api<DynamicObject>,
) -> tokio::task::JoinHandle<()> {
    let configs = configs.clone();
    runtime.spawn(async move {
        let mut events = Box::pin(watcher::watcher(configs, watcher::Config::default()));
        while events.next().await.is_some() {}
    })
}

/// Plain clients' writers at once, in each ceiling run.
const WRITERS: [usize; 4] = [1, 4, 16, 64];

/// The controller's highest resident memory, sampled every 100 ms in a thread of
/// its own.
struct PeakRss {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sampler: std::thread::JoinHandle<u64>,
}

impl PeakRss {
    fn sample(pid: u32) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let mut peak = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok((_, rss)) = nodemem_testkit::clients::cpu_ticks_and_rss_kib(pid) {
                        peak = peak.max(rss);
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                peak
            }
        });
        PeakRss { stop, sampler }
    }

    /// The peak in MiB.
    fn stop(self) -> f64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.sampler.join().unwrap() as f64 / 1024.0
    }
}
