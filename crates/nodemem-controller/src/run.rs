//! The controller's I/O, a thin layer around the [`Decider`]: watches feed the [`World`];
//! after a change (and every tick, since rollout steps depend on time) the decision is
//! computed and carried out: NodeMemoryConfig specs by server-side apply (field manager
//! `nodemem-controller`, owned by their policy), deletions, policy status, Events. The
//! world learns each write from the apiserver's answer, so the next decision does not
//! repeat it.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, ObjectReference, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Reporter};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use nodemem_api::{NodeMemoryConfig, NodeMemoryPolicy, NodeMemoryPolicyStatus};
use nodemem_plumbing::events::Recorder;
use serde_json::json;
use tracing::{info, warn};

use crate::agents::daemonset::AgentDeploy;
use crate::decide::Decider;
use crate::decision::{ConfigWrite, Decision, FinalizerOrder};
use crate::drain::rfc3339;
use crate::metrics::{ErrorCategory, Metrics};
use crate::world::World;
use nodemem_api::report::{READY_SINCE, SPEC_CHANGED_AT};
use nodemem_api::watch_index::{Learned, Watched};

pub use crate::write::field_managers::{FIELD_MANAGER, FINALIZER_MANAGER};

enum Update {
    Policy(Box<Event<NodeMemoryPolicy>>),
    Node(Box<Event<kube::core::PartialObjectMeta<Node>>>),
    Config(Box<Event<NodeMemoryConfig>>),
    /// The agent DaemonSet's pods and Events (when the controller deploys the agents).
    AgentPod(Box<Event<Pod>>),
    AgentEvent(Box<Event<CoreEvent>>),
    /// The agent DaemonSet itself: applied again when someone else deletes or edits it.
    AgentDaemonSet(Box<Event<DaemonSet>>),
    /// A reading of the installed CRDs (`crate::crd_check`).
    Crds(crate::crd_check::Gaps),
    Tick,
}

/// Why the controller's loop stopped (the process exits and its Deployment restarts it).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the watch streams ended")]
    WatchesEnded,
}

/// The watches' progress: decisions wait until all of them have listed.
#[derive(Default)]
struct ControllerWatches {
    policies: Watched<NodeMemoryPolicy>,
    nodes: Watched<kube::core::PartialObjectMeta<Node>>,
    configs: Watched<NodeMemoryConfig>,
    /// Watched when the controller deploys the agents. Decisions do not wait for
    /// these: a controller whose RBAC lacks them (an older install's) still rolls out;
    /// what they tell is unknown until both have listed.
    agents: Option<(Watched<Pod>, Watched<CoreEvent>)>,
    /// The agent DaemonSet (when the controller deploys the agents): until it listed,
    /// no drift is known (`crate::agents::blocked::AgentPods::daemonset_drifted`).
    daemonset: Watched<DaemonSet>,
}

impl ControllerWatches {
    fn listed(&self) -> bool {
        self.policies.listed() && self.nodes.listed() && self.configs.listed()
    }

    /// Feeds one watch event to the world; true when it changed anything.
    fn learn(&mut self, world: &mut World, update: Update) -> bool {
        let learned = match (update, self.agents.as_mut()) {
            (Update::Policy(e), _) => self.policies.learn(world, *e),
            (Update::Node(e), _) => self.nodes.learn(world, *e),
            (Update::Config(e), _) => self.configs.learn(world, *e),
            (Update::AgentPod(e), Some((pods, _))) => pods.learn(world, *e),
            (Update::AgentEvent(e), Some((_, events))) => events.learn(world, *e),
            (Update::AgentDaemonSet(e), Some(_)) => self.daemonset.learn(world, *e),
            (Update::Crds(gaps), _) => learn_crd_gaps(world, gaps),
            (
                Update::AgentPod(_)
                | Update::AgentEvent(_)
                | Update::AgentDaemonSet(_)
                | Update::Tick,
                _,
            ) => Learned::Nothing,
        };
        let agents_listed = self
            .agents
            .as_ref()
            .is_some_and(|(pods, events)| pods.listed() && events.listed());
        let known = world
            .agents
            .as_mut()
            .is_some_and(|a| a.set_listed(agents_listed));
        learned != Learned::Nothing || known
    }
}

/// A reading of the CRDs, logged when it differs from the last.
fn learn_crd_gaps(world: &mut World, gaps: crate::crd_check::Gaps) -> Learned {
    if world.crd_gaps == gaps {
        return Learned::Nothing;
    }
    crate::crd_check::report(&world.crd_gaps, &gaps);
    world.crd_gaps = gaps;
    Learned::Whole
}

/// Events queued beyond this many are learned while a decision's writes run: a
/// fan-out's own events (one per config written) then hold at most this many in memory
/// (about 20 MiB; 20,000 queued made the controller's peak 156 MiB at 20,000 nodes,
/// learning them all during the writes 104 MiB). Below it the writes have the cores to
/// themselves (the apiserver shares them): learning during the writes made a 20,000-node
/// fan-out 5 to 10 % slower.
const LEARN_DURING_WRITES_ABOVE: usize = 8_192;

/// The watch events the decisions learn from, taken from the queue (`crate::queue`)
/// into the world: before a decision, and while its writes run once many are queued.
struct Inbox {
    received: tokio::sync::mpsc::Receiver<Result<Update, watcher::Error>>,
    learned: Lessons,
}

/// What the events taught since the last decision.
struct Lessons {
    watches: ControllerWatches,
    metrics: std::sync::Arc<Metrics>,
    /// The world changed.
    dirty: bool,
    /// A tick came (time-based rollout steps).
    tick: bool,
    /// Events learned.
    taken: usize,
}

impl Lessons {
    fn learn(&mut self, world: &mut World, update: Result<Update, watcher::Error>) {
        self.taken += 1;
        match update {
            Err(e) => {
                self.metrics.error(ErrorCategory::Watch);
                warn!(error = %e, "watch failed; retrying with backoff");
            }
            Ok(Update::Tick) => self.tick = true,
            Ok(update) => self.dirty |= self.watches.learn(world, update),
        }
    }
}

impl Inbox {
    fn new(
        received: tokio::sync::mpsc::Receiver<Result<Update, watcher::Error>>,
        metrics: std::sync::Arc<Metrics>,
        agents: bool,
    ) -> Self {
        Inbox {
            received,
            learned: Lessons {
                watches: ControllerWatches {
                    agents: agents.then(Default::default),
                    ..ControllerWatches::default()
                },
                metrics,
                dirty: false,
                tick: false,
                taken: 0,
            },
        }
    }

    /// Something learned waits for a decision, and the watches have listed.
    fn pending(&self) -> bool {
        self.learned.watches.listed() && (self.learned.dirty || self.learned.tick)
    }

    /// Waits for the next event and learns it with everything queued behind it;
    /// false when the watches ended.
    async fn wait(&mut self, world: &mut World) -> bool {
        let Some(first) = self.received.recv().await else {
            return false;
        };
        self.learned.metrics.queued(self.received.len());
        crate::queue::take_queued(first, &mut self.received, |u| self.learned.learn(world, u));
        true
    }

    /// Learns everything queued now, and nothing that comes later.
    fn take_queued(&mut self, world: &mut World) {
        self.learned.metrics.queued(self.received.len());
        if let Ok(first) = self.received.try_recv() {
            crate::queue::take_queued(first, &mut self.received, |u| self.learned.learn(world, u));
        }
    }

    /// Awaits `answer`; while more than [`LEARN_DURING_WRITES_ABOVE`] events are
    /// queued, learns them meanwhile.
    async fn beside<T>(
        &mut self,
        world: &mut World,
        answer: impl std::future::Future<Output = T>,
    ) -> T {
        tokio::pin!(answer);
        loop {
            let crowded = self.received.len() > LEARN_DURING_WRITES_ABOVE;
            tokio::select! {
                biased;
                out = &mut answer => return out,
                Some(update) = self.received.recv(), if crowded => {
                    self.learned.learn(world, update)
                }
            }
        }
    }
}

/// What a decision is carried out through: the policies, the configs, the Events.
#[derive(Clone, Copy)]
struct Apis<'a> {
    policies: &'a Api<NodeMemoryPolicy>,
    configs: &'a Api<NodeMemoryConfig>,
    recorder: &'a Recorder,
}

pub struct Controller {
    pub metrics: std::sync::Arc<Metrics>,
    /// Drains running in the background (node, revision).
    pub draining: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<(String, String)>>>,
    /// How often time-based rollout steps (minReadySeconds, deadlines) are checked.
    pub tick: Duration,
    /// The agent DaemonSet to maintain, if the controller deploys the agents.
    pub agents: Option<AgentDeploy>,
    /// The controller's own Deployment (in the agents' namespace): the DaemonSet's owner.
    pub deployment: Option<String>,
    /// NodeMemoryConfig writes (and deletions) in flight at once.
    pub write_concurrency: usize,
    /// Watch events queued for the decisions at most (`crate::queue`).
    pub event_queue: usize,
    /// The enforcement modes the install allows (`crate::agents::modes`).
    pub enforcement: crate::agents::modes::EnforcementModes,
}

type UpdateStream = futures::stream::BoxStream<'static, Result<Update, watcher::Error>>;

/// The agent DaemonSet's pods and its Events in `namespace`: what keeps an agent from
/// starting (`crate::agents`); and the DaemonSet itself, which someone may delete or
/// edit.
fn agent_watches(client: &Client, namespace: &str) -> Vec<UpdateStream> {
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), namespace);
    let daemonset = watcher::watcher(
        daemonsets,
        watcher::Config::default()
            .fields(&format!("metadata.name={}", crate::agents::daemonset::NAME)),
    )
    .default_backoff()
    .modify(|d| d.metadata.managed_fields = None)
    .map(|e| e.map(|e| Update::AgentDaemonSet(Box::new(e))));
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let events: Api<CoreEvent> = Api::namespaced(client.clone(), namespace);
    let pod_events = watcher::watcher(
        pods,
        watcher::Config::default().labels(&format!(
            "app.kubernetes.io/name={}",
            crate::agents::daemonset::NAME
        )),
    )
    .default_backoff()
    .modify(|p| p.metadata.managed_fields = None)
    .map(|e| e.map(|e| Update::AgentPod(Box::new(e))));
    let daemonset_events = watcher::watcher(
        events,
        watcher::Config::default().fields(&format!(
            "involvedObject.kind=DaemonSet,involvedObject.name={}",
            crate::agents::daemonset::NAME
        )),
    )
    .default_backoff()
    .map(|e| e.map(|e| Update::AgentEvent(Box::new(e))));
    vec![
        pod_events.boxed(),
        daemonset_events.boxed(),
        daemonset.boxed(),
    ]
}

/// Stops the watch reader when the controller's loop ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Controller {
    pub async fn run(&self, client: Client) -> Result<(), RunError> {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: FIELD_MANAGER.into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        let policies: Api<NodeMemoryPolicy> = Api::all(client.clone());
        let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
        let nodes: Api<kube::core::PartialObjectMeta<Node>> = Api::all(client.clone());
        let policy_events = watcher::watcher(policies.clone(), watcher::Config::default())
            .default_backoff()
            .map(|e| e.map(|e| Update::Policy(Box::new(e))));
        // Labels are all the controller reads of a node: metadata only.
        let node_events = watcher::watcher(nodes, watcher::Config::default())
            .default_backoff()
            .map(|e| e.map(|e| Update::Node(Box::new(e))));
        // managedFields are never read, and are most of a config's size: dropped before
        // events queue up behind a decision's writes.
        let config_events = watcher::watcher(configs.clone(), watcher::Config::default())
            .default_backoff()
            .modify(|c| c.metadata.managed_fields = None)
            .map(|e| e.map(|e| Update::Config(Box::new(e))));
        let ticks = futures::stream::unfold(tokio::time::interval(self.tick), |mut t| async {
            t.tick().await;
            Some((Ok(Update::Tick), t))
        });
        let crds = crate::crd_check::readings(client.clone()).map(|g| Ok(Update::Crds(g)));
        let mut streams = vec![
            policy_events.boxed(),
            node_events.boxed(),
            config_events.boxed(),
            ticks.boxed(),
            crds.boxed(),
        ];
        if let Some(deploy) = &self.agents {
            streams.extend(agent_watches(&client, &deploy.namespace));
        }
        let updates = futures::stream::select_all(streams);
        // Read all the time, also while a decision's writes are in flight, into a
        // queue with a cap (`crate::queue`).
        let (received, reader) = crate::queue::start(updates, self.event_queue);
        let _reader = AbortOnDrop(reader);
        let mut upkeep = self.agents.clone().map(|deploy| {
            crate::agents::upkeep::AgentUpkeep::new(&client, deploy, self.deployment.clone())
        });
        let mut world = World::default();
        world.installed_modes = self.enforcement;
        world.agent_pod = self.agents.as_ref().map(|deploy| deploy.pod.clone());
        world.agents = self
            .agents
            .as_ref()
            .map(|_| crate::agents::blocked::AgentPods::of(crate::agents::daemonset::NAME));
        let mut decider = Decider::default();
        let mut retries = crate::write::retries::Retries::default();
        let mut inbox = Inbox::new(received, self.metrics.clone(), self.agents.is_some());
        info!(
            agents = self.agents.is_some(),
            "watching NodeMemoryPolicies, Nodes and NodeMemoryConfigs (and the agents' pods and DaemonSet Events when it deploys them)"
        );
        // Start-up's cost (the lists read and indexed, the first decision) grows with
        // the cluster: said once, with its sizes, for whoever sizes the controller.
        let watching_since = std::time::Instant::now();
        let mut started_up = false;
        loop {
            // Everything queued makes one decision: events and ticks that arrived
            // during the last decision's writes do not each decide again. Waits only
            // when nothing learned is pending (events learned during the writes are).
            if inbox.pending() {
                inbox.take_queued(&mut world);
            } else if !inbox.wait(&mut world).await {
                break;
            }
            let learned = &mut inbox.learned;
            self.metrics.taken(std::mem::take(&mut learned.taken));
            // Decide on whole lists only, and only after a change or a tick (a change
            // learned before the lists are whole waits for them; a tick does not).
            if !inbox.pending() {
                inbox.learned.tick = false;
                continue;
            }
            inbox.learned.dirty = false;
            inbox.learned.tick = false;
            let started = std::time::Instant::now();
            let now = k8s_openapi::jiff::Timestamp::now().as_second();
            world.leading_since.get_or_insert(now);
            let decision = decider.decide(&mut world, now);
            if !started_up {
                started_up = true;
                log_start_up(&world, watching_since, started);
            }
            let apis = Apis {
                policies: &policies,
                configs: &configs,
                recorder: &recorder,
            };
            self.carry_out(&decision, &mut world, &mut inbox, &apis, &mut retries, now)
                .await;
            retries.flush(&self.metrics);
            let drains = crate::drain::Drains {
                client: &client,
                metrics: &self.metrics,
                running: &self.draining,
            };
            drains.carry_out(&decision, &mut world, now).await;
            if let Some(upkeep) = upkeep.as_mut() {
                upkeep.keep(&client, &self.metrics, &world).await;
            }
            self.metrics.policies(
                world
                    .policies
                    .iter()
                    .map(|(name, p)| (name.as_str(), &p.status)),
            );
            self.metrics.reconciled(started.elapsed().as_secs_f64());
        }
        Err(RunError::WatchesEnded)
    }

    async fn carry_out(
        &self,
        d: &Decision,
        world: &mut World,
        inbox: &mut Inbox,
        apis: &Apis<'_>,
        retries: &mut crate::write::retries::Retries,
        now: i64,
    ) {
        let Apis {
            policies,
            configs,
            recorder,
        } = *apis;

        // The policies' status is written beside the config writes, not after them: it
        // says what this decision starts (the nodes it updates now), which the views
        // should show while a long fan-out's writes run (20 s and more at 20,000
        // nodes); and not before them, which would hold every write back by one round
        // trip. Its counts are the world's before the writes either way; the next
        // decision counts the writes. The world learns the answers after the writes
        // (an answer older than what the watches taught meanwhile is left out).
        let statuses = retries.keep_due(STATUS, &d.statuses, |(name, _)| name, &self.metrics);
        let configs_due = retries.keep_due(CONFIG, &d.writes, |w| &w.node, &self.metrics);
        let lacking = lacking_in_installed::<NodeMemoryPolicy>(world);
        let statuses = write_statuses(&statuses, &lacking, policies, &self.metrics);
        let writes = self.write_configs(&configs_due, world, inbox, configs, now);
        let (status_answers, config_answers) = futures::join!(statuses, writes);
        for (name, answer) in status_answers {
            match answer {
                Ok(p) => {
                    retries.succeeded(STATUS, &name);
                    world.apply_policy(&p);
                }
                Err(e) => retries.failed(STATUS, &name, &e),
            }
        }
        for (node, answer) in config_answers {
            match answer {
                Ok(()) => retries.succeeded(CONFIG, &node),
                Err(e) => retries.failed(CONFIG, &node, &e),
            }
        }
        let deletes = retries.keep_due(DELETE, &d.deletes, |n| n, &self.metrics);
        for (node, answer) in self.delete_configs(&deletes, world, inbox, configs).await {
            match answer {
                Ok(()) => retries.succeeded(DELETE, &node),
                Err(e) => retries.failed(DELETE, &node, &e),
            }
        }
        self.stamp_ready(world, inbox, configs).await;
        for order in &d.finalizers {
            self.set_finalizer(policies, order, world).await;
        }
        for (name, named) in &d.spent_rollback_requests {
            let version = world.policy_version(name).map(str::to_string);
            spend_rollback_request(policies, name, named, version.as_deref(), &self.metrics).await;
        }
        for e in &d.events {
            let Some(p) = world.policies.get(&e.policy) else {
                continue;
            };
            let reference = ObjectReference {
                api_version: Some("nodemem.io/v1alpha1".into()),
                kind: Some("NodeMemoryPolicy".into()),
                name: Some(e.policy.clone()),
                uid: p.uid.clone(),
                ..ObjectReference::default()
            };
            info!(policy = %e.policy, reason = e.reason, message = %e.message, "rollout");
            let event = KubeEvent {
                type_: if e.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: e.reason.to_string(),
                note: Some(e.message.chars().take(1000).collect()),
                action: "Rollout".into(),
                secondary: None,
            };
            if let Err(err) = recorder.publish(&event, &reference).await {
                warn!(error = %err, "event not recorded");
            }
        }
    }
}

impl Controller {
    /// Adds or removes [`nodemem_api::HANDOFF_FINALIZER`] by server-side apply (the
    /// controller's field manager owns that one entry; others' finalizers stay). The
    /// resourceVersion seen is a precondition: an apply never creates a policy that is
    /// gone, and one that changed meanwhile is decided again.
    async fn set_finalizer(
        &self,
        policies: &Api<NodeMemoryPolicy>,
        order: &FinalizerOrder,
        world: &mut World,
    ) {
        let Some(version) = world.policy_version(&order.policy) else {
            return;
        };
        let finalizers: &[&str] = if order.hold {
            &[nodemem_api::HANDOFF_FINALIZER]
        } else {
            &[]
        };
        let patch = json!({"apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
            "metadata": {"name": order.policy, "resourceVersion": version,
                "finalizers": finalizers}});
        let apply = PatchParams::apply(FINALIZER_MANAGER).force();
        match policies
            .patch(&order.policy, &apply, &Patch::Apply(&patch))
            .await
        {
            Ok(p) => {
                self.metrics.write("policy_finalizer", true);
                if !order.hold {
                    info!(policy = %order.policy, "every node has left the deleted policy; it goes now");
                }
                world.apply_policy(&p);
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                self.metrics.write("policy_finalizer", false);
                warn!(policy = %order.policy, error = %e, "handoff finalizer not written; retried on the next reconcile");
            }
        }
    }
}

/// The kinds of write that back off per object (`crate::write::backoff::KINDS`).
const CONFIG: &str = "config";
const DELETE: &str = "config_delete";
const STATUS: &str = "policy_status";
const READY_STAMP: &str = "config_ready_stamp";

/// The fields this build writes that the installed CRD of `K` lacks (`crate::crd_check`;
/// none while unknown: a write then fails as it would have and says why).
fn lacking_in_installed<K: kube::CustomResourceExt>(world: &World) -> Vec<String> {
    world
        .crd_gaps
        .as_ref()
        .and_then(|gaps| gaps.get(K::crd_name()))
        .cloned()
        .unwrap_or_default()
}

/// The policies' statuses by server-side apply, one after the other: each policy's
/// answer (a failure backs off and is summarised in the log by the caller). The
/// fields the installed CRD lacks (`lacking`) are left out: server-side apply refuses
/// an undeclared field, and the whole status would go unwritten with it (a
/// controller upgraded by Helm, which never upgrades CRDs, meets older ones). Status
/// only: a config's spec is what its node enforces, and one written without a field
/// would carry a revision its agent does not run; that write fails instead, the node
/// stays on its revision and `CRDOutdated` says why.
async fn write_statuses(
    statuses: &[&(String, NodeMemoryPolicyStatus)],
    lacking: &[String],
    policies: &Api<NodeMemoryPolicy>,
    metrics: &Metrics,
) -> Vec<(String, Result<NodeMemoryPolicy, kube::Error>)> {
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let mut answers = Vec::new();
    for (name, status) in statuses.iter().copied() {
        let mut patch = json!({"apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
            "status": status});
        nodemem_api::crdgen::without_missing(&mut patch, lacking);
        let answer = policies
            .patch_status(name, &apply, &Patch::Apply(&patch))
            .await;
        metrics.write(STATUS, answer.is_ok());
        answers.push((name.clone(), answer));
    }
    answers
}

/// Removes a rollback request the spec has moved on from. The resourceVersion the
/// decision saw is a precondition: a request changed meanwhile stays (409, decided
/// again), and a policy that is gone is not touched (404).
async fn spend_rollback_request(
    policies: &Api<NodeMemoryPolicy>,
    name: &str,
    named: &str,
    version: Option<&str>,
    metrics: &Metrics,
) {
    let patch = json!({"metadata": {"resourceVersion": version,
        "annotations": {nodemem_api::ROLLBACK_ANNOTATION: null}}});
    match policies
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            metrics.write("policy_rollback_request", true);
            info!(policy = %name, revision = %named, "rollback request spent: the spec moved on");
        }
        Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => {}
        Err(e) => {
            metrics.write("policy_rollback_request", false);
            warn!(policy = %name, error = %e, "rollback request not removed; retried on the next reconcile");
        }
    }
}

impl Controller {
    /// The decision's config specs by server-side apply, `write_concurrency` at a
    /// time; the world learns each from the apiserver's answer as it comes. A write
    /// that fails is decided again by the first reconcile after its backoff from the
    /// newest world, so no retry can write an older revision. Each node's answer, for
    /// the backoffs.
    async fn write_configs(
        &self,
        writes: &[&ConfigWrite],
        world: &mut World,
        inbox: &mut Inbox,
        configs: &Api<NodeMemoryConfig>,
        now: i64,
    ) -> Vec<(String, Result<(), kube::Error>)> {
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        // The change time moves only with the revision.
        let changed_at: Vec<i64> = writes
            .iter()
            .map(|w| match world.configs.get(&w.node) {
                Some(c) if c.spec.revision == w.spec.revision => c.spec_changed_at.unwrap_or(now),
                _ => now,
            })
            .collect();
        let apply = &apply;
        let mut answers = futures::stream::iter(writes.iter().copied().zip(changed_at))
            .map(|(w, changed_at)| {
                let patch = config_patch(w, changed_at);
                async move {
                    (
                        w,
                        configs.patch(&w.node, apply, &Patch::Apply(&patch)).await,
                    )
                }
            })
            .buffer_unordered(self.write_concurrency.max(1));
        // A fan-out's own events are learned while its writes run once many are
        // queued (20,000 of them at 20,000 nodes).
        let mut results = Vec::with_capacity(writes.len());
        while let Some((w, answer)) = inbox.beside(world, answers.next()).await {
            self.metrics.write(CONFIG, answer.is_ok());
            let answer = answer.map(|c| {
                world.apply_config(&c);
            });
            results.push((w.node.clone(), answer));
        }
        results
    }

    /// Stamps the configs whose report this controller saw turn good (or saw good
    /// first without a stamp) with that time on its clock
    /// ([`nodemem_api::report::READY_SINCE`]), `write_concurrency` at a time: a
    /// controller that takes over counts minReadySeconds from it. A stamp that is not
    /// written is logged and due again when its config is next learned; until then a
    /// controller that takes over waits minReadySeconds from when it sees the node.
    async fn stamp_ready(
        &self,
        world: &mut World,
        inbox: &mut Inbox,
        configs: &Api<NodeMemoryConfig>,
    ) {
        let stamps = world.take_ready_stamps();
        let written = stamps.len();
        let failed = self
            .annotate(world, inbox, configs, READY_SINCE, stamps)
            .await;
        for _ in failed.len()..written {
            self.metrics.write(READY_STAMP, true);
        }
        for (node, e) in failed {
            self.metrics.write(READY_STAMP, false);
            warn!(node = %node, error = %e, "the time its report turned good could not be stamped on the config: a controller that takes over waits minReadySeconds for it again")
        }
    }

    /// The decision's config deletions, `write_concurrency` at a time: each node's
    /// answer (one already gone is deleted), for the backoffs.
    /// Marks the configs about to be deleted whose nodes still run their values (a
    /// pool rolled back to no config): their agents then give back at once instead of
    /// after their grace. A mark that fails leaves the grace; the deletion goes on.
    /// The marked objects are taken into the world before the deletions: the watch's
    /// event for a mark, arriving after the deletion's answer, is then not newer, and
    /// does not bring back a config the controller deleted (to be repaired as one
    /// someone else deleted).
    async fn mark_to_give_back(
        &self,
        nodes: &[&String],
        world: &mut World,
        inbox: &mut Inbox,
        configs: &Api<NodeMemoryConfig>,
    ) {
        let marks: Vec<(String, String)> = nodes
            .iter()
            .filter_map(|node| Some((node.to_string(), world.give_back_mark(node)?)))
            .collect();
        let answers = self
            .annotate(
                world,
                inbox,
                configs,
                nodemem_api::GIVE_BACK_ANNOTATION,
                marks,
            )
            .await;
        for (node, e) in answers {
            warn!(node = %node, error = %e, "the config could not be marked to be given back at once: its agent gives back after its grace")
        }
    }

    /// Sets the annotation `key` on each node's config to its value by a merge patch
    /// (the controller's field manager), `write_concurrency` at a time; the world
    /// takes each patched config as it comes back (before any deletion that follows:
    /// a watch event for the patch, arriving after the deletion's answer, is then not
    /// newer). The nodes whose patch failed, with the error.
    async fn annotate(
        &self,
        world: &mut World,
        inbox: &mut Inbox,
        configs: &Api<NodeMemoryConfig>,
        key: &'static str,
        values: Vec<(String, String)>,
    ) -> Vec<(String, kube::Error)> {
        let params = PatchParams {
            field_manager: Some(crate::write::field_managers::FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let params = &params;
        let mut answers = futures::stream::iter(values)
            .map(|(node, value)| async move {
                let patch = json!({"metadata": {"annotations": {key: value}}});
                let answer = configs.patch(&node, params, &Patch::Merge(&patch)).await;
                (node, answer)
            })
            .buffer_unordered(self.write_concurrency.max(1));
        let mut failed = Vec::new();
        while let Some((node, answer)) = inbox.beside(world, answers.next()).await {
            match answer {
                Ok(annotated) => {
                    world.apply_config(&annotated);
                }
                Err(e) => failed.push((node, e)),
            }
        }
        failed
    }

    async fn delete_configs(
        &self,
        nodes: &[&String],
        world: &mut World,
        inbox: &mut Inbox,
        configs: &Api<NodeMemoryConfig>,
    ) -> Vec<(String, Result<(), kube::Error>)> {
        self.mark_to_give_back(nodes, world, inbox, configs).await;
        let mut answers = futures::stream::iter(nodes.iter().copied())
            .map(|node| async move { (node, configs.delete(node, &DeleteParams::default()).await) })
            .buffer_unordered(self.write_concurrency.max(1));
        let mut results = Vec::with_capacity(nodes.len());
        while let Some((node, answer)) = inbox.beside(world, answers.next()).await {
            let answer = match answer {
                Ok(_) => {
                    self.metrics.write(DELETE, true);
                    world.delete_own_config(node);
                    Ok(())
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    world.delete_own_config(node);
                    Ok(())
                }
                Err(e) => {
                    self.metrics.write(DELETE, false);
                    Err(e)
                }
            };
            results.push((node.clone(), answer));
        }
        results
    }
}

/// A config's spec as the controller owns it, with the time its revision last changed
/// and its policy as controlling owner.
fn config_patch(w: &ConfigWrite, changed_at: i64) -> serde_json::Value {
    let mut metadata =
        json!({"name": w.node, "annotations": {SPEC_CHANGED_AT: rfc3339(changed_at)}});
    if let Some(uid) = &w.policy_uid {
        metadata["ownerReferences"] = json!([{"apiVersion": "nodemem.io/v1alpha1",
            "kind": "NodeMemoryPolicy", "name": w.spec.policy, "uid": uid, "controller": true,
            "blockOwnerDeletion": false}]);
    }
    json!({"apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
        "metadata": metadata, "spec": w.spec})
}

/// The first decision is made: the lists are whole and indexed.
fn log_start_up(
    world: &World,
    watching_since: std::time::Instant,
    decided_from: std::time::Instant,
) {
    info!(
        nodes = world.nodes.len(),
        configs = world.configs.len(),
        policies = world.policies.len(),
        listed_ms = decided_from.duration_since(watching_since).as_millis() as u64,
        first_decision_ms = decided_from.elapsed().as_millis() as u64,
        "started up: every list read and indexed, the first decision made"
    );
}
