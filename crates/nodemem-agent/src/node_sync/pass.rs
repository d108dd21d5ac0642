//! One pass: the config's settings carried out on the node (the kubelet's drop-in under
//! `enforcement: Kubelet`, the cgroups otherwise), the health, observation and relief
//! that follow from what was computed, and the status that says so.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodemem_api::node_index::{IndexedConfig, NodeIndex};
use nodemem_api::NodeMemoryConfigStatus;
use nodemem_apply::ApplyReport;
use nodemem_model::cluster::policy::Enforcement;

use nodemem_model::node::creation::CreationTable;
use nodemem_model::node::{Admission, DesiredNode, NodePod};
use nodemem_model::settings::NodeSettings;
use tracing::{info, warn};

use super::announce::{Announcer, ClassSeen, Refusal};
use super::batch::{Batch, NextPass};
use crate::health::{verdict, Baseline, Now, Refaults, Verdict};
use crate::kubelet_mode::{KubeletMode, KubeletOutcome};
use crate::metrics::{Metrics, PodSignals, Trigger};
use crate::nri::NriState;
use crate::observer::Observer;
use crate::reclaim::Reclaim;
use crate::relief::Relief;
use crate::status::{add_state_recovered, status, status_write, PassOutcome, StatusWrite};
use crate::status_writer::StatusWriter;
use nodemem_apply::applier::{off, NodeApplier, Reach, WriteMode};
use nodemem_apply::node::Node;

/// The node the agent discovered, and its writers: the engine, the kubelet's
/// configuration, and systemd's record of the units the engine writes (systemd-driver
/// nodes whose systemd the agent reaches). The node is lent to each.
pub struct Writers {
    pub node: Node,
    pub applier: NodeApplier,
    pub kubelet: KubeletMode,
    pub units: Option<crate::units::UnitHolder>,
}

/// What a pass reads: the index, the pods computed from it, and the last status sent
/// for this config (None: none, or one for another object of the same name).
pub struct PassInput<'a> {
    pub index: &'a NodeIndex,
    pub pods: &'a [NodePod],
    pub last: Option<&'a NodeMemoryConfigStatus>,
}

/// What passes share with the NRI plugin: the creation table they publish, the path
/// new containers take (for the status).
pub struct NriLink {
    pub table_out: tokio::sync::watch::Sender<Arc<CreationTable>>,
    pub state: tokio::sync::watch::Receiver<NriState>,
}

/// What passes keep from one to the next.
pub struct Passes {
    pub metrics: Arc<Metrics>,
    pub announcer: Announcer,
    /// Counters at the time the current revision was applied.
    baseline: Baseline,
    /// What the managed containers did against memory.high.
    observer: Observer,
    /// Relief for containers memory.high chokes.
    relief: Relief,
    /// Proactive reclaim of cold memory.
    reclaim: Reclaim,
    /// The node's /proc (its swaps read at whole-node passes, for reclaim).
    proc_root: std::path::PathBuf,
    nri: NriLink,
    /// The values stay a while after the config goes (`super::grace`).
    grace: super::grace::Grace,
    /// Asks the loop for a pass (when a gone config's grace ends).
    wake: tokio::sync::mpsc::UnboundedSender<()>,
}

/// One pass over a config with settings.
struct Pass<'a> {
    input: &'a PassInput<'a>,
    config: &'a IndexedConfig,
    trigger: Trigger,
    reach: Reach<'a>,
    now: Time,
    started: Instant,
}

impl Passes {
    pub fn new(
        metrics: Arc<Metrics>,
        announcer: Announcer,
        (relief, reclaim): (Relief, Reclaim),
        proc_root: std::path::PathBuf,
        nri: NriLink,
        wake: tokio::sync::mpsc::UnboundedSender<()>,
    ) -> Self {
        Passes {
            metrics,
            announcer,
            baseline: Baseline::default(),
            observer: Observer::default(),
            relief,
            reclaim,
            proc_root,
            nri,
            grace: super::grace::Grace::default(),
            wake,
        }
    }

    /// What new containers are created with: the values just computed, under
    /// `enforcement: Agent` only (the kubelet's own files left out); nothing otherwise.
    fn publish_creation(
        &self,
        settings: Option<&NodeSettings>,
        desired: Option<&DesiredNode<'_>>,
        applier: &NodeApplier,
    ) {
        let table = match (settings, desired) {
            (Some(s), Some(d)) if s.enforcement == Enforcement::Agent => {
                let leave_alone = applier.recorded().conflict.map_or(&[][..], |c| c.files);
                CreationTable::of(d, leave_alone)
            }
            _ => CreationTable::default(),
        };
        self.nri.table_out.send_replace(Arc::new(table));
    }

    /// One pass and, when it changed, the status (handed to the status writer).
    /// Returns that status.
    pub async fn pass(
        &mut self,
        writers: &mut Writers,
        input: &PassInput<'_>,
        next: &NextPass<'_>,
        status_out: &StatusWriter,
    ) -> Option<NodeMemoryConfigStatus> {
        let started = Instant::now();
        let Some(config) = input.index.config() else {
            self.without_config(writers, input).await;
            return None;
        };
        self.grace.present();
        self.metrics
            .config(Some((&config.name, &config.policy, &config.revision)));
        let pass = Pass {
            input,
            config,
            trigger: next.trigger,
            reach: next.reach,
            now: Time(k8s_openapi::jiff::Timestamp::now()),
            started,
        };
        let (mut new_status, told) = match &config.settings {
            Err(problems) => (
                status(
                    &config.revision,
                    config.generation,
                    PassOutcome::InvalidConfig(problems),
                    None,
                    writers.node.discovery(),
                    input.last,
                    &pass.now,
                ),
                PodNews::default(),
            ),
            Ok(settings) => self.carry_out(writers, &pass, settings).await,
        };
        add_state_recovered(
            &mut new_status,
            writers.applier.recorded().recoveries,
            config.generation,
            input.last,
            &pass.now,
        );
        self.metrics
            .record_pass(next.trigger, started.elapsed().as_secs_f64());
        self.announcer.refusal_events(told.refused).await;
        if let Some(classes) = told.classes {
            self.announcer.class_events(classes).await;
        }
        self.report(config, new_status, input.last, status_out)
            .await
    }

    /// No config: given back, unless it has just gone (a config deleted by hand is
    /// written again by the controller at once): then the values stay for the grace,
    /// and a pass when it ends gives back if the config is still gone.
    async fn without_config(&mut self, writers: &mut Writers, input: &PassInput<'_>) {
        use super::grace::{Gone, GRACE};
        match self
            .grace
            .absent(Instant::now(), input.index.config_given_back())
        {
            Gone::GiveBack => self.give_back(writers, input).await,
            Gone::Wait { left, first } => {
                if first {
                    info!(
                        grace_seconds = GRACE.as_secs(),
                        "the NodeMemoryConfig is gone: its values stay this long in case it is written again (a repair), then they are given back"
                    );
                    let wake = self.wake.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(left).await;
                        let _ = wake.send(());
                    });
                }
            }
        }
    }

    /// No config (never created, or deleted): everything nodemem set is given back,
    /// in the cgroups and in the kubelet's configuration.
    async fn give_back(&mut self, writers: &mut Writers, input: &PassInput<'_>) {
        // Reclaim is a policy's too: with no config, no step is taken any more.
        self.reclaim.stop();
        self.publish_creation(None, None, &writers.applier);
        self.metrics.config(None);
        if let Some(outcome) = writers.kubelet.leave(writers.node.state()).await {
            info!(
                ?outcome,
                "no NodeMemoryConfig: the kubelet drop-in is removed"
            );
        }
        match writers.applier.write_node(
            &writers.node,
            &off(),
            input.index.node(),
            input.pods,
            WriteMode::Write,
            Reach::Node,
        ) {
            Ok((_, report)) => {
                // systemd's record is given back too, or its next re-apply would put
                // nodemem's values back.
                self.hold_in_systemd(writers).await;
                if !report.applied.is_empty() {
                    info!(
                        restored = report.applied.len(),
                        "no NodeMemoryConfig: restored what nodemem had set"
                    )
                }
            }
            Err(e) => warn!(error = %e, "restoring without a NodeMemoryConfig failed"),
        }
    }

    /// The settings on the node: the kubelet's drop-in, then the cgroups (written under
    /// Agent, computed only under Kubelet and Observe).
    async fn carry_out(
        &mut self,
        writers: &mut Writers,
        pass: &Pass<'_>,
        settings: &NodeSettings,
    ) -> (NodeMemoryConfigStatus, PodNews) {
        let config = pass.config;
        let kubelet = configure_kubelet(writers, pass, settings).await;
        let node = pass.input.index.node();
        match writers
            .applier
            .enforce(&writers.node, settings, node, pass.input.pods, pass.reach)
        {
            Ok((desired, report)) => {
                let told = PodNews {
                    refused: refusals(&desired),
                    // Every pass computes the whole node (its reach only limits the writes).
                    classes: Some(classes_seen(&desired)),
                };
                let status = self
                    .after_writes(writers, pass, settings, &desired, &report, kubelet.as_ref())
                    .await;
                (status, told)
            }
            Err(e) => {
                warn!(error = %e, "not applied");
                let status = status(
                    &config.revision,
                    config.generation,
                    PassOutcome::Failed(&e),
                    None,
                    writers.node.discovery(),
                    pass.input.last,
                    &pass.now,
                );
                (status, PodNews::default())
            }
        }
    }

    /// What follows a pass that applied: metrics, systemd's record, health, the status,
    /// the observation and relief.
    async fn after_writes(
        &mut self,
        writers: &mut Writers,
        pass: &Pass<'_>,
        settings: &NodeSettings,
        desired: &DesiredNode<'_>,
        report: &ApplyReport,
        kubelet: Option<&KubeletOutcome>,
    ) -> NodeMemoryConfigStatus {
        self.record_writes(pass, desired, report);
        self.report_overridden(&mut writers.applier, desired).await;
        self.publish_creation(Some(settings), Some(desired), &writers.applier);
        self.hold_in_systemd(writers).await;
        let (node, applier) = (&writers.node, &mut writers.applier);
        let recorded = applier.recorded();
        let conflict = recorded.conflict.cloned();
        let memory = recorded.memory.clone();
        let kubelet_read = crate::kubelet_status::KubeletRead {
            settings: recorded.kubelet,
            unread: recorded.kubelet_unread,
            version: memory.kubelet_version,
        };
        // Health reads every managed pod's signals: on whole-node passes only
        // (resyncs, config changes), not on reactions.
        let health = matches!(pass.reach, Reach::Node)
            .then(|| self.health(node, pass.config, settings, desired, report));
        let config = pass.config;
        let mut s = status(
            &config.revision,
            config.generation,
            PassOutcome::Applied {
                desired,
                report,
                conflict: conflict.as_ref(),
                kubelet,
                observing: settings.enforcement == Enforcement::Observe,
                kubelet_read,
            },
            health.as_ref(),
            node.discovery(),
            pass.input.last,
            &pass.now,
        );
        // The threshold the ceilings used, for views that cannot read the kubelet's
        // configuration.
        if let Some(node) = &mut s.node {
            node.hard_eviction_memory = memory.hard_eviction_memory;
            node.container_values = Some(self.nri.state.borrow().status());
        }
        // Observed under Agent and Observe; under Kubelet the kubelet's memory.high is
        // not nodemem's to report on.
        if settings.enforcement != Enforcement::Kubelet {
            s.observation = self.observe(node, &memory, pass, settings, desired);
        }
        s.relief = self.refresh_relief((node, applier), config, settings, desired);
        s.reclaim = self.refresh_reclaim(node, pass, settings, desired);
        s
    }

    /// Reclaim's containers for the settings; its figures go to status on whole-node
    /// passes (they move with every tick), the last ones stay on reactions.
    fn refresh_reclaim(
        &mut self,
        node: &Node,
        pass: &Pass<'_>,
        settings: &NodeSettings,
        desired: &DesiredNode<'_>,
    ) -> Option<Box<nodemem_api::config::ReclaimSummary>> {
        let revision = &pass.config.revision;
        // Whether the node has swap, read where reclaim is set: at each whole-node pass
        // (a swapon or swapoff is seen within the resync), the revision's first among them.
        use nodemem_model::node::reclaim_targets::{class_targets, headline};
        // The pool's reclaim, or a workload class's.
        let headline = headline(settings);
        if matches!(pass.reach, Reach::Node) && headline.is_some() {
            self.reclaim
                .set_swap(crate::reclaim::node_has_swap(&self.proc_root));
        }
        self.reclaim.refresh_targets(
            revision,
            headline.as_ref(),
            class_targets(desired, settings),
            node.own_cgroup(),
            pass.input.last.and_then(|l| l.reclaim.as_deref()),
        );
        if matches!(pass.reach, Reach::Node) {
            self.reclaim.report().map(Box::new)
        } else {
            pass.input
                .last
                .and_then(|l| l.reclaim.clone())
                .filter(|r| r.revision == *revision)
        }
    }

    /// Proactive reclaim's tick: the containers whose interval passed are stepped.
    /// News for status (first readings, the kernel found unable) makes the pass a
    /// whole-node one.
    pub fn reclaim(&mut self, node: &Node, batch: &mut Batch) {
        if !batch.reclaim {
            return;
        }
        let report = self.reclaim.tick(node.cgroup_fs());
        let (containers, mode) = self.reclaim.targets();
        self.metrics.reclaim.tick(containers, mode, &report);
        if self.reclaim.news() {
            batch.whole_node();
        }
    }

    /// Values set at creation (NRI) that someone changed before the agent found the
    /// container's cgroup: the pass wrote them back; each is named on its pod.
    async fn report_overridden(&self, applier: &mut NodeApplier, desired: &DesiredNode<'_>) {
        for o in applier.take_overridden() {
            let Some(pod) = desired.pods.iter().find(|p| {
                p.containers
                    .iter()
                    .any(|c| c.path.as_deref() == Some(&o.cgroup))
            }) else {
                continue;
            };
            let note = format!(
                "{} of {} held {} instead of nodemem's value set at creation (another NRI plugin or the runtime); written back",
                o.file,
                o.cgroup,
                o.found.as_deref().unwrap_or("nothing readable")
            );
            self.announcer
                .overridden_event((pod.namespace, pod.name, pod.uid), &note)
                .await;
        }
    }

    fn record_writes(&self, pass: &Pass<'_>, desired: &DesiredNode<'_>, report: &ApplyReport) {
        for f in &report.failed {
            warn!(error = %f.error, "write failed");
        }
        let errnos: Vec<Option<i32>> = report.failed.iter().map(|f| f.errno).collect();
        self.metrics.writes(
            report.applied.len(),
            report.vanished.len(),
            &errnos,
            pass.trigger == Trigger::Resync,
        );
        self.metrics.node(
            desired.totals.memory_min_bytes,
            desired.totals.memory_low_bytes,
            desired.managed_pods(),
            &desired.pods_per_class(),
            desired
                .memory_manager
                .as_ref()
                .map(|m| (m.pinning_requests, m.pinning_errors)),
        );
        for w in &report.applied {
            tracing::debug!(cgroup = %w.cgroup, file = %w.file, old = ?w.old, new = %w.new, "wrote");
        }
        if !report.applied.is_empty() {
            info!(revision = %pass.config.revision, writes = report.applied.len(), trigger = ?pass.trigger, took_ms = pass.started.elapsed().as_millis() as u64, "applied");
        }
    }

    /// The managed pods' signals (and metrics), against the baseline of the revision.
    fn health(
        &mut self,
        node: &Node,
        config: &IndexedConfig,
        settings: &NodeSettings,
        desired: &DesiredNode<'_>,
        report: &ApplyReport,
    ) -> Verdict {
        let managed = || {
            desired
                .pods
                .iter()
                .filter(|p| p.admission == Admission::Managed)
        };
        let gate = crate::health::refault_gate(&config.health, settings);
        let active = crate::health::reclaim_active(settings);
        let touched = self.reclaim.touched_pods();
        // Under Active reclaim the gate judges what reclaim took from; otherwise (a gate
        // set without it) every managed pod.
        let judged = |pod: &str| gate.is_some() && (!active || touched.contains(pod));
        let readings = crate::health::read_signals(
            node.cgroup_fs(),
            managed().map(|p| p.path.as_str()),
            &judged,
        );
        let current_full = crate::health::current_full(readings.values());
        // Per container for metrics, which carry no refaults.
        let containers = if self.metrics.wants_containers() {
            crate::health::read_signals(
                node.cgroup_fs(),
                managed()
                    .flat_map(|p| &p.containers)
                    .filter_map(|c| c.path.as_deref()),
                &|_| false,
            )
        } else {
            Default::default()
        };
        let per_pod: Vec<PodSignals<'_>> = desired
            .pods
            .iter()
            .filter_map(|p| {
                let reading = *readings.get(&p.path)?;
                Some(PodSignals {
                    namespace: p.namespace,
                    pod: p.name,
                    qos: qos_label(p.qos),
                    reading,
                    containers: p
                        .containers
                        .iter()
                        .filter_map(|c| Some((c.name, *containers.get(c.path.as_deref()?)?)))
                        .collect(),
                })
            })
            .collect();
        self.metrics.signals(&per_pod);
        let signals = self
            .baseline
            .update(&config.revision, &readings, Instant::now());
        let refaults = self.baseline.refaults(gate);
        if matches!(refaults, Refaults::Unmeasured { .. }) {
            // One reading gives no rate: the next whole-node pass measures one, so the
            // rollout is not left waiting for a resync.
            let wake = self.wake.clone();
            tokio::spawn(async move {
                tokio::time::sleep(crate::health::REFAULT_SPAN).await;
                let _ = wake.send(());
            });
        }
        let verdict = verdict(
            signals,
            Now {
                full: current_full,
                refaults,
            },
            &config.health,
            report.failed.len() + report.deferred.len(),
            self.relief.reliefs_since(&config.revision),
        );
        if active && verdict.reason == crate::health::SUSTAINED_REFAULTS {
            // What reclaim took is in use: it stops here, whatever the failure policy
            // does with the rollout, until the next revision.
            self.reclaim.halt(&config.revision, &verdict.message);
        }
        verdict
    }

    /// The observation summary: it moves with every sample, so it goes to status on
    /// whole-node passes, not on every pod event.
    fn observe(
        &mut self,
        node: &Node,
        memory: &nodemem_model::values::memory_qos::NodeMemoryFacts,
        pass: &Pass<'_>,
        settings: &NodeSettings,
        desired: &DesiredNode<'_>,
    ) -> Option<Box<nodemem_api::config::ObservationSummary>> {
        let revision = &pass.config.revision;
        self.observer.refresh(
            revision,
            settings.enforcement != Enforcement::Observe,
            desired,
            node.own_cgroup(),
            memory,
            settings,
        );
        if matches!(pass.reach, Reach::Node) {
            self.observer.report().map(Box::new)
        } else {
            pass.input
                .last
                .and_then(|l| l.observation.clone())
                .filter(|o| o.revision == *revision)
        }
    }

    /// Relief only where the agent writes (validation refuses it elsewhere; a config
    /// that says otherwise relieves nothing).
    fn refresh_relief(
        &mut self,
        (node, applier): (&Node, &mut NodeApplier),
        config: &IndexedConfig,
        settings: &NodeSettings,
        desired: &DesiredNode<'_>,
    ) -> Option<nodemem_api::config::ReliefSummary> {
        let relief_settings = settings
            .relief
            .filter(|_| settings.enforcement == Enforcement::Agent);
        let raised = self.relief.refresh(
            &config.revision,
            relief_settings,
            desired,
            node.own_cgroup(),
            node.cgroup_fs(),
        );
        applier.set_relief(raised);
        self.relief.summary()
    }

    /// The observer's sample, and relief for containers whose trigger fired (and, on each
    /// tick, those under way). News for status, or a relief decision, makes the pass a
    /// whole-node one.
    pub async fn sample_and_relieve(
        &mut self,
        (node, applier): (&Node, &mut NodeApplier),
        batch: &mut Batch,
    ) {
        for _ in &batch.fired {
            self.metrics.relief_trigger_fired();
        }
        if batch.sample {
            let started = std::time::Instant::now();
            self.observer
                .sample(|path| crate::observer::read(node.cgroup_fs(), path));
            let (observed, throttled) = self.observer.counts();
            self.metrics
                .observation(observed, throttled, started.elapsed().as_secs_f64());
            // Something status should say now (a container newly throttled, the first
            // figures after a change): a whole-node pass writes it.
            if self.observer.news() {
                batch.whole_node();
            }
        }
        if !batch.sample && batch.fired.is_empty() {
            return;
        }
        let relief = &mut self.relief;
        let due = relief.due(&batch.fired);
        let decisions = relief.step(&due, |path| crate::relief::read(node.cgroup_fs(), path));
        if !decisions.is_empty() {
            // The next (whole-node) pass writes the raised or restored memory.high,
            // systemd's record of the unit included.
            applier.set_relief(relief.overrides());
            batch.whole_node();
        }
        let (watched, polled) = relief.watched();
        self.metrics
            .relief_watch(watched, polled, relief.overrides().len());
        self.announcer.relief_events(&decisions).await;
    }

    /// systemd's record of the units the passes wrote (systemd-driver nodes), counted.
    pub async fn hold_in_systemd(&self, writers: &mut Writers) {
        let Some(units) = writers.units.as_mut() else {
            return;
        };
        if let Some(handoff) = writers.applier.take_unit_handoff() {
            let held = units.take_over(&handoff).await;
            self.metrics.unit_updates(&held);
        }
    }

    /// The status goes to the status writer when it changed (its Events first).
    async fn report(
        &self,
        config: &IndexedConfig,
        new: NodeMemoryConfigStatus,
        last: Option<&NodeMemoryConfigStatus>,
        status_out: &StatusWriter,
    ) -> Option<NodeMemoryConfigStatus> {
        let write = status_write(last, &new);
        if write == StatusWrite::Nothing {
            return None;
        }
        self.announcer.status_events(config, &new, last).await;
        status_out.send(
            &config.name,
            config.uid.as_deref(),
            new.clone(),
            write == StatusWrite::Coalesced,
        );
        Some(new)
    }
}

/// Under `enforcement: Kubelet` the kubelet's drop-in; otherwise the drop-in is
/// removed, and once the kubelet runs without it there is nothing to report.
async fn configure_kubelet(
    writers: &mut Writers,
    pass: &Pass<'_>,
    settings: &NodeSettings,
) -> Option<KubeletOutcome> {
    let state = writers.node.state();
    if settings.enforcement == Enforcement::Kubelet {
        let owner = nodemem_model::node::kubelet_dropin::DropInOwner {
            node: &pass.config.name,
            revision: &pass.config.revision,
        };
        let version = pass.input.index.kubelet_version();
        Some(
            writers
                .kubelet
                .configure(settings, version, owner, state)
                .await,
        )
    } else {
        writers
            .kubelet
            .leave(state)
            .await
            .filter(|o| !matches!(o, KubeletOutcome::Configured { .. }))
    }
}

/// What a pass has to tell pods: what it refused them, and each one's class (None: the
/// pass computed nothing).
#[derive(Default)]
struct PodNews {
    refused: Vec<Refusal>,
    classes: Option<Vec<ClassSeen>>,
}

/// Each pod's workload class as this pass computed it.
fn classes_seen(desired: &DesiredNode<'_>) -> Vec<ClassSeen> {
    desired
        .pods
        .iter()
        .map(|p| ClassSeen {
            namespace: p.namespace.to_string(),
            pod: p.name.to_string(),
            uid: p.uid.to_string(),
            class: p.class.map(str::to_string),
            from: p.class_from().as_str(),
        })
        .collect()
}

/// What the pass refused pods: NUMA pinning, a class the policy does not have.
fn refusals(desired: &DesiredNode<'_>) -> Vec<Refusal> {
    let pinning = desired.pods.iter().filter_map(|p| match &p.admission {
        Admission::Rejected(r) => Some(Refusal {
            namespace: p.namespace.to_string(),
            pod: p.name.to_string(),
            uid: p.uid.to_string(),
            event: "NumaPinningRefused",
            reason: r.to_string(),
        }),
        _ => None,
    });
    let classes = desired.warnings.iter().filter_map(|w| match w {
        nodemem_model::Warning::UnknownClass {
            namespace,
            name,
            uid,
            ..
        } => Some(Refusal {
            namespace: namespace.clone(),
            pod: name.clone(),
            uid: uid.clone(),
            event: "UnknownClass",
            reason: w.to_string(),
        }),
        _ => None,
    });
    pinning.chain(classes).collect()
}

fn qos_label(qos: nodemem_model::pod::qos::QosClass) -> &'static str {
    match qos {
        nodemem_model::pod::qos::QosClass::Guaranteed => "guaranteed",
        nodemem_model::pod::qos::QosClass::Burstable => "burstable",
        nodemem_model::pod::qos::QosClass::BestEffort => "besteffort",
    }
}
