//! `nodemem agent` in the cluster: watches only its own NodeMemoryConfig, Node and the
//! pods bound to its node (plus Namespace labels, for the opt-out), keeps the
//! [`NodeIndex`] current, enforces through the [`NodeEngine`] whenever something the
//! computation reads changed (and on a periodic resync that repairs drift), and reports
//! in the config's status by server-side apply, only when the status changed.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Reporter};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use nodemem_api::{NodeMemoryConfig, NodeMemoryConfigStatus};
use nodemem_model::node::Admission;
use nodemem_process::events::Recorder;
use serde_json::json;
use tracing::{info, warn};

use crate::cgroup_events::{watch_cgroups, CgroupChanges};
use crate::engine::{
    cgroup_settings, off, EngineConfig, NodeEngine, Reach, Recovery, RecoveryAction,
};
use crate::health::{verdict, Baseline};
use crate::kubelet_mode::{KubeletMode, KubeletModeConfig, KubeletOutcome};
use crate::metrics::{self, Metrics, PodSignals, Trigger};
use crate::observer::Observer;
use crate::relief::Relief;
use crate::status::{
    add_state_recovered, condition, status, status_write, PassOutcome, StatusWrite,
};
use crate::status_writer::StatusWriter;
use nodemem_api::node_index::{LastKnown, NodeIndex};

/// The field manager of everything the agent writes.
pub const FIELD_MANAGER: &str = "nodemem-agent";

/// The most updates one pass takes in.
const MAX_BATCH: usize = 1000;
/// How long a pass waits for one more update to join it.
const BATCH_WAIT: Duration = Duration::from_millis(1);
const LAST_KNOWN_FILE: &str = "last-known.json";
const LAST_KNOWN_KIND: &str = "last-known";

pub struct ClusterAgent {
    pub node_name: String,
    pub engine: EngineConfig,
    /// Where `enforcement: Kubelet` writes, and how it restarts the kubelet.
    pub kubelet: KubeletModeConfig,
    pub resync: Duration,
    /// Set once the client exists.
    pub recorder: Option<Recorder>,
    /// Pods already told they were refused NUMA pinning (uid).
    pub told_refused: std::sync::Mutex<BTreeSet<String>>,
    pub metrics: std::sync::Arc<Metrics>,
    /// Counters at the time the current revision was applied.
    baseline: std::sync::Mutex<Baseline>,
    /// Where /metrics, /healthz and /readyz are served; None serves nothing.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Where the container runtime keeps its containers' specs: a new container
    /// cgroup is named from there before the kubelet reports its ID.
    pub runtime_records: crate::runtime_record::RuntimeRecords,
    /// How often the managed containers are sampled for the observation; None: never.
    pub observe_every: Option<Duration>,
    /// At most one status write per this when only the observation's figures changed.
    pub status_refresh: Duration,
    /// What the managed containers did against memory.high.
    observer: std::sync::Mutex<Observer>,
    /// Relief for containers memory.high chokes, and where their PSI triggers fire.
    relief: std::sync::Mutex<Relief>,
    relief_fired: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<String>>>,
}

impl ClusterAgent {
    pub fn new(
        node_name: String,
        engine: EngineConfig,
        kubelet: KubeletModeConfig,
        resync: Duration,
    ) -> Self {
        let (relief, fired) = Relief::new();
        ClusterAgent {
            node_name,
            engine,
            kubelet,
            resync,
            recorder: None,
            told_refused: Default::default(),
            metrics: Default::default(),
            baseline: Default::default(),
            metrics_addr: None,
            runtime_records: Default::default(),
            observe_every: Some(Duration::from_secs(10)),
            status_refresh: Duration::from_secs(30),
            observer: Default::default(),
            relief: std::sync::Mutex::new(relief),
            relief_fired: std::sync::Mutex::new(Some(fired)),
        }
    }

    async fn event(&self, reference: &ObjectReference, reason: &str, note: &str, action: &str) {
        self.event_of(EventType::Warning, reference, reason, note, action)
            .await
    }

    async fn event_of(
        &self,
        type_: EventType,
        reference: &ObjectReference,
        reason: &str,
        note: &str,
        action: &str,
    ) {
        let Some(recorder) = &self.recorder else {
            return;
        };
        let event = KubeEvent {
            type_,
            reason: reason.to_string(),
            note: Some(note.chars().take(1000).collect()),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, reference).await {
            warn!(error = %e, "event not recorded");
        }
    }

    /// An Event on the pod of each relief decision, and its metric.
    async fn relief_events(&self, decisions: &[crate::relief::Decision]) {
        use nodemem_model::relief::Action;
        for d in decisions {
            let reference = ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(d.namespace.clone()),
                name: Some(d.pod.clone()),
                uid: Some(d.uid.clone()),
                ..ObjectReference::default()
            };
            let (type_, reason, note) = match d.action {
                Action::Nothing => continue,
                Action::Relieve { to, until: _ } => (
                    EventType::Warning,
                    "MemoryHighRelieved",
                    format!(
                        "container {}: memory.high raised from {} to {} for the policy's relief period: PSI full avg10 {:.2}% with its working set at memory.high",
                        d.container,
                        d.memory_high,
                        to.map_or("max".to_string(), |b| b.to_string()),
                        d.full_avg10
                    ),
                ),
                Action::Restore { to } => (
                    EventType::Normal,
                    "MemoryHighRestored",
                    format!("container {}: memory.high back to {to} after its relief", d.container),
                ),
                Action::Report { last_relief_ended } => (
                    EventType::Warning,
                    "ReliefRefused",
                    format!(
                        "container {}: choking again (PSI full avg10 {:.2}% at memory.high {}) within the repeat window after its last relief (ended {} s into the agent's run): reported, not relieved; raise its memory limit or the policy's throttlingFactor",
                        d.container, d.full_avg10, d.memory_high, last_relief_ended
                    ),
                ),
            };
            self.metrics.relief(reason);
            info!(pod = %format!("{}/{}", d.namespace, d.pod), container = %d.container, reason, "{note}");
            self.event_of(type_, &reference, reason, &note, "Relieve")
                .await;
        }
    }

    /// An Event on each pod the Memory Manager newly refused.
    async fn refusal_events(&self, refused: Vec<(String, String, String, String)>) {
        let new: Vec<_> = {
            let mut told = self.told_refused.lock().unwrap_or_else(|e| e.into_inner());
            let now: BTreeSet<String> = refused.iter().map(|r| r.2.clone()).collect();
            told.retain(|uid| now.contains(uid));
            refused
                .into_iter()
                .filter(|r| told.insert(r.2.clone()))
                .collect()
        };
        for (namespace, name, uid, reason) in new {
            let reference = ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(namespace),
                name: Some(name),
                uid: Some(uid),
                ..ObjectReference::default()
            };
            self.event(&reference, "NumaPinningRefused", &reason, "Pin")
                .await;
        }
    }
}

/// Watch events of the four kinds, merged into one stream (boxed: Kubernetes objects
/// are large and of very different sizes).
enum Update {
    Config(Box<Event<NodeMemoryConfig>>),
    Pod(Box<Event<core::Pod>>),
    Node(Box<Event<core::Node>>),
    Namespace(Box<Event<kube::core::PartialObjectMeta<core::Namespace>>>),
    /// Cgroup directories that appeared or went away under kubepods (inotify).
    Cgroups(CgroupChanges),
    Resync,
    /// Time to sample the managed containers.
    Sample,
    /// A container's PSI trigger fired (its cgroup).
    Pressure(String),
}

fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher::watcher(api, config).default_backoff()
}

impl ClusterAgent {
    pub async fn run(mut self, client: Client) -> Result<(), String> {
        self.recorder = Some(Recorder::new(
            client.clone(),
            Reporter {
                controller: FIELD_MANAGER.into(),
                instance: Some(self.node_name.clone()),
            },
        ));
        if let Some(addr) = self.metrics_addr {
            let bound = metrics::serve(addr, self.metrics.clone()).await?;
            info!(%bound, "serving /metrics, /healthz and /readyz");
        }
        let node = &self.node_name;
        let mut engine = self.open_engine(&client).await;
        let mut kubelet = KubeletMode::new(self.kubelet.clone(), engine.state());
        let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
        let status_out = StatusWriter::start(configs.clone(), FIELD_MANAGER, self.status_refresh);
        let by_name = watcher::Config::default().fields(&format!("metadata.name={node}"));
        let config_events =
            watch(configs.clone(), by_name.clone()).map(|e| e.map(|e| Update::Config(Box::new(e))));
        let pod_events = watch(
            Api::<core::Pod>::all(client.clone()),
            watcher::Config::default().fields(&format!("spec.nodeName={node}")),
        )
        .map(|e| e.map(|e| Update::Pod(Box::new(e))));
        let node_events = watch(Api::<core::Node>::all(client.clone()), by_name)
            .map(|e| e.map(|e| Update::Node(Box::new(e))));
        // Namespace metadata only: the agent reads their labels, nothing else.
        let namespace_events = watch(
            Api::<kube::core::PartialObjectMeta<core::Namespace>>::all(client.clone()),
            watcher::Config::default(),
        )
        .map(|e| e.map(|e| Update::Namespace(Box::new(e))));
        let resync = futures::stream::unfold(tokio::time::interval(self.resync), |mut t| async {
            t.tick().await;
            Some((Ok(Update::Resync), t))
        });
        let samples = match self.observe_every {
            Some(every) => futures::stream::unfold(tokio::time::interval(every), |mut t| async {
                t.tick().await;
                Some((Ok(Update::Sample), t))
            })
            .boxed(),
            None => futures::stream::pending().boxed(),
        };
        let fired = self
            .relief_fired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .expect("run is called once");
        let pressure = futures::stream::unfold(fired, |mut rx| async {
            let path = rx.recv().await?;
            Some((Ok(Update::Pressure(path)), rx))
        });
        let driver = engine.discovery().cgroup_driver;
        let top = nodemem_cgroup::CgroupPath::new(nodemem_model::cgroup_layout::kubepods(driver))
            .expect("a constant path");
        let cgroups = watch_cgroups(
            self.engine.roots.cgroup.clone(),
            top,
            driver,
            self.runtime_records.clone(),
        )?
        .map(|c| Ok::<_, watcher::Error>(Update::Cgroups(c)));
        let mut updates = futures::stream::select_all(vec![
            cgroups.boxed(),
            config_events.boxed(),
            pod_events.boxed(),
            node_events.boxed(),
            namespace_events.boxed(),
            resync.boxed(),
            samples,
            pressure.boxed(),
        ]);

        let mut index = NodeIndex::new(node);
        let mut config_listed = false;
        // The first pass waits for the first lists: computing with no pods yet would
        // take their protection away until the list arrives.
        let mut pods_listed = false;
        let mut node_listed = false;
        let mut relisting_pods: Option<BTreeSet<String>> = None;
        // The last status sent, with the uid of the config it was for: a config deleted
        // and created again (same name, same spec, generation 1 again) is another
        // object, and gets its status even when it reads the same (found: a re-created
        // config went unreported for minutes, its pool stuck Updating).
        let mut last_status: Option<(Option<String>, NodeMemoryConfigStatus)> = None;
        let mut saved: Option<LastKnown> = None;
        // The pods to compute, rebuilt only when the index changed.
        let mut pods: Option<Vec<nodemem_model::node::NodePod>> = None;
        // Serve from the state before the first list (the apiserver may be away): the
        // last known config for the last known pods. Status waits for the apiserver.
        match engine
            .state()
            .load::<LastKnown>(LAST_KNOWN_FILE, LAST_KNOWN_KIND)
        {
            Ok(Some(last)) => {
                index.restore(&last);
                let pods = index.node_pods();
                if let Some(Ok(settings)) = index.config().map(|c| c.settings.clone()) {
                    // Under enforcement: Kubelet the drop-in is on disk already.
                    let settings = cgroup_settings(&settings);
                    match engine.enforce(&settings, index.allocatable(), &pods, false, Reach::Node)
                    {
                        Ok((_, report)) => {
                            self.hold_in_systemd(&mut engine).await;
                            self.metrics.pass(Trigger::Start, 0.0);
                            info!(
                                revision = %last.revision,
                                pods = pods.len(),
                                writes = report.applied.len(),
                                "enforced the last known config from the state directory"
                            )
                        }
                        Err(e) => warn!(error = %e, "the last known config could not be enforced"),
                    }
                }
                saved = Some(last);
                // The watches' first lists replace what the record said.
                index = NodeIndex::new(node);
            }
            Ok(None) => {}
            Err(e) if e.is_unusable() => engine.note_recovery(Recovery {
                record: engine.state().path(LAST_KNOWN_FILE).display().to_string(),
                problem: e.to_string(),
                action: RecoveryAction::LastKnownReadAgain,
            }),
            Err(e) => {
                warn!(error = %e, "the last known config is not usable; waiting for the apiserver")
            }
        }
        info!(node = %node, "watching this node's NodeMemoryConfig, Node and pods");
        while let Some(first) = updates.next().await {
            // Every update already delivered joins this pass: under churn one pass
            // serves many events, so the agent never falls behind its watches (found by
            // the churn soak: a pass per event let the backlog grow to tens of seconds).
            // One poll would not see them: the watches' HTTP bodies are read from their
            // sockets only when asked for, so each next update gets a millisecond.
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match tokio::time::timeout(BATCH_WAIT, updates.next()).await {
                    Ok(Some(u)) => batch.push(u),
                    _ => break,
                }
            }
            tracing::debug!(updates = batch.len(), "updates");
            let mut any_changed = false;
            // Pod events change those pods and the node-level sums only; anything else
            // changed (config, node, a relist) takes the whole node.
            let mut touched: BTreeSet<String> = BTreeSet::new();
            let mut node_wide = false;
            let mut resync = false;
            let mut sample = false;
            let mut fired: Vec<String> = Vec::new();
            let mut reaction_since: Option<std::time::Instant> = None;
            let mut appeared: BTreeSet<String> = BTreeSet::new();
            for update in batch {
                let update = match update {
                    Ok(u) => u,
                    Err(e) => {
                        warn!(error = %e, "watch failed; retrying with backoff");
                        continue;
                    }
                };
                let mut changed = false;
                let mut touched_pod: Option<String> = None;
                match update {
                    Update::Config(e) => match *e {
                        Event::Apply(c) | Event::InitApply(c) => changed |= index.apply_config(&c),
                        Event::Delete(_) => changed |= index.delete_config(),
                        Event::InitDone => {
                            config_listed = true;
                            changed = true;
                        }
                        Event::Init => {}
                    },
                    Update::Pod(e) => match *e {
                        Event::Apply(p) => {
                            tracing::trace!(uid = ?p.metadata.uid, rv = ?p.metadata.resource_version, "pod event");
                            if index.apply_pod(&p) {
                                changed = true;
                                touched_pod = p.metadata.uid.clone();
                            }
                        }
                        Event::InitApply(p) => {
                            if let (Some(seen), Some(uid)) = (&mut relisting_pods, &p.metadata.uid)
                            {
                                seen.insert(uid.clone());
                            }
                            changed |= index.apply_pod(&p);
                        }
                        Event::Delete(p) => {
                            if index.delete_pod(&p) {
                                changed = true;
                                touched_pod = p.metadata.uid.clone();
                            }
                        }
                        Event::Init => relisting_pods = Some(BTreeSet::new()),
                        Event::InitDone => {
                            if let Some(seen) = relisting_pods.take() {
                                index.retain_pods(&seen);
                            }
                            // The pods listed while relisting were not passed on one by one.
                            changed = true;
                            pods_listed = true;
                        }
                    },
                    Update::Node(e) => match *e {
                        Event::Apply(n) | Event::InitApply(n) => changed |= index.apply_node(&n),
                        Event::InitDone => {
                            node_listed = true;
                            changed = true;
                        }
                        _ => {}
                    },
                    Update::Namespace(e) => {
                        if let Event::Apply(ns) | Event::InitApply(ns) = *e {
                            let name = ns.metadata.name.clone().unwrap_or_default();
                            changed |= index.apply_namespace(&name, ns.metadata.labels.as_ref());
                        }
                    }
                    Update::Cgroups(c) => {
                        tracing::debug!(
                            appeared = c.appeared.len(),
                            named = c.named.len(),
                            gone = c.gone.len(),
                            "cgroup changes"
                        );
                        // Containers the runtime named before the kubelet reported them:
                        // their pods compute with the new IDs, this pass writes only the
                        // new cgroups (no pod event happened).
                        self.metrics.runtime_records(c.named.len(), c.unusable);
                        let mut renamed = false;
                        for named in &c.named {
                            renamed |=
                                index.learn_container(&named.pod_uid, &named.name, &named.id);
                        }
                        for id in &c.gone {
                            renamed |= index.forget_container(id);
                        }
                        if renamed {
                            pods = None;
                        }
                        if !c.appeared.is_empty() {
                            appeared.extend(c.appeared);
                            reaction_since.get_or_insert(c.at);
                        }
                    }
                    Update::Resync => resync = true,
                    Update::Sample => sample = true,
                    Update::Pressure(path) => {
                        self.metrics.relief_trigger_fired();
                        fired.push(path);
                    }
                }
                if changed {
                    any_changed = true;
                    match touched_pod {
                        Some(uid) => {
                            touched.insert(uid);
                        }
                        None => node_wide = true,
                    }
                }
            }
            if sample {
                let started = std::time::Instant::now();
                let mut observer = self.observer.lock().unwrap_or_else(|e| e.into_inner());
                observer.sample(|path| crate::observer::read(engine.cgroup_fs(), path));
                let (observed, throttled) = observer.counts();
                self.metrics
                    .observation(observed, throttled, started.elapsed().as_secs_f64());
                // Something status should say now (a container newly throttled, the
                // first figures after a change): a whole-node pass writes it.
                resync |= observer.news();
            }
            // Relief: containers whose trigger fired, and on each tick those under way.
            if sample || !fired.is_empty() {
                let decisions = {
                    let mut relief = self.relief.lock().unwrap_or_else(|e| e.into_inner());
                    let due = relief.due(&fired);
                    let decisions =
                        relief.step(&due, |path| crate::relief::read(engine.cgroup_fs(), path));
                    if !decisions.is_empty() {
                        // The next (whole-node) pass writes the raised or restored
                        // memory.high, systemd's record of the unit included.
                        engine.set_relief(relief.overrides());
                        resync = true;
                    }
                    let (watched, polled) = relief.watched();
                    self.metrics
                        .relief_watch(watched, polled, relief.overrides().len());
                    decisions
                };
                self.relief_events(&decisions).await;
            }
            let changed = any_changed;
            let listed = config_listed && pods_listed && node_listed && relisting_pods.is_none();
            if !(changed || resync || !appeared.is_empty()) || !listed {
                continue;
            }
            let trigger = match (reaction_since, changed) {
                (_, true) => Trigger::Event,
                (Some(_), false) => Trigger::Cgroup,
                (None, false) => Trigger::Resync,
            };
            // New cgroups alone: only they are planned, read and written; pods' events
            // alone: those pods and their parents; anything more: the whole node.
            let reach = match trigger {
                Trigger::Cgroup => Reach::Cgroups(&appeared),
                Trigger::Event if !node_wide && !resync && appeared.is_empty() => {
                    Reach::Pods(&touched)
                }
                _ => Reach::Node,
            };
            if changed || pods.is_none() {
                pods = Some(index.node_pods());
                for problem in index.pod_problems() {
                    warn!(%problem, "pod skipped");
                }
            }
            let written = self
                .pass(
                    &mut engine,
                    &mut kubelet,
                    &index,
                    pods.as_deref().unwrap_or_default(),
                    &status_out,
                    last_status
                        .as_ref()
                        .filter(|(uid, _)| Some(uid) == index.config().map(|c| &c.uid))
                        .map(|(_, s)| s),
                    trigger,
                    reach,
                )
                .await;
            if let Some(at) = reaction_since {
                self.metrics.reaction(at.elapsed().as_secs_f64());
            }
            if let Some(s) = written {
                last_status = Some((index.config().and_then(|c| c.uid.clone()), s));
            }
            // Record what is enforced now, when the index changed (reactions and
            // resyncs change nothing it holds).
            let now_known = if changed {
                index.last_known()
            } else {
                saved.clone()
            };
            if now_known != saved {
                let result = match &now_known {
                    Some(k) => engine.state().save(LAST_KNOWN_FILE, LAST_KNOWN_KIND, k),
                    None => engine.state().remove(LAST_KNOWN_FILE),
                };
                match result {
                    Ok(()) => saved = now_known,
                    Err(e) => warn!(error = %e, "the last known config was not recorded"),
                }
            }
        }
        Err("the watch streams ended".to_string())
    }

    /// Discovers the node, and until that works (cgroup v1, or kubepods not created
    /// yet by a kubelet that starts after the agent) reports why on the config and
    /// tries again every resync interval, rather than exiting into a crash loop.
    async fn open_engine(&self, client: &Client) -> NodeEngine {
        let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
        let mut reported = None;
        loop {
            let e = match NodeEngine::open(&self.engine) {
                Ok(engine) => return engine,
                Err(e) => e,
            };
            warn!(error = %e, "this node cannot be enforced yet; retrying every resync interval");
            if let Ok(Some(config)) = configs.get_opt(&self.node_name).await {
                let key = (config.spec.revision.clone(), e.to_string());
                if reported.as_ref() != Some(&key) {
                    let now = Time(k8s_openapi::jiff::Timestamp::now());
                    let message = format!("revision {} is not applied: {e}", config.spec.revision);
                    let not = |type_: &str, reason: &str| {
                        condition(
                            type_,
                            false,
                            reason,
                            message.clone(),
                            config.metadata.generation,
                            &now,
                        )
                    };
                    let status = NodeMemoryConfigStatus {
                        observed_revision: config
                            .status
                            .as_ref()
                            .and_then(|s| s.observed_revision.clone()),
                        conditions: vec![
                            not("Applied", e.category.reason()),
                            not("Healthy", "NotApplied"),
                            not("KernelSupported", e.category.reason()),
                        ],
                        last_error: Some(e.to_string()),
                        ..NodeMemoryConfigStatus::default()
                    };
                    let patch = json!({"apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig", "status": status});
                    let written = configs
                        .patch_status(
                            &self.node_name,
                            &PatchParams::apply(FIELD_MANAGER).force(),
                            &Patch::Apply(&patch),
                        )
                        .await;
                    if written.is_ok() {
                        reported = Some(key);
                    }
                }
            }
            tokio::time::sleep(self.resync).await;
        }
    }

    /// systemd's record of the units the pass wrote (systemd-driver nodes), counted.
    async fn hold_in_systemd(&self, engine: &mut NodeEngine) {
        if let Some(held) = engine.hold_in_systemd().await {
            self.metrics.unit_updates(&held);
        }
    }

    /// One enforcement pass and, when it changed, the status (handed to the status
    /// writer). Returns that status.
    #[allow(clippy::too_many_arguments)]
    async fn pass(
        &self,
        engine: &mut NodeEngine,
        kubelet: &mut KubeletMode,
        index: &NodeIndex,
        pods: &[nodemem_model::node::NodePod],
        status_out: &StatusWriter,
        last: Option<&NodeMemoryConfigStatus>,
        trigger: Trigger,
        reach: Reach<'_>,
    ) -> Option<NodeMemoryConfigStatus> {
        let started = std::time::Instant::now();
        let Some(config) = index.config() else {
            // No config (never created, or deleted): give back everything nodemem set,
            // in the cgroups and in the kubelet's configuration.
            if let Some(outcome) = kubelet.leave(engine.state()).await {
                info!(
                    ?outcome,
                    "no NodeMemoryConfig: the kubelet drop-in is removed"
                );
            }
            match engine.enforce(&off(), index.allocatable(), pods, false, Reach::Node) {
                Ok((_, report)) => {
                    // systemd's record is given back too, or its next re-apply would
                    // put nodemem's values back.
                    self.hold_in_systemd(engine).await;
                    if !report.applied.is_empty() {
                        info!(
                            restored = report.applied.len(),
                            "no NodeMemoryConfig: restored what nodemem had set"
                        )
                    }
                }
                Err(e) => warn!(error = %e, "restoring without a NodeMemoryConfig failed"),
            }
            return None;
        };
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let discovery = engine.discovery().clone();
        let mut refused = Vec::new();
        let mut new_status = match &config.settings {
            Err(problems) => status(
                &config.revision,
                config.generation,
                PassOutcome::InvalidConfig(problems),
                None,
                &discovery,
                last,
                &now,
            ),
            Ok(settings) => {
                let kubelet_mode =
                    settings.enforcement == nodemem_model::policy::Enforcement::Kubelet;
                let observing = settings.enforcement == nodemem_model::policy::Enforcement::Observe;
                let kubelet_outcome = if kubelet_mode {
                    let owner = nodemem_model::kubelet_dropin::DropInOwner {
                        node: &config.name,
                        revision: &config.revision,
                    };
                    Some(
                        kubelet
                            .enforce(settings, index.kubelet_version(), owner, engine.state())
                            .await,
                    )
                } else {
                    // Leaving Kubelet mode; once the kubelet runs without the drop-in
                    // there is nothing to report.
                    kubelet
                        .leave(engine.state())
                        .await
                        .filter(|o| !matches!(o, KubeletOutcome::Configured { .. }))
                };
                let applied = engine
                    .enforce(
                        &cgroup_settings(settings),
                        index.allocatable(),
                        pods,
                        false,
                        reach,
                    )
                    .and_then(|(desired, report)| {
                        // Under Kubelet mode status reports what the kubelet is asked
                        // to do, under Observe what the agent would write: not the
                        // nothing the agent writes.
                        let desired = if kubelet_mode || observing {
                            engine.predict(settings, index.allocatable(), pods)?
                        } else {
                            desired
                        };
                        Ok((desired, report))
                    });
                match applied {
                    Ok((desired, report)) => {
                        for f in &report.failed {
                            warn!(error = %f.error, "write failed");
                        }
                        let errnos: Vec<Option<i32>> =
                            report.failed.iter().map(|f| f.errno).collect();
                        self.metrics.writes(
                            report.applied.len(),
                            report.vanished.len(),
                            &errnos,
                            trigger == Trigger::Resync,
                        );
                        self.hold_in_systemd(engine).await;
                        self.metrics.node(
                            desired.totals.memory_min_bytes,
                            desired.totals.memory_low_bytes,
                            desired.managed_pods(),
                            desired
                                .memory_manager
                                .as_ref()
                                .map(|m| (m.pinning_requests, m.pinning_errors)),
                        );
                        for p in &desired.pods {
                            if let Admission::Rejected(r) = &p.admission {
                                refused.push((
                                    p.namespace.to_string(),
                                    p.name.to_string(),
                                    p.uid.to_string(),
                                    r.to_string(),
                                ));
                            }
                        }
                        for w in &report.applied {
                            tracing::debug!(cgroup = %w.cgroup, file = %w.file, old = ?w.old, new = %w.new, "wrote");
                        }
                        if !report.applied.is_empty() {
                            info!(revision = %config.revision, writes = report.applied.len(), ?trigger, took_ms = started.elapsed().as_millis() as u64, "applied");
                        }
                        let conflict = engine.conflict().cloned();
                        // Reactions to new cgroups read nothing else; health comes with the
                        // other passes.
                        // Health reads every managed pod's signals: on whole-node
                        // passes only (resyncs, config changes), not on reactions.
                        let health = matches!(reach, Reach::Node).then(|| {
                            let readings = engine.read_signals(
                                desired
                                    .pods
                                    .iter()
                                    .filter(|p| p.admission == Admission::Managed)
                                    .map(|p| p.path.as_str()),
                            );
                            let current_full =
                                readings.values().map(|r| r.full_avg60).fold(0.0, f64::max);
                            let containers = if self.metrics.wants_containers() {
                                engine.read_signals(
                                    desired
                                        .pods
                                        .iter()
                                        .filter(|p| p.admission == Admission::Managed)
                                        .flat_map(|p| &p.containers)
                                        .filter_map(|c| c.path.as_deref()),
                                )
                            } else {
                                Default::default()
                            };
                            let per_pod: Vec<PodSignals<'_>> = desired
                                .pods
                                .iter()
                                .filter_map(|p| {
                                    let reading = *readings.get(&p.path)?;
                                    let qos = match p.qos {
                                        nodemem_model::qos::QosClass::Guaranteed => "guaranteed",
                                        nodemem_model::qos::QosClass::Burstable => "burstable",
                                        nodemem_model::qos::QosClass::BestEffort => "besteffort",
                                    };
                                    Some(PodSignals {
                                        namespace: p.namespace,
                                        pod: p.name,
                                        qos,
                                        reading,
                                        containers: p
                                            .containers
                                            .iter()
                                            .filter_map(|c| {
                                                let r = containers.get(c.path.as_deref()?)?;
                                                Some((c.name, *r))
                                            })
                                            .collect(),
                                    })
                                })
                                .collect();
                            self.metrics.signals(&per_pod);
                            let signals = self
                                .baseline
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .update(&config.revision, &readings);
                            let reliefs = self
                                .relief
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .reliefs_since(&config.revision);
                            verdict(
                                signals,
                                current_full,
                                &config.health,
                                report.failed.len() + report.deferred.len(),
                                reliefs,
                            )
                        });
                        let mut s = status(
                            &config.revision,
                            config.generation,
                            PassOutcome::Applied {
                                desired: &desired,
                                report: &report,
                                conflict: conflict.as_ref(),
                                kubelet: kubelet_outcome.as_ref(),
                                observing,
                            },
                            health.as_ref(),
                            &discovery,
                            last,
                            &now,
                        );
                        // Observed under Agent and Observe; under Kubelet the kubelet's
                        // memory.high is not nodemem's to report on.
                        if !kubelet_mode {
                            let mut observer =
                                self.observer.lock().unwrap_or_else(|e| e.into_inner());
                            observer.refresh(
                                &config.revision,
                                !observing,
                                &desired,
                                engine.own_cgroup(),
                                engine.memory_facts(),
                            );
                            // The summary moves with every sample: it goes to status
                            // on whole-node passes, not on every pod event.
                            s.observation = if matches!(reach, Reach::Node) {
                                observer.report()
                            } else {
                                last.and_then(|l| l.observation.clone())
                                    .filter(|o| o.revision == config.revision)
                            };
                        }
                        // Relief only where the agent enforces (validation refuses it
                        // elsewhere; a config that says otherwise relieves nothing).
                        let mut relief = self.relief.lock().unwrap_or_else(|e| e.into_inner());
                        let relief_settings = settings.relief.filter(|_| {
                            settings.enforcement == nodemem_model::policy::Enforcement::Agent
                        });
                        let raised = relief.refresh(
                            &config.revision,
                            relief_settings,
                            &desired,
                            engine.own_cgroup(),
                            engine.cgroup_fs(),
                        );
                        engine.set_relief(raised);
                        s.relief = relief.summary();
                        s
                    }
                    Err(e) => {
                        warn!(error = %e, "not applied");
                        status(
                            &config.revision,
                            config.generation,
                            PassOutcome::Failed(&e),
                            None,
                            &discovery,
                            last,
                            &now,
                        )
                    }
                }
            }
        };
        add_state_recovered(
            &mut new_status,
            engine.recoveries(),
            config.generation,
            last,
            &now,
        );
        self.metrics.pass(trigger, started.elapsed().as_secs_f64());
        self.refusal_events(refused).await;
        let write = status_write(last, &new_status);
        if write == StatusWrite::Nothing {
            return None;
        }
        let reference = ObjectReference {
            api_version: Some("nodemem.io/v1alpha1".into()),
            kind: Some("NodeMemoryConfig".into()),
            name: Some(config.name.clone()),
            uid: config.uid.clone(),
            ..ObjectReference::default()
        };
        // A recovered state record is a Warning Event on the config (once per recovery).
        let recovered = |s: Option<&NodeMemoryConfigStatus>| {
            s.and_then(|s| s.conditions.iter().find(|c| c.type_ == "StateRecovered"))
                .map(|c| c.message.clone())
        };
        if let Some(message) =
            recovered(Some(&new_status)).filter(|m| Some(m) != recovered(last).as_ref())
        {
            let reason = new_status
                .conditions
                .iter()
                .find(|c| c.type_ == "StateRecovered")
                .map_or("StateRederived".to_string(), |c| c.reason.clone());
            self.event(&reference, &reason, &message, "Recover").await;
        }
        // A pass that did not apply is also an Event on the config (once per change).
        if let Some(failed) = new_status
            .conditions
            .iter()
            .find(|c| c.type_ == "Applied" && c.status == "False")
        {
            self.event(&reference, &failed.reason, &failed.message, "Apply")
                .await;
        }
        status_out.send(
            &config.name,
            config.uid.as_deref(),
            new_status.clone(),
            write == StatusWrite::Coalesced,
        );
        Some(new_status)
    }
}
