//! `cargo bench -p nodemem --bench controller_fanout`: the controller's fan-out on the
//! real control plane.
//!
//! 2,000 Node objects (no kubelets: Node objects only). First the sweep: a plain client
//! writes 2,000 NodeMemoryConfigs by server-side apply with 1, 4, 16 and 64 writers at
//! once (the apiserver serves many writes at a time); the fastest writer count is the
//! ceiling's. Its configs are the objects the controller writes (every spec field, the
//! annotation, an ownerReference to a policy), and a watch of every config reads them as
//! the fan-out's measuring watch does. Then rounds (NODEMEM_FANOUT_ROUNDS, 3): the
//! ceiling, then the release `nodemem controller` with its own identity and its default
//! `--write-concurrency` (NODEMEM_FANOUT_CONCURRENCY sets another), from a new policy's
//! creation until every node's config carries the policy's revision (seen through a
//! watch); a last ceiling closes them. Each fan-out is given against the mean of the two
//! ceilings beside it: this machine's speed drifts by a quarter within one run, so a
//! ceiling measured minutes away says little.
//!
//! In the first round, API writes are counted from the apiserver's own
//! `apiserver_request_total`: during the fan-out, and during a quiet period in which the
//! controller keeps reconciling (every second) with nothing to change; and the
//! controller's resident memory (its peak too: the fan-out's events queue while its
//! writes run).
//! NODEMEM_FANOUT_NODES changes the node count, NODEMEM_FANOUT_WRITERS=n measures the
//! ceiling with n writers without the sweep; NODEMEM_FANOUT_DIAG=1 adds a second
//! fan-out by a warm controller and the best plain client with the controller's identity
//! and with a second watch; NODEMEM_FANOUT_PROFILE=dir with NODEMEM_APISERVER_PROFILING=1
//! saves the apiserver's CPU profile during the first round's ceiling and fan-out;
//! NODEMEM_FANOUT_VIEWS=1 adds a fan-out with `kubectl nodemem status` and `explain`
//! read in its middle and after it.

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is the run failing

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
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
    let rounds: usize = std::env::var("NODEMEM_FANOUT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let profiles = Profiles::from_env();
    let cluster = common::Cluster::start();
    let configs: Api<DynamicObject> = Api::all_with(
        cluster.client.clone(),
        &ApiResource::erase::<NodeMemoryConfig>(&()),
    );
    cluster.create_nodes(nodes, "fan", "fan");
    let bench = Bench {
        cluster: &cluster,
        configs,
        // What the controller writes for the fan-out's policy: every field of it.
        spec: common::config_spec("fan", &policy_spec("fan")),
        nodes,
    };

    // The sweep: 1 to 64 writers; the fastest writer count is the ceiling's.
    // NODEMEM_FANOUT_WRITERS=n skips the sweep for that one count (at 50,000 nodes the
    // sweep alone took 7 minutes, and 16 writers were the fastest as at 20,000).
    let writer_counts: Vec<usize> = match std::env::var("NODEMEM_FANOUT_WRITERS") {
        Ok(n) => vec![n.parse().expect("NODEMEM_FANOUT_WRITERS is a writer count")],
        Err(_) => WRITERS.to_vec(),
    };
    let sweep: Vec<(usize, Duration)> = writer_counts
        .into_iter()
        .map(|writers| {
            (
                writers,
                bench.plain(&format!("plain{writers}"), writers, None),
            )
        })
        .collect();
    for (writers, took) in &sweep {
        println!(
            "controller_fanout: a plain client with {writers} writer(s): {nodes} configs in {:.2} s",
            took.as_secs_f64()
        );
    }
    let (best_writers, _) = sweep
        .iter()
        .copied()
        .min_by_key(|(_, took)| *took)
        .expect("at least one run");

    // The rounds: the ceiling (the best writer count) and the controller take turns,
    // and a last ceiling closes them, so that each fan-out stands between two ceilings
    // measured just before and just after it on the same apiserver.
    let chosen = std::env::var("NODEMEM_FANOUT_CONCURRENCY").ok();
    let concurrency = chosen
        .clone()
        .unwrap_or_else(|| nodemem_controller::DEFAULT_WRITE_CONCURRENCY.to_string());
    let mut args = vec!["--identity", "fanout-bench"];
    if let Some(c) = &chosen {
        args.extend(["--write-concurrency", c.as_str()]);
    }
    let (ceilings, fanouts, first) = bench.rounds(rounds, best_writers, &args, profiles.as_ref());
    if diag() {
        bench.diagnose(best_writers);
    }
    if std::env::var("NODEMEM_FANOUT_VIEWS").is_ok() {
        bench.views(
            &args,
            median(
                &ceilings
                    .iter()
                    .map(Duration::as_secs_f64)
                    .collect::<Vec<_>>(),
            ),
        );
    }
    report_rounds(nodes, best_writers, &concurrency, &ceilings, &fanouts);
    first.report(nodes);
    if let Some(p) = &profiles {
        p.report();
    }
}

/// The fan-out bench's cluster, the configs' API, the spec every config carries, and
/// the node count.
struct Bench<'a> {
    cluster: &'a common::Cluster,
    configs: Api<DynamicObject>,
    spec: serde_json::Value,
    nodes: usize,
}

impl Bench<'_> {
    /// `rounds` rounds of the ceiling (with `writers`) and the controller's fan-out of a
    /// new policy in turn, and a last ceiling: the ceilings' times, the fan-outs' times,
    /// and the first fan-out (the one measured in full, and profiled on request).
    fn rounds(
        &self,
        rounds: usize,
        writers: usize,
        args: &[&str],
        profiles: Option<&Profiles>,
    ) -> (Vec<Duration>, Vec<Duration>, FanoutRun) {
        let mut ceilings = Vec::new();
        let mut fanouts = Vec::new();
        let mut first = None;
        for round in 0..rounds {
            let profile = profiles.filter(|_| round == 0);
            let plain = profile.map(|p| p.at("plain"));
            ceilings.push(self.plain(&format!("round{round}"), writers, plain));
            let at = profile.map(|p| p.at("controller"));
            let run = self.controller(&format!("fan{round}"), args, round == 0, at, &|| {});
            fanouts.push(run.took);
            first.get_or_insert(run);
            self.remove_fanout(&format!("fan{round}"));
        }
        ceilings.push(self.plain(&format!("round{rounds}"), writers, None));
        (ceilings, fanouts, first.expect("one round at least"))
    }
    /// The ceiling: a plain client writing the objects the controller writes (the spec,
    /// the annotation, an ownerReference to a policy) with `writers` applies at once,
    /// while a watch of every config reads them as the fan-out's measuring watch does.
    /// The owner is a policy of its own that selects no node, created for the run (the
    /// controller is not running); the configs are removed after it, so that each run
    /// is measured alone. The time the writes took.
    fn plain(&self, prefix: &str, writers: usize, profile: Option<PathBuf>) -> Duration {
        let runtime = &self.cluster.runtime;
        let owner = format!("{prefix}-owner");
        let uid = runtime.block_on(create_policy(&self.cluster.client, &owner, "none"));
        let watching = drain_config_watch(runtime, &self.configs);
        let profiling = profile.map(|to| self.profile_apiserver(to, self.profile_seconds()));
        let cpu = CpuUse::start(self.cluster, None);
        let took = runtime.block_on(common::plain_writes(
            &self.configs,
            &self.spec,
            self.nodes,
            prefix,
            Some((&owner, &uid)),
            writers,
        ));
        let cpu = cpu.stop();
        if let Some(p) = profiling {
            runtime.block_on(p).unwrap();
        }
        watching.abort();
        println!("controller_fanout: CPU during the ceiling {prefix}: {cpu}");
        runtime.block_on(common::remove_plain(&self.configs, self.nodes, prefix));
        runtime.block_on(delete_policy(&self.cluster.client, &owner));
        took
    }

    /// The release controller's fan-out of a new policy `name` over every node: from the
    /// policy's creation until every node's config carries its revision (seen through a
    /// watch). With `measure`, also the API writes (the fan-out's and a quiet period's)
    /// and the controller's memory. The controller is stopped after it.
    fn controller(
        &self,
        name: &str,
        args: &[&str],
        measure: bool,
        profile: Option<PathBuf>,
        before_stop: &dyn Fn(),
    ) -> FanoutRun {
        let (cluster, runtime, client) =
            (self.cluster, &self.cluster.runtime, &self.cluster.client);
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut controller = cluster.spawn_controller(args, log.as_file());
        std::thread::sleep(Duration::from_secs(3));
        let peak = PeakRss::sample(controller.id());
        let profiling = profile.map(|to| self.profile_apiserver(to, self.profile_seconds()));
        let (took, first_seen, revision, before, terminated) = runtime.block_on(async {
            let mut events = common::listed_config_watch(&self.configs).await;
            let metrics = apiserver_metrics(client).await;
            let (before, terminated_before) =
                (writes_in(&metrics), terminated_config_watchers(&metrics));
            let started = Instant::now();
            let cpu = CpuUse::start(cluster, Some(controller.id()));
            create_policy(client, name, "fan").await;
            let mut written = std::collections::BTreeSet::new();
            let mut revision = String::new();
            let mut first_seen = None;
            while written.len() < self.nodes {
                let e = tokio::time::timeout(Duration::from_secs(120), events.next()).await;
                let Ok(Some(Ok(watcher::Event::Apply(c)))) = e else {
                    assert!(
                        started.elapsed() < Duration::from_secs(600),
                        "fan-out did not finish"
                    );
                    continue;
                };
                if c.data["spec"]["policy"].as_str() != Some(name) {
                    continue;
                }
                revision = c.data["spec"]["revision"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                written.insert(c.metadata.name.clone().unwrap());
                first_seen.get_or_insert_with(|| started.elapsed());
            }
            let terminated =
                terminated_config_watchers(&apiserver_metrics(client).await) - terminated_before;
            let took = started.elapsed();
            println!(
                "controller_fanout: CPU during the fan-out {name}: {}",
                cpu.stop()
            );
            let first_seen = first_seen.unwrap_or_default();
            (took, first_seen, revision, before, terminated)
        });
        if let Some(p) = profiling {
            runtime.block_on(p).unwrap();
        }
        let measured = measure.then(|| self.measure(&mut controller, name, before, peak));
        // NODEMEM_FANOUT_DIAG: a second fan-out by the same controller (the policy
        // edited), its connections and caches warm from the first.
        if measure && diag() {
            let second = runtime.block_on(second_fanout(client, &self.configs, name, self.nodes));
            println!(
                "controller_fanout diag: a second fan-out (the policy edited) by the same controller: {:.2} s",
                second.as_secs_f64()
            );
        }
        before_stop();
        let _ = controller.kill();
        let _ = controller.wait();
        let start_up = measure.then(|| self.start_up(args));
        FanoutRun {
            start_up,
            took,
            first_seen,
            revision,
            terminated,
            measured,
        }
    }

    /// The API writes of the fan-out (until the policy's status counts every node) and
    /// of a quiet period after it, and the controller's memory.
    fn measure(
        &self,
        controller: &mut std::process::Child,
        name: &str,
        before: BTreeMap<String, f64>,
        peak: PeakRss,
    ) -> Measured {
        let (runtime, client) = (&self.cluster.runtime, &self.cluster.client);
        // The policy's status catches up (updated nodes): part of the fan-out's writes.
        let fanout_writes = runtime.block_on(async {
            let policies: Api<DynamicObject> =
                Api::all_with(client.clone(), &ApiResource::erase::<NodeMemoryPolicy>(&()));
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let p = policies.get_status(name).await.unwrap();
                if p.data["status"]["updatedNodes"].as_u64() == Some(self.nodes as u64) {
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
            writes(client).await
        });
        let rss_after_fanout = rss_mib(controller.id());
        let rss_peak = peak.stop();
        std::thread::sleep(QUIET);
        let quiet_writes = runtime.block_on(writes(client));
        let rss_quiet = rss_mib(controller.id());
        Measured {
            fanout_writes: delta(&fanout_writes, &before),
            quiet_writes: delta(&quiet_writes, &fanout_writes),
            rss_peak,
            rss_after_fanout,
            rss_quiet,
        }
    }

    /// A controller started anew where every node has its config (and the policy is
    /// there): how long until it has listed, indexed and decided once, by its own log.
    fn start_up(&self, args: &[&str]) -> StartUp {
        let log = tempfile::NamedTempFile::new().unwrap();
        let spawned = Instant::now();
        let mut controller = self.cluster.spawn_controller(args, log.as_file());
        let line = loop {
            let text = std::fs::read_to_string(log.path()).unwrap_or_default();
            if let Some(line) = text.lines().find(|l| l.contains("started up:")) {
                break line.to_string();
            }
            assert!(
                spawned.elapsed() < Duration::from_secs(600),
                "the controller did not start up: {text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let until_logged = spawned.elapsed();
        let _ = controller.kill();
        let _ = controller.wait();
        StartUp { until_logged, line }
    }

    /// The names of every config there is now.
    async fn config_names(&self) -> Vec<String> {
        let listed = self.configs.list_metadata(&Default::default()).await;
        listed
            .unwrap()
            .items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect()
    }

    /// Removes a round's policy and its configs with the controller stopped: the
    /// policy's finalizer is taken off by hand, the configs deleted (those the garbage
    /// collector deletes first are skipped), until none is left.
    fn remove_fanout(&self, name: &str) {
        let (runtime, client) = (&self.cluster.runtime, &self.cluster.client);
        runtime.block_on(async {
            delete_policy(client, name).await;
            let names = self.config_names().await;
            futures::stream::iter(names)
                .map(|n| async move {
                    match self.configs.delete(&n, &Default::default()).await {
                        Ok(_) => Ok(()),
                        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                        Err(e) => Err(e),
                    }
                })
                .buffer_unordered(16)
                .try_collect::<Vec<_>>()
                .await
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(120);
            while !self.config_names().await.is_empty() {
                assert!(
                    Instant::now() < deadline,
                    "the {name} configs were not removed"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
    }

    /// NODEMEM_FANOUT_DIAG: the best plain client with the controller's identity (RBAC,
    /// the admission policy's match), and with a second watch of every config (as the
    /// controller's own).
    fn diagnose(&self, writers: usize) {
        let runtime = &self.cluster.runtime;
        let as_controller = runtime
            .block_on(self.cluster.cp.client(&Identity::Controller))
            .unwrap();
        let plain = Bench {
            cluster: self.cluster,
            configs: Api::all_with(as_controller, &ApiResource::erase::<NodeMemoryConfig>(&())),
            spec: self.spec.clone(),
            nodes: self.nodes,
        };
        let took = plain.plain("ident", writers, None);
        println!(
            "controller_fanout diag: the best plain client with the controller's identity: {:.2} s",
            took.as_secs_f64()
        );
        let second_watch = drain_config_watch(runtime, &self.configs);
        let took = self.plain("twowatch", writers, None);
        second_watch.abort();
        println!(
            "controller_fanout diag: the best plain client with a second watch of every config: {:.2} s",
            took.as_secs_f64()
        );
    }

    /// NODEMEM_FANOUT_VIEWS: what an on-call engineer sees with `kubectl nodemem status`
    /// and `explain` in the middle of a fan-out at this size and after it, and how long
    /// each takes (a fan-out of its own, after the rounds, so that the views' load falls
    /// on no measured round). No agent runs: every config is written and none applied,
    /// and the views must say so.
    fn views(&self, args: &[&str], ceiling_secs: f64) {
        let plugin_dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_nodemem"),
            plugin_dir.path().join("kubectl-nodemem"),
        )
        .unwrap();
        let admin = self.cluster.cp.admin_kubeconfig().to_path_buf();
        let view = |what: &[&str]| {
            let bin = nodemem_testkit::binaries::control_plane_binaries().unwrap();
            let started = Instant::now();
            let out = std::process::Command::new(&bin.kubectl)
                .args(what)
                .env("KUBECONFIG", &admin)
                .env(
                    "PATH",
                    format!(
                        "{}:{}",
                        plugin_dir.path().display(),
                        std::env::var("PATH").unwrap()
                    ),
                )
                .output()
                .unwrap();
            println!(
                "controller_fanout views: `kubectl {}` in {:.2} s, exit {}:\n{}{}",
                what.join(" "),
                started.elapsed().as_secs_f64(),
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let midway = Duration::from_secs_f64(ceiling_secs / 2.0);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(Duration::from_secs(3) + midway);
                view(&["nodemem", "status"]);
                view(&["nodemem", "explain", "fan-00000"]);
            });
            // After the fan-out, the controller still running: the policy's status
            // caught up first (as `measure` waits for it).
            self.controller("views", args, true, None, &|| {
                println!("controller_fanout views: after the fan-out:");
                view(&["nodemem", "status"]);
                view(&["nodemem", "explain", "fan-00000"]);
                view(&["get", "nmp"]);
            });
        });
    }

    /// A profile's length: the sweep's runs are at least this long (1 s per 1,000
    /// nodes, at least 1 s).
    fn profile_seconds(&self) -> u64 {
        (self.nodes as u64 / 1000).max(1)
    }

    /// The apiserver's CPU profile for `seconds` from now, saved to `to`.
    fn profile_apiserver(&self, to: PathBuf, seconds: u64) -> tokio::task::JoinHandle<()> {
        let client = self.cluster.client.clone();
        self.cluster.runtime.spawn(async move {
            let req = http::Request::get(format!("/debug/pprof/profile?seconds={seconds}"))
                .body(kube::client::Body::empty())
                .unwrap();
            let res = client.send(req).await.expect("the apiserver's profile");
            assert!(
                res.status().is_success(),
                "the apiserver's profile: {} (NODEMEM_APISERVER_PROFILING=1 turns it on)",
                res.status()
            );
            let bytes = res.into_body().collect_bytes().await.unwrap();
            std::fs::write(&to, &bytes).unwrap();
        })
    }
}

/// The CPU the control plane's processes, the controller (if running) and the bench
/// itself use during a run, and how busy the machine is: where a run's time goes.
struct CpuUse {
    started: Instant,
    processes: Vec<(&'static str, u32, u64)>,
    machine: (u64, u64),
}

impl CpuUse {
    fn start(cluster: &common::Cluster, controller: Option<u32>) -> Self {
        let pids = cluster.cp.pids();
        let mut named = vec![
            ("etcd", pids[0]),
            ("apiserver", pids[1]),
            ("controller-manager", pids[2]),
            ("bench", std::process::id()),
        ];
        named.extend(controller.map(|pid| ("controller", pid)));
        let processes = named
            .into_iter()
            .map(|(name, pid)| (name, pid, ticks(pid)))
            .collect();
        CpuUse {
            started: Instant::now(),
            processes,
            machine: machine_ticks(),
        }
    }

    /// CPU seconds per process, and the machine's busy share of all its cores.
    fn stop(self) -> String {
        let wall = self.started.elapsed().as_secs_f64();
        let (busy, total) = machine_ticks();
        let share = (busy - self.machine.0) as f64 / (total - self.machine.1).max(1) as f64;
        let per_process: Vec<String> = self
            .processes
            .iter()
            .map(|(name, pid, before)| {
                let secs = (ticks(*pid) - before) as f64 / clock_ticks();
                format!("{name} {secs:.2} s")
            })
            .collect();
        format!(
            "{} in {wall:.2} s; the machine {:.0} % busy",
            per_process.join(", "),
            share * 100.0
        )
    }
}

/// The ticks per second /proc counts CPU time in (USER_HZ), as the other benches ask.
fn clock_ticks() -> f64 {
    // SAFETY: sysconf reads a constant of the system; it has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

fn ticks(pid: u32) -> u64 {
    nodemem_testkit::clients::cpu_ticks_and_rss_kib(pid).map_or(0, |(t, _)| t)
}

/// The machine's busy and total ticks over all cores (/proc/stat's `cpu` line; idle and
/// iowait are not busy).
fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields[3] + fields[4];
    (total - idle, total)
}

/// Where the apiserver's profiles go (NODEMEM_FANOUT_PROFILE=dir): one during the first
/// round's ceiling, one during its fan-out.
struct Profiles(PathBuf);

impl Profiles {
    fn from_env() -> Option<Self> {
        let dir = PathBuf::from(std::env::var("NODEMEM_FANOUT_PROFILE").ok()?);
        assert!(
            std::env::var("NODEMEM_APISERVER_PROFILING").is_ok_and(|v| v == "1"),
            "NODEMEM_FANOUT_PROFILE needs NODEMEM_APISERVER_PROFILING=1 (the apiserver's /debug/pprof)"
        );
        std::fs::create_dir_all(&dir).unwrap();
        Some(Profiles(dir))
    }

    fn at(&self, run: &str) -> PathBuf {
        self.0.join(format!("apiserver-{run}.pprof"))
    }

    fn report(&self) {
        println!(
            "controller_fanout: the apiserver's CPU profiles: {} and {} (go tool pprof -top)",
            self.at("plain").display(),
            self.at("controller").display()
        );
    }
}

/// One fan-out by the controller.
struct FanoutRun {
    took: Duration,
    first_seen: Duration,
    revision: String,
    terminated: f64,
    measured: Option<Measured>,
    start_up: Option<StartUp>,
}

/// A new controller's start-up over every node's config: its own log line, read as a
/// user would (`started up: ...`), with the sizes it read.
struct StartUp {
    /// From the process's spawn until the line was written.
    until_logged: Duration,
    line: String,
}

/// The first round's writes and memory.
struct Measured {
    fanout_writes: (f64, String),
    quiet_writes: (f64, String),
    rss_peak: f64,
    rss_after_fanout: f64,
    rss_quiet: f64,
}

impl FanoutRun {
    fn report(&self, nodes: usize) {
        println!(
            "controller_fanout: the first round (revision {}): the first config seen {:.0} ms after the policy's creation (the policy's way to the controller and its first decision), the rest in {:.2} s",
            self.revision,
            self.first_seen.as_secs_f64() * 1000.0,
            (self.took - self.first_seen).as_secs_f64()
        );
        println!(
            "controller_fanout: config watches the apiserver closed during the fan-out for falling behind: {} (goal: 0)",
            self.terminated
        );
        if let Some(s) = &self.start_up {
            println!(
                "controller_fanout: a controller started anew over {nodes} configs logged its start-up {:.2} s after its spawn: {}",
                s.until_logged.as_secs_f64(),
                s.line.trim()
            );
        }
        let Some(m) = &self.measured else { return };
        let (total, detail) = &m.fanout_writes;
        let (quiet, quiet_detail) = &m.quiet_writes;
        println!(
            "controller_fanout: API writes during the fan-out: {total} = {:.2} per node ({detail}) (goal <= 2 per node per revision)",
            total / nodes as f64
        );
        println!(
            "controller_fanout: API writes in {} s of reconciling with nothing to change: {quiet} ({quiet_detail}) (goal: 0)",
            QUIET.as_secs()
        );
        println!(
            "controller_fanout: controller resident memory at {nodes} nodes: {:.1} MiB at its peak during the fan-out, {:.1} MiB after it, {:.1} MiB after the quiet period",
            m.rss_peak, m.rss_after_fanout, m.rss_quiet
        );
    }
}

/// Each fan-out against the mean of the ceilings just before and after it, and the
/// medians against each other.
fn report_rounds(
    nodes: usize,
    writers: usize,
    concurrency: &str,
    ceilings: &[Duration],
    fanouts: &[Duration],
) {
    let secs = |d: &Duration| d.as_secs_f64();
    let ratios: Vec<f64> = fanouts
        .iter()
        .enumerate()
        .map(|(i, f)| secs(f) / ((secs(&ceilings[i]) + secs(&ceilings[i + 1])) / 2.0))
        .collect();
    let list = |v: &[f64], unit: &str| {
        v.iter()
            .map(|x| format!("{x:.2}{unit}"))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let ceilings: Vec<f64> = ceilings.iter().map(secs).collect();
    let fanouts: Vec<f64> = fanouts.iter().map(secs).collect();
    println!(
        "controller_fanout: {nodes} nodes, rounds in turn: the ceiling ({writers} writers) {}; the controller (--write-concurrency {concurrency}) {}",
        list(&ceilings, " s"),
        list(&fanouts, " s")
    );
    println!(
        "controller_fanout: each fan-out against the mean of the ceilings beside it: {}; median {:.2}x; the medians' ratio {:.2}x (goal <= 1.2x)",
        list(&ratios, "x"),
        median(&ratios),
        median(&fanouts) / median(&ceilings)
    );
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn diag() -> bool {
    std::env::var("NODEMEM_FANOUT_DIAG").is_ok()
}

fn rss_mib(pid: u32) -> f64 {
    nodemem_testkit::clients::cpu_ticks_and_rss_kib(pid)
        .unwrap()
        .1 as f64
        / 1024.0
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

/// Deletes policy `name`, its finalizer taken off first (no controller runs to take
/// it off), and waits until it is gone.
async fn delete_policy(client: &Client, name: &str) {
    let policies: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<NodeMemoryPolicy>(&()));
    policies
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    policies.delete(name, &Default::default()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while policies.get_opt(name).await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "policy {name} was not deleted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Edits the fan-out's policy (a new revision) and waits until every config carries
/// it: the time it took.
async fn second_fanout(
    client: &Client,
    configs: &Api<DynamicObject>,
    name: &str,
    nodes: usize,
) -> Duration {
    let mut events = common::listed_config_watch(configs).await;
    let policies: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<NodeMemoryPolicy>(&()));
    let started = Instant::now();
    policies
        .patch(
            name,
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
