//! `cargo bench -p nodemem --bench agent_watches`: what 5,000 agents' watches cost the
//! apiserver, and how long a policy change takes to reach all of them (issue 32, goal 5).
//!
//! 5,000 Node objects (NODEMEM_WATCH_AGENTS), the release controller, and one process
//! holding every agent's watches, each agent with its own identity: the agent service
//! account's token bound to a pod on its node, as a DaemonSet pod's is (the apiserver
//! adds the node's name to the user). Each agent watches what the real one watches by a
//! selector: its NodeMemoryConfig by name, its Node by name, the pods bound to it
//! (`spec.nodeName`). The real agent also watches the namespaces' metadata
//! (cluster-wide, no selector); a fourth connection per agent does not fit beside the
//! other three here: kube-rs speaks HTTP/1.1, one connection per watch, and this machine
//! allows 20,000 open files per process (a hard limit root may not raise here: no
//! CAP_SYS_RESOURCE), the apiserver's included (15,000 watches and their connections
//! fit). NODEMEM_WATCH_OTHERS=namespaces measures that watch at 5,000 agents beside the
//! config's instead (`node,pods` is the default; any of node, pods, namespaces).
//!
//! From the apiserver's own metrics, before and after the watches open and across the
//! policy change: the watches it holds (`apiserver_longrunning_requests`), the lists
//! it answered from its watch cache (`apiserver_cache_list_total`) and the requests it
//! sent to etcd (`etcd_requests_total`), and the events its watch cache dispatched.
//! Then a policy over every node is created and the time until each agent's config
//! watch delivers its config is measured.

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is the run failing

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;
use kube::runtime::watcher;
use kube::Client;
use nodemem_api::{NodeMemoryConfig, NodeMemoryPolicy};
use nodemem_testkit::Identity;
use serde_json::json;

/// When each agent's config watch delivered a config with a revision.
type Arrivals = Arc<Mutex<BTreeMap<usize, Instant>>>;

fn main() {
    let agents: usize = std::env::var("NODEMEM_WATCH_AGENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let others = OtherWatch::from_env();
    let cluster = common::Cluster::start();
    let admin = cluster.cp.admin_kubeconfig().to_path_buf();
    let repo = nodemem_testkit::binaries::repo_root();
    nodemem_testkit::clients::kubectl(
        &admin,
        &[
            "apply",
            "-f",
            &repo.join("deploy/namespace.yaml").display().to_string(),
            "-f",
            &repo.join("deploy/agent").display().to_string(),
        ],
    )
    .unwrap();
    cluster.create_nodes(agents, "agent", "watched");
    let name = |i: usize| format!("agent-{i:05}");

    // Each agent's own identity (a pod bound to its node, and a token bound to it).
    let started = Instant::now();
    let clients: Vec<Client> = cluster.runtime.block_on(async {
        futures::stream::iter(0..agents)
            .map(|i| {
                let cp = &cluster.cp;
                async move { cp.client(&Identity::Agent(name(i))).await.unwrap() }
            })
            .buffered(32)
            .collect()
            .await
    });
    println!(
        "agent_watches: {agents} agent identities (pod and bound token each) in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let log = tempfile::NamedTempFile::new().unwrap();
    let mut controller = cluster.spawn_controller(&[], log.as_file());
    let before = cluster.runtime.block_on(metrics(&cluster.client));
    let memory_before = control_plane_memory(&cluster.cp);

    // Every agent's three watches; each config watch records when its config comes.
    let arrivals: Arrivals = Arc::default();
    let listed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Errors the config watches met (the apiserver closing one, a request refused):
    // each is retried by listing again.
    let failures = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, client) in clients.into_iter().enumerate() {
        let node = name(i);
        let by_name = watcher::Config::default().fields(&format!("metadata.name={node}"));
        let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
        let arrivals = arrivals.clone();
        let listed = listed.clone();
        let failures = failures.clone();
        tasks.push(cluster.runtime.spawn(async move {
            let mut events = Box::pin(watcher::watcher(configs, by_name));
            let mut first_list = true;
            while let Some(e) = events.next().await {
                match e {
                    Ok(watcher::Event::InitDone) if first_list => {
                        first_list = false;
                        listed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    // A watch listed again after an error brings its config in the list.
                    Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c))
                        if !c.spec.revision.is_empty() =>
                    {
                        arrivals
                            .lock()
                            .unwrap()
                            .entry(i)
                            .or_insert_with(Instant::now);
                    }
                    Err(_) => {
                        failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    _ => {}
                }
            }
        }));
        for watch in &others {
            tasks.push(cluster.runtime.spawn(watch.open(client.clone(), &node)));
        }
    }
    while listed.load(std::sync::atomic::Ordering::Relaxed) < agents {
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "the agents' watches did not all open"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // A moment for the node and pod watches opened last to be counted.
    std::thread::sleep(Duration::from_secs(5));
    let opened = cluster.runtime.block_on(metrics(&cluster.client));
    let memory_opened = control_plane_memory(&cluster.cp);
    println!(
        "agent_watches: {} watches opened in {:.1} s (each agent's config, {})",
        agents * (1 + others.len()),
        started.elapsed().as_secs_f64(),
        others
            .iter()
            .map(|w| w.resource())
            .collect::<Vec<_>>()
            .join(", ")
    );

    // A policy over every node: the time until each agent's watch brings its config.
    let (created, last_written) = cluster.runtime.block_on(async {
        let configs: Api<DynamicObject> = Api::all_with(
            cluster.client.clone(),
            &ApiResource::erase::<NodeMemoryConfig>(&()),
        );
        let mut all = common::listed_config_watch(&configs).await;
        let policies: Api<DynamicObject> = Api::all_with(
            cluster.client.clone(),
            &ApiResource::erase::<NodeMemoryPolicy>(&()),
        );
        let created = Instant::now();
        policies
            .create(&PostParams::default(), &serde_json::from_value(json!({
                "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
                "metadata": {"name": "watched"},
                "spec": {"nodeSelector": {"matchLabels": {"nodemem.io/pool": "watched"}},
                    "memoryQoS": {"throttlingFactor": 0.9, "reservationPolicy": "TieredReservation"},
                    "rollout": {"maxUnavailable": "100%"}}})).unwrap())
            .await
            .unwrap();
        // When the last config was written, as a watch of every config sees it.
        let mut written = std::collections::BTreeSet::new();
        while written.len() < agents {
            let e = tokio::time::timeout(Duration::from_secs(120), all.next()).await;
            if let Ok(Some(Ok(watcher::Event::Apply(c)))) = e {
                written.insert(c.metadata.name.unwrap());
            }
            assert!(created.elapsed() < Duration::from_secs(600), "fan-out did not finish");
        }
        (created, created.elapsed())
    });
    while arrivals.lock().unwrap().len() < agents {
        assert!(
            created.elapsed() < Duration::from_secs(600),
            "not every agent's watch brought its config: {} of {agents}",
            arrivals.lock().unwrap().len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let changed = cluster.runtime.block_on(metrics(&cluster.client));
    let mut reached: Vec<Duration> = arrivals
        .lock()
        .unwrap()
        .values()
        .map(|at| at.saturating_duration_since(created))
        .collect();
    reached.sort();
    let pct = |q: f64| nodemem_testkit::stats::percentile(&reached, q).as_secs_f64();
    let late = reached
        .iter()
        .filter(|r| **r > last_written + Duration::from_secs(1))
        .count();
    println!(
        "agent_watches: {late} agent(s) had their config more than 1 s after the last was written; the config watches met {} error(s) (each retried by listing again)",
        failures.load(std::sync::atomic::Ordering::Relaxed)
    );
    println!(
        "agent_watches: a policy over {agents} nodes reached every agent's watch {:.2} s after its creation (median {:.2} s, p99 {:.2} s); the last config was written at {:.2} s",
        pct(1.0),
        pct(0.5),
        pct(0.99),
        last_written.as_secs_f64()
    );
    report("opening the watches", &before, &opened);
    println!(
        "agent_watches: resident memory before the watches / with them: {}",
        memory_before
            .iter()
            .zip(&memory_opened)
            .map(|((name, a), (_, b))| format!("{name} {a:.0} / {b:.0} MiB"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    report("the policy change", &opened, &changed);
    let resources = ["nodememoryconfigs"]
        .into_iter()
        .chain(others.iter().map(|w| w.resource()));
    for resource in resources {
        println!(
            "agent_watches: open watches of {resource} now: {}",
            selected(
                &changed,
                "apiserver_longrunning_requests{",
                &format!("resource=\"{resource}\"")
            )
        );
    }
    for t in tasks {
        t.abort();
    }
    let _ = controller.kill();
    let _ = controller.wait();
}

/// The watches an agent opens besides its config's: its Node by name, the pods bound to
/// it, and the namespaces' metadata (cluster-wide). NODEMEM_WATCH_OTHERS chooses them
/// (default `node,pods`: with the config's, 15,000 watches at 5,000 agents; the real
/// agent's fourth, `namespaces`, does not fit beside them, see the top of this file).
#[derive(Clone, Copy)]
enum OtherWatch {
    Node,
    Pods,
    Namespaces,
}

impl OtherWatch {
    fn from_env() -> Vec<Self> {
        let chosen = std::env::var("NODEMEM_WATCH_OTHERS").unwrap_or_else(|_| "node,pods".into());
        chosen
            .split(',')
            .filter(|w| !w.is_empty())
            .map(|w| match w {
                "node" => OtherWatch::Node,
                "pods" => OtherWatch::Pods,
                "namespaces" => OtherWatch::Namespaces,
                other => {
                    panic!("NODEMEM_WATCH_OTHERS: {other:?} is not one of node, pods, namespaces")
                }
            })
            .collect()
    }

    /// The resource as the apiserver's metrics name it.
    fn resource(&self) -> &'static str {
        match self {
            OtherWatch::Node => "nodes",
            OtherWatch::Pods => "pods",
            OtherWatch::Namespaces => "namespaces",
        }
    }

    /// The watch as agent `node` opens it, its events read and dropped.
    fn open(
        self,
        client: Client,
        node: &str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        match self {
            OtherWatch::Node => {
                let by_name = watcher::Config::default().fields(&format!("metadata.name={node}"));
                Box::pin(drain(watcher::watcher(Api::<Node>::all(client), by_name)))
            }
            OtherWatch::Pods => {
                let bound = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
                Box::pin(drain(watcher::watcher(Api::<Pod>::all(client), bound)))
            }
            // Metadata only, as the agent reads them (their labels).
            OtherWatch::Namespaces => Box::pin(drain(watcher::watcher(
                Api::<kube::core::PartialObjectMeta<Namespace>>::all(client),
                watcher::Config::default(),
            ))),
        }
    }
}

/// The control plane's processes (name, resident MiB).
fn control_plane_memory(cp: &nodemem_testkit::ControlPlane) -> Vec<(String, f64)> {
    cp.pids()
        .into_iter()
        .filter_map(|pid| {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            let (_, rss) = nodemem_testkit::clients::cpu_ticks_and_rss_kib(pid).ok()?;
            Some((name.trim().to_string(), rss as f64 / 1024.0))
        })
        .collect()
}

/// Reads a watch's events and drops them.
async fn drain<K>(events: impl futures::Stream<Item = watcher::Result<watcher::Event<K>>>) {
    let mut events = Box::pin(events);
    while events.next().await.is_some() {}
}

/// The apiserver's metrics, as `series -> value`.
async fn metrics(client: &Client) -> BTreeMap<String, f64> {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The series of `family` whose labels contain `needle`, with their values.
fn selected(m: &BTreeMap<String, f64>, family: &str, needle: &str) -> String {
    m.iter()
        .filter(|(k, _)| k.starts_with(family) && k.contains(needle) && k.contains("WATCH"))
        .filter(|(_, v)| **v > 0.0)
        .map(|(k, v)| format!("{} = {v}", &k[family.len() - 1..]))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What changed between two readings in the families that say where the apiserver
/// served the agents from.
fn report(what: &str, from: &BTreeMap<String, f64>, to: &BTreeMap<String, f64>) {
    let families = [
        "apiserver_cache_list_total{",
        "etcd_requests_total{",
        "apiserver_watch_cache_events_dispatched_total{",
        "apiserver_watch_events_total{",
    ];
    for family in families {
        let mut deltas: Vec<String> = to
            .iter()
            .filter(|(k, _)| k.starts_with(family))
            .filter_map(|(k, v)| {
                let d = v - from.get(k).copied().unwrap_or(0.0);
                (d >= 1.0).then(|| format!("{} +{d}", &k[family.len() - 1..]))
            })
            .collect();
        deltas.sort();
        println!(
            "agent_watches: {what}: {} {}",
            &family[..family.len() - 1],
            if deltas.is_empty() {
                "(none)".to_string()
            } else {
                deltas.join("; ")
            }
        );
    }
}
