//! `nodemem agent` in the cluster: watches only its own NodeMemoryConfig, Node and the
//! pods bound to its node (plus Namespace labels, for the opt-out), keeps the
//! [`NodeIndex`] current, carries the config out on the node whenever something the
//! computation reads changed (and on a periodic resync that repairs drift), and reports
//! in the config's status by server-side apply, only when the status changed.
//!
//! The loop: a batch of updates is folded into the index and into what the next pass
//! must do (`batch`), the observer and relief take their turn, and one pass runs
//! (`pass`).

mod announce;
mod batch;
mod grace;
mod kubelet_restarts;
mod pass;

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::Reporter;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use nodemem_api::node_index::{LastKnown, NodeIndex};
use nodemem_api::{NodeMemoryConfig, NodeMemoryConfigStatus};
use nodemem_model::node::creation::CreationTable;
use nodemem_plumbing::events::Recorder;
use serde_json::json;
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::cgroup_events::{watch_cgroups, CgroupWatchError};
use crate::kubelet_mode::{KubeletMode, KubeletModeConfig};
use crate::metrics::{self, Metrics, Trigger};
use crate::nri::plugin::NodememPlugin;
use crate::nri::{NriMode, NriNews, NriState};
use crate::reclaim::Reclaim;
use crate::relief::Relief;
use crate::status_writer::StatusWriter;
use crate::units::UnitHolder;
use announce::Announcer;
use batch::{Batch, Update, Watches};
use nodemem_api::conditions::condition;
use nodemem_apply::applier::{NodeApplier, Reach, Recovery, RecoveryAction};
use nodemem_apply::node::{Node, NodeConfig};
use pass::{NriLink, PassInput, Passes, Writers};

/// The field manager of everything the agent writes.
pub const FIELD_MANAGER: &str = "nodemem-agent";

/// The most updates one pass takes in.
const MAX_BATCH: usize = 1000;
/// How long a pass waits for one more update to join it.
const BATCH_WAIT: Duration = Duration::from_millis(1);
const LAST_KNOWN_FILE: &str = "last-known.json";
const LAST_KNOWN_KIND: &str = "last-known";

/// Why the agent's loop stopped (the process exits and the DaemonSet restarts it).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Serve(#[from] nodemem_plumbing::endpoints::ServeError),
    #[error(transparent)]
    CgroupWatch(#[from] CgroupWatchError),
    #[error("the watch streams ended")]
    WatchesEnded,
}

pub struct NodeSync {
    pub node_name: String,
    /// Where the node's files are (what discovery reads).
    pub node: NodeConfig,
    /// Where `enforcement: Kubelet` writes, and how it restarts the kubelet.
    pub kubelet: KubeletModeConfig,
    pub resync: Duration,
    pub metrics: std::sync::Arc<Metrics>,
    /// Where /metrics, /healthz and /readyz are served; None serves nothing.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Where the container runtime keeps its containers' specs: a new container
    /// cgroup is named from there before the kubelet reports its ID.
    pub runtime_records: crate::runtime_record::RuntimeRecords,
    /// How often the managed containers are sampled for the observation; None: never.
    pub observe_every: Option<Duration>,
    /// How often proactive reclaim's containers are looked at; None: never.
    pub reclaim_every: Option<Duration>,
    /// At most one status write per this when only the observation's figures changed.
    pub status_refresh: Duration,
    /// The runtime's NRI socket: new containers created with nodemem's values.
    pub nri: crate::nri::NriConfig,
    /// systemd's bus on the host (`--systemd-run-dir`): on a systemd-driver node the
    /// values are set as unit properties too. Empty: files only.
    pub systemd: Vec<nodemem_systemd::BusAddress>,
}

/// What the loop keeps between batches.
struct Loop {
    index: NodeIndex,
    watches: Watches,
    /// The pods to compute, rebuilt only when the index changed.
    pods: Option<Vec<nodemem_model::node::NodePod>>,
    /// The last status sent, with the uid of the config it was for: a config deleted
    /// and created again (same name, same spec, generation 1 again) is another
    /// object, and gets its status even when it reads the same (found: a re-created
    /// config went unreported for minutes, its pool stuck Updating).
    last_status: Option<(Option<String>, NodeMemoryConfigStatus)>,
    /// The last known config and pods, as recorded in the state directory.
    saved: Option<LastKnown>,
}

impl NodeSync {
    pub fn new(
        node_name: String,
        node: NodeConfig,
        kubelet: KubeletModeConfig,
        resync: Duration,
    ) -> Self {
        NodeSync {
            node_name,
            node,
            kubelet,
            resync,
            metrics: Default::default(),
            metrics_addr: None,
            runtime_records: Default::default(),
            observe_every: Some(Duration::from_secs(10)),
            reclaim_every: Some(crate::reclaim::TICK),
            status_refresh: Duration::from_secs(30),
            nri: Default::default(),
            systemd: Vec::new(),
        }
    }

    pub async fn run(self, client: Client) -> Result<(), RunError> {
        if let Some(addr) = self.metrics_addr {
            let bound = metrics::serve(addr, self.metrics.clone()).await?;
            info!(%bound, "serving /metrics, /healthz and /readyz");
        }
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: FIELD_MANAGER.into(),
                instance: Some(self.node_name.clone()),
            },
        );
        let (node, applier) = self.open_node(&client).await;
        let kubelet = KubeletMode::new(self.kubelet.clone(), node.state());
        let units = (node.holds_units() && !self.systemd.is_empty())
            .then(|| UnitHolder::new(self.systemd.clone()));
        let mut writers = Writers {
            node,
            applier,
            kubelet,
            units,
        };
        let (relief, fired) = Relief::new();
        let announcer = Announcer::new(Some(recorder), self.metrics.clone());
        let (nri, nri_news) = self.start_nri();
        let (wake, woken) = tokio::sync::mpsc::unbounded_channel();
        let mut reclaim = Reclaim::new();
        // What one memory.reclaim write can take grows with the NUMA nodes.
        reclaim.set_numa_nodes(
            writers
                .node
                .discovery()
                .topology
                .as_ref()
                .map_or(0, |t| t.nodes.len()),
        );
        let mut passes = Passes::new(
            self.metrics.clone(),
            announcer,
            (relief, reclaim),
            self.kubelet.proc_root.clone(),
            nri,
            wake,
        );
        let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
        let status_out = StatusWriter::start(
            configs,
            FIELD_MANAGER,
            self.status_refresh,
            self.metrics.clone(),
        );
        let mut updates = self.updates(&client, &writers.node, fired, nri_news, woken)?;
        let mut state = Loop {
            index: NodeIndex::new(&self.node_name),
            watches: Watches::default(),
            pods: None,
            last_status: None,
            saved: None,
        };
        state.saved = self.start_from_last_known(&mut writers, &mut passes).await;
        info!(node = %self.node_name, "watching this node's NodeMemoryConfig, Node and pods");
        while let Some(first) = updates.next().await {
            let mut batch = Batch::default();
            for update in next_batch(first, &mut updates).await {
                match update {
                    Ok(u) => batch.absorb(u, &mut state.index, &mut state.watches),
                    Err(e) => warn!(error = %e, "watch failed; retrying with backoff"),
                }
            }
            self.metrics
                .runtime_records(batch.runtime_named, batch.runtime_unusable);
            if batch.renamed {
                state.pods = None;
            }
            for (path, files) in batch.created.drain(..) {
                // Not saved now: the next pass saves the claim again and reports a
                // state directory that keeps failing.
                if let Err(e) = writers
                    .applier
                    .created_by_runtime(&writers.node, &path, files)
                {
                    warn!(error = %e, cgroup = %path, "the claim of values set at creation was not saved");
                }
            }
            for path in batch.started.drain(..) {
                writers.applier.started_by_runtime(&path);
            }
            passes
                .sample_and_relieve((&writers.node, &mut writers.applier), &mut batch)
                .await;
            passes.reclaim(&writers.node, &mut batch);
            self.run_batch(&mut state, &batch, &mut writers, &mut passes, &status_out)
                .await;
            for done in batch.sandboxes_waiting.drain(..) {
                let _ = done.send(());
            }
        }
        Err(RunError::WatchesEnded)
    }

    /// The pass a batch asks for, and what it leaves to remember.
    async fn run_batch(
        &self,
        state: &mut Loop,
        batch: &Batch,
        writers: &mut Writers,
        passes: &mut Passes,
        status_out: &StatusWriter,
    ) {
        let Some(next) = batch.next_pass(&state.watches) else {
            return;
        };
        if next.index_changed || state.pods.is_none() {
            state.pods = Some(state.index.node_pods());
            for problem in state.index.pod_problems() {
                warn!(%problem, "pod skipped");
            }
        }
        let config_uid = state.index.config().map(|c| c.uid.clone());
        let input = PassInput {
            index: &state.index,
            pods: state.pods.as_deref().unwrap_or_default(),
            last: state
                .last_status
                .as_ref()
                .filter(|(uid, _)| Some(uid) == config_uid.as_ref())
                .map(|(_, s)| s),
        };
        let written = passes.pass(writers, &input, &next, status_out).await;
        // What the pass computed and freed goes back to the kernel.
        nodemem_plumbing::allocator::release_free_memory();
        if let Some(at) = next.reaction_since {
            self.metrics.reaction(at.elapsed().as_secs_f64());
        }
        if let Some(s) = written {
            state.last_status = Some((config_uid.flatten(), s));
        }
        // Record what is enforced now, when the index changed (reactions and resyncs
        // change nothing it holds).
        if next.index_changed {
            record_last_known(&writers.node, state);
        }
    }

    /// The NRI plugin, registering on a thread of its own unless `--nri=off`: what the
    /// passes publish to it and read from it, and what it tells the loop.
    fn start_nri(&self) -> (NriLink, UnboundedReceiver<NriNews>) {
        let (table_out, table) = watch::channel(Arc::new(CreationTable::default()));
        let (news_out, news) = mpsc::unbounded_channel();
        let (state_out, state) = watch::channel(NriState::Off);
        if self.nri.mode != NriMode::Off {
            state_out.send_replace(NriState::Connecting);
            let plugin = Arc::new(NodememPlugin::new(
                table,
                news_out.clone(),
                self.metrics.clone(),
            ));
            crate::nri::link::spawn(
                self.nri.clone(),
                plugin,
                news_out,
                state_out,
                self.metrics.clone(),
            );
        }
        (NriLink { table_out, state }, news)
    }

    /// The merged stream of everything the loop waits on: the four watches, new
    /// cgroups, the resync and sample timers, relief's PSI triggers, the runtime's
    /// NRI requests, and the end of a gone config's grace (`woken`: a whole pass).
    fn updates(
        &self,
        client: &Client,
        node: &Node,
        fired: UnboundedReceiver<String>,
        nri: UnboundedReceiver<NriNews>,
        woken: UnboundedReceiver<()>,
    ) -> Result<impl Stream<Item = watcher::Result<Update>> + Unpin, CgroupWatchError> {
        let name = &self.node_name;
        let by_name = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let m = &self.metrics;
        let configs = watch(
            Api::<NodeMemoryConfig>::all(client.clone()),
            by_name.clone(),
            (m, "config"),
        )
        .map(|e| e.map(|e| Update::Config(Box::new(e))));
        let pods = watch(
            Api::<core::Pod>::all(client.clone()),
            watcher::Config::default().fields(&format!("spec.nodeName={name}")),
            (m, "pods"),
        )
        .map(|e| e.map(|e| Update::Pod(Box::new(e))));
        let nodes = watch(Api::<core::Node>::all(client.clone()), by_name, (m, "node"))
            .map(|e| e.map(|e| Update::Node(Box::new(e))));
        // Namespace metadata only: the agent reads their labels, nothing else.
        let namespaces = watch(
            Api::<kube::core::PartialObjectMeta<core::Namespace>>::all(client.clone()),
            watcher::Config::default(),
            (m, "namespaces"),
        )
        .map(|e| e.map(|e| Update::Namespace(Box::new(e))));
        let resync = every(self.resync, || Update::Resync).boxed();
        let samples = match self.observe_every {
            Some(period) => every(period, || Update::Sample).boxed(),
            None => futures::stream::pending().boxed(),
        };
        let reclaim = match self.reclaim_every {
            Some(period) => every(period, || Update::Reclaim).boxed(),
            None => futures::stream::pending().boxed(),
        };
        let kubelet_restarts =
            kubelet_restarts::kubelet_restarts(self.kubelet.proc_root.clone(), KUBELET_LOOK_EVERY);
        let pressure = futures::stream::unfold(fired, |mut rx| async {
            let path = rx.recv().await?;
            Some((Ok(Update::Pressure(path)), rx))
        });
        let nri = futures::stream::unfold(nri, |mut rx| async {
            let news = rx.recv().await?;
            Some((Ok(Update::Nri(news)), rx))
        });
        let woken = futures::stream::unfold(woken, |mut rx| async {
            rx.recv().await?;
            Some((Ok(Update::Resync), rx))
        });
        let driver = node.discovery().cgroup_driver;
        let top =
            nodemem_cgroup::CgroupPath::new(nodemem_model::values::cgroup_layout::kubepods(driver))
                .expect("a constant path");
        let cgroups = watch_cgroups(
            self.node.roots.cgroup.clone(),
            top,
            driver,
            self.runtime_records.clone(),
        )?
        .map(|c| Ok::<_, watcher::Error>(Update::Cgroups(c)));
        Ok(futures::stream::select_all(vec![
            cgroups.boxed(),
            configs.boxed(),
            pods.boxed(),
            nodes.boxed(),
            namespaces.boxed(),
            resync,
            samples,
            reclaim,
            pressure.boxed(),
            kubelet_restarts.boxed(),
            nri.boxed(),
            woken.boxed(),
        ]))
    }

    /// Serves from the state before the first list (the apiserver may be away): the
    /// last known config for the last known pods. Status waits for the apiserver.
    /// Returns the record, which the watches' first lists replace.
    async fn start_from_last_known(
        &self,
        writers: &mut Writers,
        passes: &mut Passes,
    ) -> Option<LastKnown> {
        let (node, applier) = (&writers.node, &mut writers.applier);
        match node
            .state()
            .load::<LastKnown>(LAST_KNOWN_FILE, LAST_KNOWN_KIND)
        {
            Ok(Some(last)) => {
                let mut index = NodeIndex::new(&self.node_name);
                index.restore(&last);
                let pods = index.node_pods();
                if let Some(Ok(settings)) = index.config().map(|c| c.settings.clone()) {
                    // The pass a config brings: under enforcement: Kubelet the drop-in
                    // is on disk already and nodemem's values are given back.
                    match applier.enforce(node, &settings, index.node(), &pods, Reach::Node) {
                        Ok((_, report)) => {
                            nodemem_plumbing::allocator::release_free_memory();
                            passes.hold_in_systemd(writers).await;
                            self.metrics.record_pass(Trigger::Start, 0.0);
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
                Some(last)
            }
            Ok(None) => None,
            Err(e) if e.is_unusable() => {
                applier.note_recovery(Recovery {
                    record: node.state().path(LAST_KNOWN_FILE).display().to_string(),
                    problem: e.to_string(),
                    action: RecoveryAction::LastKnownReadAgain,
                });
                None
            }
            Err(e) => {
                warn!(error = %e, "the last known config is not usable; waiting for the apiserver");
                None
            }
        }
    }

    /// Discovers the node, and until that works (cgroup v1, or kubepods not created
    /// yet by a kubelet that starts after the agent) reports why on the config and
    /// tries again every resync interval, rather than exiting into a crash loop.
    async fn open_node(&self, client: &Client) -> (Node, NodeApplier) {
        let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
        let mut reported = None;
        loop {
            let opened = Node::discover(&self.node)
                .and_then(|node| NodeApplier::open(&node).map(|applier| (node, applier)));
            let e = match opened {
                Ok(opened) => return opened,
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
                            not("Applied", e.category().reason()),
                            not("Healthy", "NotApplied"),
                            not("KernelSupported", e.category().reason()),
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
}

/// Every update already delivered joins this pass: under churn one pass serves many
/// events, so the agent never falls behind its watches (found by the churn soak: a pass
/// per event let the backlog grow to tens of seconds). One poll would not see them: the
/// watches' HTTP bodies are read from their sockets only when asked for, so each next
/// update gets a millisecond.
async fn next_batch<S>(first: S::Item, updates: &mut S) -> Vec<S::Item>
where
    S: Stream + Unpin,
{
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH {
        match tokio::time::timeout(BATCH_WAIT, updates.next()).await {
            Ok(Some(u)) => batch.push(u),
            _ => break,
        }
    }
    tracing::debug!(updates = batch.len(), "updates");
    batch
}

/// What is enforced now goes to the state directory, when it differs from the record.
fn record_last_known(node: &Node, state: &mut Loop) {
    let now_known = state.index.last_known();
    if now_known == state.saved {
        return;
    }
    let result = match &now_known {
        Some(k) => node.state().save(LAST_KNOWN_FILE, LAST_KNOWN_KIND, k),
        None => node.state().remove(LAST_KNOWN_FILE),
    };
    match result {
        Ok(()) => state.saved = now_known,
        Err(e) => warn!(error = %e, "the last known config was not recorded"),
    }
}

/// A watch with kube's backoff (a watch the apiserver closed or refused is opened again
/// after a jittered pause, 0.8 s doubling to 30 s) and its bookmarks (kube asks for
/// them: they keep its resource version recent, so that it resumes where it stopped on
/// another apiserver of the control plane); each list it begins is counted for
/// `resource`.
fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    (metrics, resource): (&Arc<Metrics>, &'static str),
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let metrics = metrics.clone();
    watcher::watcher(api, config)
        .default_backoff()
        .inspect(move |e| {
            if matches!(e, Ok(Event::Init)) {
                metrics.watch_list(resource);
            }
        })
}

/// `update()` every `period`, the first at once.
/// How often the kubelet's start time is looked at (a scan of the host's procfs).
const KUBELET_LOOK_EVERY: Duration = Duration::from_secs(5);

fn every(
    period: Duration,
    update: fn() -> Update,
) -> impl Stream<Item = watcher::Result<Update>> + Send {
    futures::stream::unfold(tokio::time::interval(period), move |mut t| async move {
        t.tick().await;
        Some((Ok(update()), t))
    })
}
