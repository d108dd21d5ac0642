//! `cargo bench -p nodemem --bench controller_rollout`: the controller's own time in a
//! rollout, on the real control plane (issue 32, goal 2).
//!
//! 1,000 Node objects (NODEMEM_ROLLOUT_NODES), the release controller, and agents
//! simulated by one client that watches every config and acknowledges each as soon as
//! its spec carries a revision its status does not: `observedRevision` and `Applied`
//! and `Healthy` True for the config's generation, as an agent's status apply writes
//! them. A policy with `maxUnavailable: 25%` and `minReadySeconds: 0` is created; an
//! acknowledged node is ready at once and its slot goes to the next node.
//!
//! Figures: for every write that waited for a slot, the time from the acknowledgement
//! that freed it (the k-th acknowledgement frees the slot of the (maxUnavailable+k)-th
//! write) to that write as the watch saw it: the controller's reaction (watch in,
//! decision, apply out; the watch's own delivery is in it too). The whole rollout's
//! time, and that time minus the acknowledgements' own (from a write seen to its
//! acknowledgement answered, summed per node over the slots: what the simulated agents
//! took, not the controller). The writes per node, from the apiserver's count.

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is the run failing

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::watcher;
use nodemem_api::{NodeMemoryConfig, NodeMemoryPolicy};
use serde_json::json;

/// When each node's config was seen written with the target revision, and when its
/// acknowledgement was answered.
#[derive(Default)]
struct Timeline {
    written: BTreeMap<String, Instant>,
    acked: BTreeMap<String, Instant>,
}

fn main() {
    let nodes: usize = std::env::var("NODEMEM_ROLLOUT_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let max_unavailable = nodes.div_ceil(4);
    let cluster = common::Cluster::start();
    cluster.create_nodes(nodes, "roll", "roll");
    let client = cluster.client.clone();
    let configs: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<NodeMemoryConfig>(&()));
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut controller = cluster.spawn_controller(&[], log.as_file());
    std::thread::sleep(Duration::from_secs(3));

    let timeline = Arc::new(Mutex::new(Timeline::default()));
    let (started, finished, config_writes) = cluster.runtime.block_on(async {
        let mut events = common::listed_config_watch(&configs).await;
        let writes_before = config_spec_writes(&client).await;
        let policies: Api<DynamicObject> =
            Api::all_with(client.clone(), &ApiResource::erase::<NodeMemoryPolicy>(&()));
        let started = Instant::now();
        policies
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
                "metadata": {"name": "roll"}, "spec": policy_spec()}))
                .unwrap(),
            )
            .await
            .unwrap();
        // The simulated agents: each config acknowledged as soon as it is seen.
        let mut acks = futures::stream::FuturesUnordered::new();
        let mut seen = BTreeSet::new();
        while timeline.lock().unwrap().acked.len() < nodes {
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "the rollout did not finish"
            );
            tokio::select! {
                Some(e) = events.next() => {
                    let Ok(watcher::Event::Apply(c)) = e else { continue };
                    let name = c.metadata.name.clone().unwrap();
                    if c.data["spec"]["revision"].as_str().is_none() || !seen.insert(name.clone()) {
                        continue;
                    }
                    timeline.lock().unwrap().written.insert(name.clone(), Instant::now());
                    acks.push(acknowledge(configs.clone(), c, timeline.clone()));
                }
                Some(()) = acks.next(), if !acks.is_empty() => {}
            }
        }
        let finished = Instant::now();
        // A moment for a write in flight to be counted.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let writes = config_spec_writes(&client).await - writes_before;
        (started, finished, writes)
    });
    let _ = controller.kill();
    let _ = controller.wait();
    // What writing one batch costs this apiserver (the bound on a freed slot's wait,
    // below): a plain client writes as many configs as the batch has, with the
    // controller's 16 writers, with the controller stopped.
    let batch_write = cluster.runtime.block_on(async {
        let spec = common::config_spec("roll", &policy_spec());
        let took = common::plain_writes(&configs, &spec, max_unavailable, "bound", None, 16).await;
        common::remove_plain(&configs, max_unavailable, "bound").await;
        took
    });

    let t = timeline.lock().unwrap();
    let mut writes: Vec<Instant> = t.written.values().copied().collect();
    let mut acks: Vec<Instant> = t.acked.values().copied().collect();
    writes.sort();
    acks.sort();
    // The k-th acknowledgement frees the slot of the (maxUnavailable + k)-th write.
    let mut reactions: Vec<Duration> = writes
        .iter()
        .skip(max_unavailable)
        .zip(&acks)
        .map(|(write, ack)| write.saturating_duration_since(*ack))
        .collect();
    reactions.sort();
    let acking: Duration = t
        .written
        .iter()
        .filter_map(|(node, w)| Some(t.acked.get(node)?.saturating_duration_since(*w)))
        .sum();
    let whole = finished - started;
    let pct = |q: f64| nodemem_testkit::stats::percentile(&reactions, q).as_secs_f64() * 1000.0;
    println!(
        "controller_rollout: {nodes} nodes, maxUnavailable 25% ({max_unavailable}): from an acknowledgement to the write it makes room for: median {:.1} ms, p90 {:.1} ms, p99 {:.1} ms over {} writes (goal: median < 100 ms)",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        reactions.len()
    );
    // The figure: the batches in the order the configs were written
    // (maxUnavailable each); from a batch's last acknowledgement to the next batch's
    // first write. Slots are reused as soon as they free, so a batch may begin before
    // the one before it is all acknowledged: that counts as no wait at all.
    let mut by_write: Vec<(&Instant, &String)> = t.written.iter().map(|(n, w)| (w, n)).collect();
    by_write.sort();
    let batches: Vec<&[(&Instant, &String)]> = by_write.chunks(max_unavailable).collect();
    let mut gaps: Vec<Duration> = batches
        .windows(2)
        .map(|pair| {
            let last_ack = pair[0]
                .iter()
                .filter_map(|(_, n)| t.acked.get(*n))
                .max()
                .copied()
                .expect("every node acknowledged");
            pair[1][0].0.saturating_duration_since(last_ack)
        })
        .collect();
    gaps.sort();
    println!(
        "controller_rollout: from a batch's last acknowledgement to the next batch's first write: {} (median {:.1} ms; goal: median < 100 ms)",
        gaps.iter()
            .map(|g| format!("{:.1} ms", g.as_secs_f64() * 1000.0))
            .collect::<Vec<_>>()
            .join(", "),
        nodemem_testkit::stats::percentile(&gaps, 0.5).as_secs_f64() * 1000.0
    );
    println!(
        "controller_rollout: writing one batch of {max_unavailable} configs takes this apiserver {:.1} ms (a plain client, 16 writers): a slot freed while a batch is being written waits for up to that long behind it",
        batch_write.as_secs_f64() * 1000.0
    );
    // The slots run side by side: per slot, the acknowledgements it waited for are
    // the sum over all nodes divided by the slots.
    let acking_per_slot = acking.as_secs_f64() / max_unavailable as f64;
    println!(
        "controller_rollout: the whole rollout {:.2} s; the acknowledgements' own time per slot {:.2} s ({:.2} s over all nodes / {max_unavailable} slots); the rollout minus the acknowledgements: {:.2} s",
        whole.as_secs_f64(),
        acking_per_slot,
        acking.as_secs_f64(),
        (whole.as_secs_f64() - acking_per_slot).max(0.0)
    );
    println!(
        "controller_rollout: config spec writes {config_writes} = {:.2} per node (goal 1.00)",
        config_writes / nodes as f64
    );
}

/// The rollout's policy: 25 % of the pool at a time, ready once acknowledged.
fn policy_spec() -> serde_json::Value {
    json!({"nodeSelector": {"matchLabels": {"nodemem.io/pool": "roll"}},
        "memoryQoS": {"throttlingFactor": 0.9, "reservationPolicy": "TieredReservation"},
        "rollout": {"maxUnavailable": "25%", "minReadySeconds": 0}})
}

/// What an agent writes once it applied its config's revision.
async fn acknowledge(
    configs: Api<DynamicObject>,
    c: DynamicObject,
    timeline: Arc<Mutex<Timeline>>,
) {
    let name = c.metadata.name.clone().unwrap();
    let revision = c.data["spec"]["revision"].clone();
    let generation = c.metadata.generation;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let condition = |type_: &str| {
        json!({"type": type_, "status": "True", "reason": type_,
        "message": "", "observedGeneration": generation, "lastTransitionTime": now})
    };
    let status = json!({"apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
        "metadata": {"uid": c.metadata.uid},
        "status": {"observedRevision": revision, "managedPods": 0,
            "conditions": [condition("Applied"), condition("Healthy")]}});
    configs
        .patch_status(
            &name,
            &PatchParams::apply("nodemem-agent").force(),
            &Patch::Apply(&status),
        )
        .await
        .unwrap();
    timeline.lock().unwrap().acked.insert(name, Instant::now());
}

/// Writes of NodeMemoryConfig specs (creates, applies, updates; not status) by the
/// apiserver's own count.
async fn config_spec_writes(client: &kube::Client) -> f64 {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| l.contains("resource=\"nodememoryconfigs\"") && l.contains("subresource=\"\""))
        .filter(|l| {
            !["GET", "LIST", "WATCH"]
                .iter()
                .any(|v| l.contains(&format!("verb=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
