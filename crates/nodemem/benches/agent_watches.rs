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
//!
//! Then what each agent's watches deliver, counted per agent and resource (issue 64):
//! for the policy change; for a pod's life (created bound to its node, Running,
//! deleted) on NODEMEM_WATCH_PODS nodes (20); and for an apiserver restart under every
//! watch (stopped, started again 5 s later): the watches that had to list again, the
//! restarted apiserver's LIST requests per resource and its busiest second, the
//! requests its flow control turned away, and when it held as many watches as before.
//! NODEMEM_WATCH_RESTART=rolling runs a second apiserver on the same etcd from the
//! start, the agents reaching both through one address (a proxy standing for the load
//! balancer of a highly available control plane), and takes the first out as a
//! rolling upgrade does instead: whether the watches resume on the other from their
//! resource versions (the bookmarks keep them recent) or list again.

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is the run failing

mod common;
#[path = "agent_watches/pod_starts.rs"]
mod pod_starts;
#[path = "agent_watches/restart.rs"]
mod restart;
#[path = "agent_watches/tally.rs"]
mod tally;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use nodemem_api::{NodeMemoryConfig, NodeMemoryPolicy};
use nodemem_testkit::Identity;
use serde_json::json;

/// The configs' resource, as the apiserver's metrics name it.
const CONFIGS: &str = "nodememoryconfigs";

/// A pod's life on NODEMEM_WATCH_PODS nodes spread over the agents: each agent's events
/// per resource, and the pod watch events the apiserver sent in all, per pod.
fn pods_on_a_few_nodes(cluster: &common::Cluster, tally: &tally::Tally, agents: usize) {
    let pods: usize = std::env::var("NODEMEM_WATCH_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
        .clamp(1, agents);
    let nodes: Vec<String> = (0..pods)
        .map(|k| format!("agent-{:05}", k * agents / pods))
        .collect();
    let before = (
        tally.read(),
        cluster.runtime.block_on(metrics(&cluster.client)),
    );
    cluster
        .runtime
        .block_on(pod_starts::pods_live_and_go(&cluster.client, &nodes));
    let after = (
        tally.read(),
        cluster.runtime.block_on(metrics(&cluster.client)),
    );
    for line in tally::per_agent(&before.0, &after.0) {
        println!("agent_watches: a pod's life (created bound, Running, deleted) on {pods} node(s), per agent: {line}");
    }
    let sent = |m: &BTreeMap<String, f64>| -> f64 {
        m.iter()
            .filter(|(k, _)| {
                k.starts_with("apiserver_watch_events_total{") && k.contains("resource=\"pods\"")
            })
            .map(|(_, v)| v)
            .sum()
    };
    println!(
        "agent_watches: pod watch events the apiserver sent for them: {} ({:.1} per pod, to every watcher of pods: the bound agent and the cluster-wide ones)",
        sent(&after.1) - sent(&before.1),
        (sent(&after.1) - sent(&before.1)) / pods as f64
    );
}

/// The apiserver restarted under every watch: the agents' relists per resource (their
/// own count), and what the restarted apiserver saw.
fn restarted(cluster: &mut common::Cluster, tally: &tally::Tally, ha: Option<&restart::Ha>) {
    let before = tally.read();
    let m = cluster.runtime.block_on(metrics(&cluster.client));
    let watches: f64 = m
        .iter()
        .filter(|(k, _)| {
            k.starts_with("apiserver_longrunning_requests{") && k.contains("verb=\"WATCH\"")
        })
        .map(|(_, v)| v)
        .sum();
    let (seen, what) = match ha {
        None => (
            restart::restart_and_watch(cluster, Duration::from_secs(5), watches),
            "the apiserver restarted (from its stop to ready again",
        ),
        // The agents' own watches: the controller's and the controller-manager's stay
        // with the first apiserver (they do not go through the balancer).
        Some(ha) => (
            restart::roll_over(
                cluster,
                ha,
                before.events.values().map(Vec::len).sum::<usize>() as f64,
            ),
            "the first of two apiservers taken out, the second left (its stop took",
        ),
    };
    let after = tally.read();
    println!(
        "agent_watches: {what} {:.1} s, {} start(s)): {} watches open before; {} held again {} (at most {} in the window)",
        seen.down.as_secs_f64(),
        seen.starts,
        watches,
        if ha.is_some() { "the agents'" } else { "as many" },
        seen.watches_back.map_or_else(
            || "not within 90 s".to_string(),
            |d| format!("{:.1} s after it was ready", d.as_secs_f64())
        ),
        seen.most_watches
    );
    for resource in after.relists.keys() {
        println!(
            "agent_watches: after the restart, the agents' watches of {resource} that listed again: {} of {}",
            after.relists_since(&before, resource),
            after.events[resource].len()
        );
    }
    for line in tally::per_agent(&before, &after) {
        println!("agent_watches: the restart, per agent: {line}");
    }
    println!(
        "agent_watches: {}'s LIST requests in its first 90 s: {} (the busiest second {}); requests its flow control turned away: {}",
        if ha.is_some() { "the apiserver left" } else { "the restarted apiserver" },
        seen.lists
            .iter()
            .map(|(r, n)| format!("{r} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        seen.peak_lists_per_second,
        seen.rejected
    );
}

/// When each agent's config watch delivered a config with a revision.
type Arrivals = Arc<Mutex<BTreeMap<usize, Instant>>>;

fn main() {
    let agents: usize = std::env::var("NODEMEM_WATCH_AGENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let others = OtherWatch::from_env();
    let mut cluster = common::Cluster::start();
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
    let ha = std::env::var("NODEMEM_WATCH_RESTART")
        .is_ok_and(|v| v == "rolling")
        .then(|| restart::Ha::start(&cluster));
    let clients: Vec<Client> = cluster.runtime.block_on(async {
        futures::stream::iter(0..agents)
            .map(|i| {
                let (cp, ha) = (&cluster.cp, ha.as_ref());
                async move {
                    let agent = Identity::Agent(name(i));
                    match ha {
                        Some(ha) => ha.client(cp, &agent).await,
                        None => cp.client(&agent).await.unwrap(),
                    }
                }
            })
            .buffered(32)
            .collect()
            .await
    });
    println!(
        "agent_watches: {agents} agent identities (pod and bound token each) in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let before = cluster.runtime.block_on(metrics(&cluster.client));
    let memory_before = control_plane_memory(&cluster.cp);

    // Every agent's three watches; each config watch records when its config comes.
    let arrivals: Arrivals = Arc::default();
    let resources: Vec<&'static str> = std::iter::once(CONFIGS)
        .chain(others.iter().map(|w| w.resource()))
        .collect();
    let tally = Arc::new(tally::Tally::new(&resources, agents));
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
        let counts = tally.clone();
        tasks.push(cluster.runtime.spawn(async move {
            // With the agent's backoff (node_sync.rs): a watch the apiserver closed or
            // refused is opened again after a pause, not at once.
            let mut events = Box::pin(watcher::watcher(configs, by_name).default_backoff());
            let mut listed_once = false;
            while let Some(e) = events.next().await {
                if counts.count(CONFIGS, i, &e, &mut listed_once) {
                    listed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                match e {
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
            tasks.push(
                cluster
                    .runtime
                    .spawn(watch.open(client.clone(), &node, tally.clone(), i)),
            );
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

    // The controller starts once the watches are open: opening 15,000 of them keeps the
    // apiserver so busy that a controller started before them can miss its Lease's
    // renewal and exit, as one replica of a Deployment does.
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut controller = cluster.spawn_controller(&[], log.as_file());
    // A policy over every node: the time until each agent's watch brings its config.
    let before_policy = tally.read();
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
    // What follows the configs' writing (the controller's own status updates) counted
    // with them.
    std::thread::sleep(Duration::from_secs(5));
    let after_policy = tally.read();
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
    for line in tally::per_agent(&before_policy, &after_policy) {
        println!("agent_watches: the policy change, per agent: {line}");
    }
    pods_on_a_few_nodes(&cluster, &tally, agents);
    restarted(&mut cluster, &tally, ha.as_ref());
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

    /// The watch as agent `agent` (node `node`) opens it, with the agent's backoff, its
    /// events counted on `tally`.
    fn open(
        self,
        client: Client,
        node: &str,
        tally: Arc<tally::Tally>,
        agent: usize,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        let resource = self.resource();
        match self {
            OtherWatch::Node => {
                let by_name = watcher::Config::default().fields(&format!("metadata.name={node}"));
                let events = watcher::watcher(Api::<Node>::all(client), by_name).default_backoff();
                Box::pin(tally::counted(events, tally, resource, agent))
            }
            OtherWatch::Pods => {
                let bound = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
                let events = watcher::watcher(Api::<Pod>::all(client), bound).default_backoff();
                Box::pin(tally::counted(events, tally, resource, agent))
            }
            // Metadata only, as the agent reads them (their labels).
            OtherWatch::Namespaces => {
                let events = watcher::watcher(
                    Api::<kube::core::PartialObjectMeta<Namespace>>::all(client),
                    watcher::Config::default(),
                )
                .default_backoff();
                Box::pin(tally::counted(events, tally, resource, agent))
            }
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
