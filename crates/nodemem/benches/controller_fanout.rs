//! `cargo bench -p nodemem --bench controller_fanout`: the controller's fan-out on the
//! real control plane.
//!
//! 2,000 Node objects (no kubelets: Node objects only). First the ceiling: a plain
//! client writes 2,000 NodeMemoryConfigs with the same spec, one server-side apply
//! after the other as the controller does. Then the release `nodemem controller` with
//! its own identity: from the policy's creation until every node's config carries the
//! policy's revision (seen through a watch). API writes are counted from the
//! apiserver's own `apiserver_request_total`: during the fan-out, and during a quiet
//! period in which the controller keeps reconciling (every second) with nothing to
//! change. Then the controller's resident memory, and the ceiling once more (a run's
//! first bulk write is the slower one; the ratio is given against both).
//! NODEMEM_FANOUT_NODES changes the node count; NODEMEM_FANOUT_DIAG=1 adds plain
//! clients that pay for what the controller's writes carry besides the spec (a watcher
//! of every config, an ownerReference, the controller's identity).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::watcher;
use kube::Client;
use nodemem_api::{NodeMemoryConfig, NodeMemoryPolicy};
use nodemem_testkit::binaries::repo_root;
use nodemem_testkit::clients::kubectl;
use nodemem_testkit::{ControlPlane, Identity};
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
    let repo = repo_root();
    let cp = ControlPlane::start().expect("control plane");
    let admin = cp.admin_kubeconfig().to_path_buf();
    kubectl(
        &admin,
        &["apply", "-f", repo.join("crds").to_str().unwrap()],
    )
    .unwrap();
    kubectl(
        &admin,
        &[
            "wait",
            "--for=condition=Established",
            "crd/nodememoryconfigs.nodemem.io",
            "crd/nodememorypolicies.nodemem.io",
        ],
    )
    .unwrap();
    kubectl(
        &admin,
        &[
            "apply",
            "-f",
            repo.join("deploy/controller").to_str().unwrap(),
        ],
    )
    .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(cp.client(&Identity::Admin)).unwrap();
    let configs: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<NodeMemoryConfig>(&()));

    // The nodes.
    runtime.block_on(async {
        let api: Api<Node> = Api::all(client.clone());
        futures::stream::iter(0..nodes)
            .map(|i| {
                let api = api.clone();
                async move {
                    let node: Node =
                        serde_json::from_value(json!({"metadata": {"name": format!("fan-{i:05}"),
                        "labels": {"nodemem.io/pool": "fan"}}}))
                        .unwrap();
                    api.create(&PostParams::default(), &node).await.map(|_| ())
                }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<_>>()
            .await
            .unwrap();
    });

    // The ceiling: a plain client, the same specs, one apply after the other.
    let plain = runtime.block_on(plain_writes(&configs, nodes, "plain", None));
    // The ceiling's configs belong to no node: the controller deletes them; remove
    // them first so its fan-out is measured alone.
    runtime.block_on(async {
        for i in 0..nodes {
            configs
                .delete(&format!("plain-{i:05}"), &Default::default())
                .await
                .unwrap();
        }
    });

    // The controller.
    let kubeconfig = runtime
        .block_on(cp.kubeconfig(&Identity::Controller))
        .unwrap();
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut controller = Command::new(env!("CARGO_BIN_EXE_nodemem"))
        .args(["controller", "--tick-seconds", "1", "--metrics-addr", "off"])
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let (fanout, revision, before, terminated) = runtime.block_on(async {
        let mut events = Box::pin(watcher::watcher(configs.clone(), watcher::Config::default()));
        // The initial (empty) list first, so no write is missed.
        while let Some(e) = events.next().await {
            if matches!(e, Ok(watcher::Event::InitDone)) {
                break;
            }
        }
        let metrics = apiserver_metrics(&client).await;
        let (before, terminated_before) = (writes_in(&metrics), terminated_config_watchers(&metrics));
        let policies: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::erase::<NodeMemoryPolicy>(&()));
        let started = Instant::now();
        policies
            .create(&PostParams::default(), &serde_json::from_value(json!({
                "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
                "metadata": {"name": "fan"},
                "spec": {"nodeSelector": {"matchLabels": {"nodemem.io/pool": "fan"}},
                    "memoryQoS": {"throttlingFactor": 0.9, "reservationPolicy": "TieredReservation"},
                    "rollout": {"maxUnavailable": "100%"}}})).unwrap())
            .await
            .unwrap();
        let mut written = std::collections::BTreeSet::new();
        let mut revision = String::new();
        while written.len() < nodes {
            let e = tokio::time::timeout(Duration::from_secs(120), events.next()).await;
            let Ok(Some(Ok(watcher::Event::Apply(c)))) = e else {
                assert!(started.elapsed() < Duration::from_secs(600), "fan-out did not finish");
                continue;
            };
            revision = c.data["spec"]["revision"].as_str().unwrap_or("").to_string();
            written.insert(c.metadata.name.clone().unwrap());
        }
        let terminated =
            terminated_config_watchers(&apiserver_metrics(&client).await) - terminated_before;
        (started.elapsed(), revision, before, terminated)
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
    std::thread::sleep(QUIET);
    let quiet_writes = runtime.block_on(writes(&client));
    let rss = nodemem_testkit::clients::cpu_ticks_and_rss_kib(controller.id())
        .unwrap()
        .1 as f64
        / 1024.0;
    let _ = controller.kill();
    let _ = controller.wait();
    // The ceiling again after the fan-out: one run's ceilings differ by up to a quarter
    // on this machine (the first bulk write is the slower), so the ratio is given
    // against both.
    let plain_after = runtime.block_on(plain_writes(&configs, nodes, "after", None));
    // NODEMEM_FANOUT_DIAG: what the apiserver charges for what the controller's writes
    // carry besides the spec: a watcher of every config, an ownerReference to its
    // policy, the controller's identity (RBAC, the admission policy's match).
    if std::env::var("NODEMEM_FANOUT_DIAG").is_ok() {
        let uid = runtime.block_on(async {
            let policies: Api<DynamicObject> =
                Api::all_with(client.clone(), &ApiResource::erase::<NodeMemoryPolicy>(&()));
            policies.get("fan").await.unwrap().metadata.uid.unwrap()
        });
        let watching = runtime.spawn({
            let configs = configs.clone();
            async move {
                let mut events = Box::pin(watcher::watcher(configs, watcher::Config::default()));
                while events.next().await.is_some() {}
            }
        });
        let owned = runtime.block_on(plain_writes(&configs, nodes, "owned", Some(&uid)));
        let as_controller = runtime.block_on(async {
            let c = cp.client(&Identity::Controller).await.unwrap();
            let api: Api<DynamicObject> =
                Api::all_with(c, &ApiResource::erase::<NodeMemoryConfig>(&()));
            plain_writes(&api, nodes, "ident", Some(&uid)).await
        });
        watching.abort();
        println!(
            "controller_fanout diag: a plain client with a watcher and an ownerReference: {:.2} s; also with the controller's identity: {:.2} s",
            owned.as_secs_f64(),
            as_controller.as_secs_f64()
        );
    }
    let (total, detail) = delta(&fanout_writes, &before);
    let (quiet, quiet_detail) = delta(&quiet_writes, &fanout_writes);
    println!(
        "controller_fanout: {nodes} nodes, one policy (revision {revision}): every config written {:.2} s after the policy's creation; a plain client writing the same {nodes} configs one by one: {:.2} s before, {:.2} s after; ratio {:.2}x and {:.2}x (goal <= 1.3x)",
        fanout.as_secs_f64(),
        plain.as_secs_f64(),
        plain_after.as_secs_f64(),
        fanout.as_secs_f64() / plain.as_secs_f64(),
        fanout.as_secs_f64() / plain_after.as_secs_f64()
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
    println!("controller_fanout: controller resident memory at {nodes} nodes: {rss_after_fanout:.1} MiB after the fan-out, {rss:.1} MiB after the quiet period");
}

async fn plain_writes(
    configs: &Api<DynamicObject>,
    nodes: usize,
    prefix: &str,
    owner_uid: Option<&str>,
) -> Duration {
    let spec = json!({"policy": "fan", "revision": "ceiling",
        "memoryQoS": {"throttlingFactor": 0.9, "reservationPolicy": "TieredReservation"}});
    let started = Instant::now();
    let apply = PatchParams::apply("plain-client").force();
    for i in 0..nodes {
        let name = format!("{prefix}-{i:05}");
        let mut metadata = json!({"name": name,
            "annotations": {"nodemem.io/spec-changed-at": "2026-11-22T10:00:00Z"}});
        if let Some(uid) = owner_uid {
            metadata["ownerReferences"] = json!([{"apiVersion": "nodemem.io/v1alpha1",
                "kind": "NodeMemoryPolicy", "name": "fan", "uid": uid, "controller": true,
                "blockOwnerDeletion": false}]);
        }
        configs
            .patch(
                &name,
                &apply,
                &Patch::Apply(json!({"apiVersion": "nodemem.io/v1alpha1",
                "kind": "NodeMemoryConfig", "metadata": metadata, "spec": spec})),
            )
            .await
            .unwrap();
    }
    started.elapsed()
}
