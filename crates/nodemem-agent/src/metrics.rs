//! The agent's Prometheus metrics (prometheus-client) and its HTTP endpoints: `/metrics`,
//! `/healthz` (the process serves) and `/readyz` (the node has been enforced at least
//! once, from the apiserver or from the state directory).
//!
//! Label values come from small fixed sets, except the per-pod memory signals (one
//! series per managed pod, removed with the pod) and the per-container ones, which are
//! off unless asked for and capped: a node's series stay bounded whatever it runs.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

mod reclaim;
pub use reclaim::ReclaimMetrics;

/// Why a pass ran.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Trigger {
    Start,
    Event,
    Cgroup,
    Resync,
}

impl Trigger {
    fn label(self) -> &'static str {
        match self {
            Trigger::Start => "start",
            Trigger::Event => "event",
            Trigger::Cgroup => "cgroup",
            Trigger::Resync => "resync",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TriggerLabel {
    trigger: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabel {
    request: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// A workload class of the node's policy: at most 16 values (the CRD's bound).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabel {
    class: String,
}

/// The resource one of the agent's watches reads (config, node, pods, namespaces).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabel {
    resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QosLabel {
    qos: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PodLabel {
    namespace: String,
    pod: String,
    qos: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ContainerLabel {
    namespace: String,
    pod: String,
    container: String,
}

/// One managed pod's memory signals, and its containers' when per-container series
/// are on.
pub struct PodSignals<'a> {
    pub namespace: &'a str,
    pub pod: &'a str,
    pub qos: &'static str,
    pub reading: crate::health::Reading,
    pub containers: Vec<(&'a str, crate::health::Reading)>,
}

/// The config the agent enforces: its node (the config's name), its policy (the node's
/// pool) and revision. The node names the agent's series in alerts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConfigLabel {
    node: String,
    policy: String,
    revision: String,
}

/// One condition of the node's config as the agent last computed it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionLabel {
    condition: String,
    status: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrnoLabel {
    errno: &'static str,
}

/// The errno of a failed write as a bounded label.
pub fn errno_label(errno: Option<i32>) -> &'static str {
    match errno {
        Some(libc::EINVAL) => "EINVAL",
        Some(libc::EACCES) => "EACCES",
        Some(libc::EPERM) => "EPERM",
        Some(libc::ENOENT) => "ENOENT",
        Some(libc::ENOSPC) => "ENOSPC",
        Some(libc::EISDIR) => "EISDIR",
        Some(libc::EBUSY) => "EBUSY",
        Some(_) => "other",
        None => "none",
    }
}

pub struct Metrics {
    registry: Registry,
    passes: Family<TriggerLabel, Counter>,
    pass_seconds: Histogram,
    reaction_seconds: Histogram,
    writes: Family<ResultLabel, Counter>,
    write_errors: Family<ErrnoLabel, Counter>,
    drift_repairs: Counter,
    unit_updates: Family<ResultLabel, Counter>,
    runtime_records: Family<ResultLabel, Counter>,
    nri_requests: Family<ResultLabel, Counter>,
    nri_answer_seconds: Family<RequestLabel, Histogram, fn() -> Histogram>,
    nri_connections: Family<ResultLabel, Counter>,
    nri_registered: Gauge,
    status_writes: Family<ResultLabel, Counter>,
    watch_lists: Family<ResourceLabel, Counter>,
    memory_min: Gauge,
    memory_low: Gauge,
    managed_pods: Gauge,
    class_pods: Family<ClassLabel, Gauge>,
    pinning_requests: Gauge,
    pinning_errors: Gauge,
    high_events: Family<QosLabel, Counter>,
    oom_kills: Family<QosLabel, Counter>,
    /// Each managed pod's memory.events (high, oom_kill) when last read: the QoS
    /// classes' counters grow by what each pod's grew since (a pod that is gone leaves
    /// them as they are, as a counter must).
    last_pod_events: std::sync::Mutex<std::collections::HashMap<(String, String), (u64, u64)>>,
    full_pressure: Family<QosLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pod_high_events: Family<PodLabel, Counter>,
    pod_oom_kills: Family<PodLabel, Counter>,
    container_high_events: Family<ContainerLabel, Counter>,
    container_oom_kills: Family<ContainerLabel, Counter>,
    containers_not_exported: Gauge,
    observed_containers: Gauge,
    throttled_containers: Gauge,
    observation_sample_seconds: Histogram,
    reliefs: Family<ReasonLabel, Counter>,
    relief_watched: Gauge,
    relief_polled: Gauge,
    relief_triggers_fired: Counter,
    relieved: Gauge,
    /// Proactive reclaim (`reclaim`).
    pub reclaim: ReclaimMetrics,
    conditions: Family<ConditionLabel, Gauge>,
    config: Family<ConfigLabel, Gauge>,
    /// At most this many containers get series of their own (0: none).
    container_series_cap: usize,
    ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut root = Registry::default();
        nodemem_plumbing::build_info::register(&mut root, "agent");
        let m = Metrics {
            passes: Family::default(),
            pass_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            reaction_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            writes: Family::default(),
            write_errors: Family::default(),
            drift_repairs: Counter::default(),
            unit_updates: Family::default(),
            runtime_records: Family::default(),
            nri_requests: Family::default(),
            nri_answer_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.00005, 2.0, 16))
            }),
            nri_connections: Family::default(),
            nri_registered: Gauge::default(),
            status_writes: Family::default(),
            watch_lists: Family::default(),
            memory_min: Gauge::default(),
            memory_low: Gauge::default(),
            managed_pods: Gauge::default(),
            class_pods: Family::default(),
            pinning_requests: Gauge::default(),
            pinning_errors: Gauge::default(),
            high_events: Family::default(),
            oom_kills: Family::default(),
            last_pod_events: Default::default(),
            full_pressure: Family::default(),
            pod_high_events: Family::default(),
            pod_oom_kills: Family::default(),
            container_high_events: Family::default(),
            container_oom_kills: Family::default(),
            containers_not_exported: Gauge::default(),
            observed_containers: Gauge::default(),
            throttled_containers: Gauge::default(),
            observation_sample_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 14)),
            reliefs: Family::default(),
            relief_watched: Gauge::default(),
            relief_polled: Gauge::default(),
            relief_triggers_fired: Counter::default(),
            relieved: Gauge::default(),
            reclaim: ReclaimMetrics::default(),
            conditions: Family::default(),
            config: Family::default(),
            container_series_cap: 0,
            ready: AtomicBool::new(false),
            registry: Registry::default(),
        };
        let registry = root.sub_registry_with_prefix("nodemem_agent");
        m.register_passes(registry);
        m.register_nri(registry);
        m.register_status(registry);
        m.register_node(registry);
        m.register_signals(registry);
        m.register_observation(registry);
        m.reclaim.register(registry);
        Metrics {
            registry: root,
            ..m
        }
    }

    /// Registers passes and writes: what the agent did.
    fn register_passes(&self, registry: &mut Registry) {
        registry.register(
            "passes",
            "Enforcement passes, by what started them",
            self.passes.clone(),
        );
        registry.register(
            "pass_duration_seconds",
            "Time of one enforcement pass",
            self.pass_seconds.clone(),
        );
        registry.register(
            "reaction_seconds",
            "From a cgroup directory appearing to its values being written",
            self.reaction_seconds.clone(),
        );
        registry.register(
            "writes",
            "Interface file writes, by result",
            self.writes.clone(),
        );
        registry.register(
            "write_errors",
            "Failed writes, by errno",
            self.write_errors.clone(),
        );
        registry.register(
            "drift_repairs",
            "Values found changed by someone else and written back on a resync",
            self.drift_repairs.clone(),
        );
        registry.register(
            "systemd_unit_updates",
            "Units told nodemem's values as properties (systemd-driver nodes), by result: ok, gone (the unit ended meanwhile), failed",
            self.unit_updates.clone(),
        );
        registry.register(
            "runtime_records",
            "New container cgroups looked up in the container runtime's record, by result: named (its pod and container known at once), unusable (the record could not be read or names another pod; the pod status decides)",
            self.runtime_records.clone(),
        );
    }

    /// Registers the NRI plugin: its answers and its connection to the runtime.
    fn register_nri(&self, registry: &mut Registry) {
        registry.register(
            "nri_requests",
            "The container runtime's NRI requests, by result: adjusted (created with nodemem's values), nothing (nothing of nodemem's to set), unknown_pod (the pod was not known in time: created without, written once its cgroup appears), kept (a container update kept nodemem's values), sandbox (a pod cgroup written before its containers), sandbox_late (not written within the wait)",
            self.nri_requests.clone(),
        );
        registry.register(
            "nri_answer_seconds",
            "Time the NRI plugin took to answer, by request: CreateContainer, RunPodSandbox (the runtime allows 2 s; both are in every pod's start)",
            self.nri_answer_seconds.clone(),
        );
        registry.register(
            "nri_connections",
            "Attempts to register with the runtime's NRI socket, by result: registered, closed (the runtime went away), or why it failed (NoSocket, NotListening, Refused, NotConfigured, ConnectFailed)",
            self.nri_connections.clone(),
        );
        registry.register(
            "nri_registered",
            "1 while the agent is registered as the runtime's NRI plugin",
            self.nri_registered.clone(),
        );
    }

    /// Registers the status writes (what the node's config status costs the apiserver).
    fn register_status(&self, registry: &mut Registry) {
        registry.register(
            "watch_lists",
            "Lists the agent's watches began, by resource: one per watch at the agent's start, and one each time the apiserver could not resume a watch where it stopped (410 Gone: an apiserver restarted alone)",
            self.watch_lists.clone(),
        );
        registry.register(
            "status_writes",
            "Writes of the node's config status, by result: ok, error (tried again), gone (the config it was for is gone); figures and counters alone wait for --status-refresh-seconds",
            self.status_writes.clone(),
        );
        registry.register(
            "condition",
            "The node's config conditions as the agent last computed them (value 1), by condition, status and reason",
            self.conditions.clone(),
        );
        registry.register(
            "config_info",
            "The config the agent enforces (value 1): its policy, the node's pool, and revision; alerts join the node's series to its pool by it",
            self.config.clone(),
        );
    }

    /// Registers the node: totals, managed pods, NUMA pinning.
    fn register_node(&self, registry: &mut Registry) {
        registry.register(
            "node_memory_min_bytes",
            "Sum of pod memory.min on the node (kubelet_memory_qos_node_memory_min_bytes)",
            self.memory_min.clone(),
        );
        registry.register(
            "node_memory_low_bytes",
            "Sum of pod memory.low on the node (kubelet_memory_qos_node_memory_low_bytes)",
            self.memory_low.clone(),
        );
        registry.register(
            "managed_pods",
            "Pods whose cgroups the agent manages",
            self.managed_pods.clone(),
        );
        registry.register(
            "class_pods",
            "Managed pods that run a workload class of the node's policy (nodemem.io/class), by class; the others run the pool's settings",
            self.class_pods.clone(),
        );
        registry.register(
            "memory_manager_pinning_requests",
            "NUMA pinning requests of the Static policy (memory_manager_pinning_requests_total)",
            self.pinning_requests.clone(),
        );
        registry.register(
            "memory_manager_pinning_errors",
            "NUMA pinning requests refused (memory_manager_pinning_errors_total)",
            self.pinning_errors.clone(),
        );
    }

    /// Registers the managed pods' and containers' signals.
    fn register_signals(&self, registry: &mut Registry) {
        registry.register(
            "memory_high_events",
            "memory.high crossings (memory.events high) of the managed pods of a QoS class since the agent started",
            self.high_events.clone(),
        );
        registry.register(
            "oom_kills",
            "OOM kills (memory.events oom_kill) in the managed pods of a QoS class since the agent started",
            self.oom_kills.clone(),
        );
        registry.register(
            "memory_pressure_full_avg60_ratio",
            "The highest full memory pressure (PSI avg60, a ratio: 0.05 is 5%) among the managed pods of a QoS class",
            self.full_pressure.clone(),
        );
        registry.register(
            "pod_memory_high_events",
            "memory.high crossings (memory.events high) of a managed pod",
            self.pod_high_events.clone(),
        );
        registry.register(
            "pod_oom_kills",
            "OOM kills (memory.events oom_kill) in a managed pod",
            self.pod_oom_kills.clone(),
        );
        registry.register(
            "container_memory_high_events",
            "memory.high crossings of a managed container (with --per-container-metrics, up to its cap)",
            self.container_high_events.clone(),
        );
        registry.register(
            "container_oom_kills",
            "OOM kills in a managed container (with --per-container-metrics, up to its cap)",
            self.container_oom_kills.clone(),
        );
        registry.register(
            "containers_not_exported",
            "Managed containers beyond --per-container-metrics-cap, which have no series of their own",
            self.containers_not_exported.clone(),
        );
    }

    /// Registers the observation and relief.
    fn register_observation(&self, registry: &mut Registry) {
        registry.register(
            "observed_containers",
            "Managed containers sampled for the observation (working set, memory.peak, memory.high events)",
            self.observed_containers.clone(),
        );
        registry.register(
            "throttled_containers",
            "Observed containers whose working set stood above memory.high since the revision, or that the kernel throttled (under enforcement: Observe, the memory.high that would be set)",
            self.throttled_containers.clone(),
        );
        registry.register(
            "observation_sample_seconds",
            "Time of one observation sample of every managed container",
            self.observation_sample_seconds.clone(),
        );
        registry.register(
            "relief_decisions",
            "Relief decisions on containers memory.high chokes, by reason: MemoryHighRelieved, MemoryHighRestored, ReliefRefused",
            self.reliefs.clone(),
        );
        registry.register(
            "relief_watched_containers",
            "Containers watched for relief (memoryQoS.relief)",
            self.relief_watched.clone(),
        );
        registry.register(
            "relief_polled_containers",
            "Watched containers without a PSI trigger, read on every tick instead",
            self.relief_polled.clone(),
        );
        registry.register(
            "relief_triggers_fired",
            "Times a container's PSI trigger woke the agent (its memory stalled past the policy's threshold)",
            self.relief_triggers_fired.clone(),
        );
        registry.register(
            "relieved_containers",
            "Containers whose memory.high relief raises now",
            self.relieved.clone(),
        );
    }

    /// A relief decision (its Event reason).
    pub fn relief(&self, reason: &'static str) {
        self.reliefs.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// A container's PSI trigger fired.
    pub fn relief_trigger_fired(&self) {
        self.relief_triggers_fired.inc();
    }

    /// Containers watched for relief, of them read on every tick, and relieved now.
    pub fn relief_watch(&self, watched: usize, polled: usize, relieved: usize) {
        self.relief_watched.set(watched as i64);
        self.relief_polled.set(polled as i64);
        self.relieved.set(relieved as i64);
    }

    /// One observation sample: containers sampled, of them throttled (or that would
    /// be), and how long it took.
    pub fn observation(&self, observed: usize, throttled: usize, seconds: f64) {
        self.observed_containers.set(observed as i64);
        self.throttled_containers.set(throttled as i64);
        self.observation_sample_seconds.observe(seconds);
    }

    /// Per-container series for up to `cap` containers (`--per-container-metrics`).
    pub fn with_container_series(cap: usize) -> Self {
        Metrics {
            container_series_cap: cap,
            ..Self::new()
        }
    }

    /// Whether containers' own signals are wanted (they cost a read per container).
    pub fn wants_containers(&self) -> bool {
        self.container_series_cap > 0
    }

    /// Memory signals per QoS class (`guaranteed`, `burstable`, `besteffort`, three
    /// series per metric), per managed pod, and per container up to the cap. Series of
    /// pods and containers that are gone are dropped.
    pub fn signals(&self, pods: &[PodSignals<'_>]) {
        self.class_signals(pods);
        // A pod's series counts its cgroup's events (a counter that starts again when
        // the pod is made again under its name).
        self.pod_high_events.clear();
        self.pod_oom_kills.clear();
        for p in pods {
            let label = PodLabel {
                namespace: p.namespace.to_string(),
                pod: p.pod.to_string(),
                qos: p.qos,
            };
            self.pod_high_events
                .get_or_create(&label)
                .inc_by(p.reading.high);
            self.pod_oom_kills
                .get_or_create(&label)
                .inc_by(p.reading.oom_kill);
        }
        self.container_high_events.clear();
        self.container_oom_kills.clear();
        let containers = pods
            .iter()
            .flat_map(|p| p.containers.iter().map(move |c| (p, c)));
        let mut not_exported = 0;
        for (i, (p, (name, reading))) in containers.enumerate() {
            if i >= self.container_series_cap {
                not_exported += 1;
                continue;
            }
            let label = ContainerLabel {
                namespace: p.namespace.to_string(),
                pod: p.pod.to_string(),
                container: name.to_string(),
            };
            self.container_high_events
                .get_or_create(&label)
                .inc_by(reading.high);
            self.container_oom_kills
                .get_or_create(&label)
                .inc_by(reading.oom_kill);
        }
        self.containers_not_exported.set(not_exported);
    }

    /// The QoS classes' counters grow by what each pod's memory.events grew since it was
    /// last read (all of it for a pod not seen before, or whose counters went down: a
    /// new cgroup under the same name); their pressure is the highest pod's, as a ratio.
    fn class_signals(&self, pods: &[PodSignals<'_>]) {
        let grown = |now: u64, before: u64| if now >= before { now - before } else { now };
        let mut last = self
            .last_pod_events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut seen = std::collections::HashMap::with_capacity(pods.len());
        for qos in ["guaranteed", "burstable", "besteffort"] {
            let label = QosLabel { qos };
            // Full pressure: the highest any pod of the class reads (0 with no pods);
            // no series when none of its pods can read it (absent is unknown, never 0).
            let (mut high, mut oom) = (0u64, 0u64);
            let (mut full, mut unread) = (None::<f64>, false);
            for p in pods.iter().filter(|p| p.qos == qos) {
                let key = (p.namespace.to_string(), p.pod.to_string());
                let (h, o) = last.get(&key).copied().unwrap_or((0, 0));
                high += grown(p.reading.high, h);
                oom += grown(p.reading.oom_kill, o);
                match p.reading.full_avg60 {
                    Some(f) => full = Some(full.map_or(f, |m| m.max(f))),
                    None => unread = true,
                }
                seen.insert(key, (p.reading.high, p.reading.oom_kill));
            }
            self.high_events.get_or_create(&label).inc_by(high);
            self.oom_kills.get_or_create(&label).inc_by(oom);
            let full = full.or((!unread).then_some(0.0));
            match full {
                Some(full) => {
                    self.full_pressure.get_or_create(&label).set(full / 100.0);
                }
                None => {
                    self.full_pressure.remove(&label);
                }
            }
        }
        *last = seen;
    }

    /// The node's config conditions as last computed (one series each, value 1; the
    /// alerts read KubeletConflict from here).
    pub fn conditions(
        &self,
        conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    ) {
        self.conditions.clear();
        for c in conditions {
            self.conditions
                .get_or_create(&ConditionLabel {
                    condition: c.type_.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone(),
                })
                .set(1);
        }
    }

    /// The config the agent enforces now, (node, policy, revision) (None: none).
    pub fn config(&self, config: Option<(&str, &str, &str)>) {
        self.config.clear();
        if let Some((node, policy, revision)) = config {
            self.config
                .get_or_create(&ConfigLabel {
                    node: node.to_string(),
                    policy: policy.to_string(),
                    revision: revision.to_string(),
                })
                .set(1);
        }
    }

    /// Records one pass.
    pub fn record_pass(&self, trigger: Trigger, seconds: f64) {
        self.passes
            .get_or_create(&TriggerLabel {
                trigger: trigger.label(),
            })
            .inc();
        self.pass_seconds.observe(seconds);
        self.ready.store(true, Ordering::Relaxed);
    }

    pub fn reaction(&self, seconds: f64) {
        self.reaction_seconds.observe(seconds);
    }

    pub fn writes(&self, applied: usize, vanished: usize, failed: &[Option<i32>], drift: bool) {
        let inc = |result: &'static str, n: usize| {
            if n > 0 {
                self.writes
                    .get_or_create(&ResultLabel { result })
                    .inc_by(n as u64);
            }
        };
        inc("ok", applied);
        inc("vanished", vanished);
        inc("failed", failed.len());
        for errno in failed {
            self.write_errors
                .get_or_create(&ErrnoLabel {
                    errno: errno_label(*errno),
                })
                .inc();
        }
        if drift && applied > 0 {
            self.drift_repairs.inc_by(applied as u64);
        }
    }

    pub fn runtime_records(&self, named: usize, unusable: usize) {
        for (result, n) in [("named", named), ("unusable", unusable)] {
            if n > 0 {
                self.runtime_records
                    .get_or_create(&ResultLabel { result })
                    .inc_by(n as u64);
            }
        }
    }

    pub fn nri_request(&self, result: &'static str) {
        self.nri_requests
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    pub fn nri_answer(&self, request: &'static str, seconds: f64) {
        self.nri_answer_seconds
            .get_or_create(&RequestLabel { request })
            .observe(seconds);
    }

    /// One of the agent's watches began a list of `resource`.
    pub fn watch_list(&self, resource: &'static str) {
        self.watch_lists
            .get_or_create(&ResourceLabel { resource })
            .inc();
    }

    pub fn status_write(&self, result: &'static str) {
        self.status_writes
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    pub fn nri_connection(&self, result: &'static str, registered: bool) {
        self.nri_connections
            .get_or_create(&ResultLabel { result })
            .inc();
        self.nri_registered.set(i64::from(registered));
    }

    pub fn unit_updates(&self, outcome: &crate::units::HoldOutcome) {
        for (result, n) in [
            ("ok", outcome.set),
            ("gone", outcome.gone),
            ("failed", outcome.failed),
        ] {
            if n > 0 {
                self.unit_updates
                    .get_or_create(&ResultLabel { result })
                    .inc_by(n as u64);
            }
        }
    }

    pub fn node(
        &self,
        memory_min: i64,
        memory_low: i64,
        managed_pods: usize,
        classes: &std::collections::BTreeMap<&str, usize>,
        pinning: Option<(u64, u64)>,
    ) {
        self.memory_min.set(memory_min);
        self.memory_low.set(memory_low);
        self.managed_pods.set(managed_pods as i64);
        // A class no pod runs any more (or gone from the policy) leaves the series.
        self.class_pods.clear();
        for (class, pods) in classes {
            self.class_pods
                .get_or_create(&ClassLabel {
                    class: class.to_string(),
                })
                .set(*pods as i64);
        }
        if let Some((requests, errors)) = pinning {
            self.pinning_requests.set(requests as i64);
            self.pinning_errors.set(errors as i64);
        }
    }

    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String does not fail");
        text
    }

    fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

impl nodemem_plumbing::endpoints::Endpoints for Metrics {
    fn metrics(&self) -> String {
        self.encode()
    }

    fn ready(&self) -> Result<(), &'static str> {
        if Metrics::ready(self) {
            Ok(())
        } else {
            Err("the node has not been enforced yet")
        }
    }
}

/// Serves /metrics, /healthz and /readyz on `addr`; returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
) -> Result<SocketAddr, nodemem_plumbing::endpoints::ServeError> {
    nodemem_plumbing::endpoints::serve(addr, metrics).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_encode_with_bounded_labels() {
        let m = Metrics::new();
        m.record_pass(Trigger::Event, 0.002);
        m.writes(3, 1, &[Some(libc::EINVAL), Some(12345)], false);
        m.writes(2, 0, &[], true);
        m.node(
            1 << 30,
            1 << 29,
            7,
            &[("batch", 2), ("service", 3)].into(),
            Some((5, 1)),
        );
        m.runtime_records(3, 0);
        m.runtime_records(1, 1);
        m.signals(&[
            pod("a", "burstable", (4, 1, 2.5), &[]),
            pod("b", "burstable", (1, 0, 7.25), &[]),
            pod("c", "guaranteed", (0, 2, 0.0), &[]),
        ]);
        let text = m.encode();
        for line in [
            "nodemem_agent_passes_total{trigger=\"event\"} 1",
            "nodemem_agent_writes_total{result=\"ok\"} 5",
            "nodemem_agent_writes_total{result=\"vanished\"} 1",
            "nodemem_agent_writes_total{result=\"failed\"} 2",
            "nodemem_agent_write_errors_total{errno=\"EINVAL\"} 1",
            "nodemem_agent_write_errors_total{errno=\"other\"} 1",
            "nodemem_agent_drift_repairs_total 2",
            "nodemem_agent_runtime_records_total{result=\"named\"} 4",
            "nodemem_agent_runtime_records_total{result=\"unusable\"} 1",
            "nodemem_agent_node_memory_min_bytes 1073741824",
            "nodemem_agent_managed_pods 7",
            "nodemem_agent_class_pods{class=\"batch\"} 2",
            "nodemem_agent_class_pods{class=\"service\"} 3",
            "nodemem_agent_memory_manager_pinning_errors 1",
            "nodemem_agent_memory_high_events_total{qos=\"burstable\"} 5",
            "nodemem_agent_oom_kills_total{qos=\"guaranteed\"} 2",
            "nodemem_agent_memory_pressure_full_avg60_ratio{qos=\"burstable\"} 0.0725",
            "nodemem_agent_oom_kills_total{qos=\"besteffort\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(m.ready());
        // A class that no pod runs any more leaves no series behind.
        m.node(0, 0, 2, &[("batch", 2)].into(), None);
        let text = m.encode();
        assert!(text.contains("nodemem_agent_class_pods{class=\"batch\"} 2"));
        assert!(!text.contains("class=\"service\""), "{text}");
    }

    fn reading(high: u64, oom_kill: u64, full_avg60: f64) -> crate::health::Reading {
        let full_avg60 = Some(full_avg60);
        crate::health::Reading {
            high,
            oom_kill,
            full_avg60,
            refaults: None,
            judged: false,
        }
    }

    fn pod<'a>(
        name: &'a str,
        qos: &'static str,
        (high, oom, full): (u64, u64, f64),
        containers: &[(&'a str, u64)],
    ) -> PodSignals<'a> {
        PodSignals {
            namespace: "ns",
            pod: name,
            qos,
            reading: reading(high, oom, full),
            containers: containers
                .iter()
                .map(|(c, high)| (*c, reading(*high, 0, 0.0)))
                .collect(),
        }
    }

    #[test]
    fn pressure_that_cannot_be_read_has_no_series_and_a_class_without_pods_reads_zero() {
        let m = Metrics::new();
        let mut blind = pod("a", "burstable", (0, 0, 0.0), &[]);
        blind.reading.full_avg60 = None;
        let seen = pod("b", "guaranteed", (0, 0, 7.0), &[]);
        m.signals(&[blind, seen]);
        let text = nodemem_plumbing::endpoints::Endpoints::metrics(&m);
        // Sorted: a family encodes in no particular order.
        let mut full: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("nodemem_agent_memory_pressure_full_avg60_ratio{"))
            .collect();
        full.sort_unstable();
        assert_eq!(
            full,
            [
                "nodemem_agent_memory_pressure_full_avg60_ratio{qos=\"besteffort\"} 0.0",
                "nodemem_agent_memory_pressure_full_avg60_ratio{qos=\"guaranteed\"} 0.07",
            ],
            "{text}"
        );
    }

    /// A metric's series, sorted (a family encodes in no particular order).
    fn series<'t>(text: &'t str, metric: &str) -> Vec<&'t str> {
        let mut lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(&format!("nodemem_agent_{metric}{{")))
            .collect();
        lines.sort();
        lines
    }

    #[test]
    fn pods_have_series_of_their_own_and_containers_only_up_to_the_cap() {
        let m = Metrics::new();
        let pods = [
            pod("a", "burstable", (4, 1, 0.0), &[("app", 3), ("sidecar", 1)]),
            pod("b", "guaranteed", (2, 0, 0.0), &[("db", 2)]),
        ];
        m.signals(&pods);
        let text = m.encode();
        assert_eq!(
            series(&text, "pod_memory_high_events_total"),
            [
                "nodemem_agent_pod_memory_high_events_total{namespace=\"ns\",pod=\"a\",qos=\"burstable\"} 4",
                "nodemem_agent_pod_memory_high_events_total{namespace=\"ns\",pod=\"b\",qos=\"guaranteed\"} 2",
            ],
            "{text}"
        );
        assert!(
            series(&text, "container_memory_high_events_total").is_empty(),
            "per-container series are off by default"
        );
        assert!(text.contains("nodemem_agent_containers_not_exported 3"));

        let m = Metrics::with_container_series(2);
        m.signals(&pods);
        let text = m.encode();
        let containers = series(&text, "container_memory_high_events_total");
        assert_eq!(containers.len(), 2, "{text}");
        assert!(text.contains(
            "nodemem_agent_container_memory_high_events_total{namespace=\"ns\",pod=\"a\",container=\"app\"} 3"
        ));
        assert!(text.contains("nodemem_agent_containers_not_exported 1"));

        // Pod b is gone: its series go with it.
        m.signals(&pods[..1]);
        let text = m.encode();
        assert_eq!(series(&text, "pod_oom_kills_total").len(), 1, "{text}");
        assert_eq!(
            series(&text, "container_oom_kills_total").len(),
            2,
            "{text}"
        );
        assert!(!text.contains("pod=\"b\""), "{text}");
        assert!(text.contains("nodemem_agent_containers_not_exported 0"));
    }

    /// The QoS classes' counts only grow: a pod that goes away takes nothing from them,
    /// a pod's growth adds to them, and a pod made again under its name (its counters
    /// start at 0 again) adds what its new cgroup counts.
    #[test]
    fn class_counters_only_grow() {
        let m = Metrics::new();
        let count = |m: &Metrics, metric: &str| -> String {
            let text = m.encode();
            let line = format!("nodemem_agent_{metric}{{qos=\"burstable\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&line))
                .unwrap_or_else(|| panic!("no {line} in {text}"))
                .to_string()
        };
        m.signals(&[
            pod("a", "burstable", (4, 1, 0.0), &[]),
            pod("b", "burstable", (1, 2, 0.0), &[]),
        ]);
        assert_eq!(count(&m, "oom_kills_total"), "3");
        // b is gone, a grew by one kill.
        m.signals(&[pod("a", "burstable", (4, 2, 0.0), &[])]);
        assert_eq!(count(&m, "oom_kills_total"), "4");
        assert_eq!(count(&m, "memory_high_events_total"), "5");
        // a made again: its new cgroup's kill counts.
        m.signals(&[pod("a", "burstable", (0, 1, 0.0), &[])]);
        assert_eq!(count(&m, "oom_kills_total"), "5");
        // Read again unchanged: nothing added.
        m.signals(&[pod("a", "burstable", (0, 1, 0.0), &[])]);
        assert_eq!(count(&m, "oom_kills_total"), "5");
    }
}
