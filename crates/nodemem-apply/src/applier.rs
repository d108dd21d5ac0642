//! One node's enforcement, shared by `agent --once` and the in-cluster agent: the engine
//! takes the node the agent discovered ([`crate::node::Node`], lent to each verb) and on
//! every pass computes the node, writes what differs and keeps its records (what nodemem
//! owns, the Memory Manager's state). The agent calls it once a pass and keeps what is
//! asynchronous (watches, systemd's unit record, health, relief).
//!
//! * [`error`]: why a pass did not apply, in a bounded set of categories.
//! * [`recovery`]: a state record that could not be trusted, and what was done instead.
//! * `records`: the records in the state directory and their last saved copies.
//! * `kubelet_view`: the kubelet as last read, and what a pass leaves to it.
//! * [`creation`]: containers created with nodemem's values (NRI) until their cgroup is
//!   found.
//! * [`reach`]: what a pass covers.
//! * the kubelet's conflict is [`crate::kubelet::conflict`], beside its settings.

pub mod creation;
pub mod error;
mod kubelet_view;
pub mod reach;
mod records;
pub mod recovery;

#[cfg(test)]
mod give_back_tests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use nodemem_model::cluster::policy::{Enforcement, MemoryManagerPolicy};
use nodemem_model::node::status::NodeStatusFacts;
use nodemem_model::node::{
    desired_node, DesiredCgroup, DesiredNode, NodeFacts, NodeInput, NodePod,
};
use nodemem_model::numa::MemoryManager;
use nodemem_model::settings::NodeSettings;
use nodemem_model::values::cgroup::{CgroupValue, MEMORY_HIGH};
use nodemem_model::values::memory_qos::NodeMemoryFacts;

use crate::kubelet::conflict::KubeletConflict;
use crate::kubelet::{KubeletSettings, KubeletUnread};
use crate::node::Node;
use crate::units::{held_values, UnitProperty, UnitValue};
use crate::{write_cgroups_within, ApplyOptions, ApplyReport, WriteBackoff};
use creation::{Creations, Overridden};
pub use error::{ApplyError, Category, Unsatisfiable};
use kubelet_view::KubeletView;
pub use reach::Reach;
use records::{ManagerRecord, OwnershipRecord};
pub use recovery::{Recovery, RecoveryAction};

/// Whether a pass writes or only plans (`agent --once --dry-run`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMode {
    /// Plans and writes.
    Write,
    /// Plans only: nothing is written and no record changes.
    DryRun,
}

impl WriteMode {
    /// [`WriteMode::DryRun`] when `dry_run`, else [`WriteMode::Write`].
    pub fn dry_run(dry_run: bool) -> Self {
        if dry_run {
            WriteMode::DryRun
        } else {
            WriteMode::Write
        }
    }
}

/// The engine for one node: it takes the desired state of a pass, plans the writes
/// against what the files hold, applies them and records what nodemem owns (saved in the
/// state directory before each write, so a killed agent gives back everything), and
/// keeps between passes what it wrote and recorded: the records, the kubelet as last
/// read, relief's raised values, writes in backoff, values set at creation, systemd's
/// hand-off. What the node is belongs to [`Node`], which each verb borrows.
pub struct NodeApplier {
    /// What nodemem owns, in memory and as saved.
    ownership: OwnershipRecord,
    /// The Memory Manager as the last pass left it, and as saved.
    manager: ManagerRecord,
    /// The state records this applier could not trust, in the order found.
    recoveries: Vec<Recovery>,
    /// The kubelet as last read, and what the last pass left to it.
    kubelet: KubeletView,
    /// The node facts the last computation used (the Node object's figures and the
    /// kubelet's threshold set on discovery's).
    facts: NodeFacts,
    /// memory.high of containers relief raised (cgroup -> bytes, None: `max`): kept
    /// over the policy's value until relief ends.
    relief: BTreeMap<String, Option<i64>>,
    /// Containers created with nodemem's values (NRI) until their cgroup is found.
    creations: Creations,
    /// Writes the kernel refused, retried with capped exponential backoff from the
    /// applier's start.
    backoff: (WriteBackoff, Instant),
    /// What the passes leave for systemd's record, until [`NodeApplier::take_unit_handoff`].
    unit_handoff: Option<UnitHandoff>,
}

/// What passes leave for systemd's record of the units, for the agent to send: on a
/// systemd-driver node systemd's re-applies write its record of a slice or scope into
/// the cgroup, so nodemem's values must be in that record too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnitHandoff {
    /// The files the passes wrote (cgroup, file) since the last handoff: each may have
    /// been changed through systemd meanwhile, whose record of it is then told again.
    pub rewritten: Vec<(String, String)>,
    /// The values the last pass holds in slices and scopes (set, kept or given back).
    pub held: BTreeMap<String, BTreeMap<UnitProperty, UnitValue>>,
    /// With a whole-node pass, the cgroups on the node (units outside it are forgotten).
    pub live: Option<BTreeSet<String>>,
}

/// What the engine recorded of the node and its kubelet, for the status.
pub struct Recorded<'a> {
    /// The kubelet's settings as last read; None before the first pass.
    pub kubelet: Option<&'a KubeletSettings>,
    /// Why the kubelet's configuration could not be read.
    pub kubelet_unread: Option<&'a KubeletUnread>,
    /// What the last pass left to the kubelet.
    pub conflict: Option<&'a KubeletConflict>,
    /// The memory facts the last computation used (allocatable, eviction threshold,
    /// page size, the kubelet's version).
    pub memory: &'a NodeMemoryFacts,
    /// The state records found untrustworthy and what was done instead.
    pub recoveries: &'a [Recovery],
}

impl NodeApplier {
    /// Loads what nodemem owns from `node`'s state directory.
    pub fn open(node: &Node) -> Result<Self, ApplyError> {
        let mut recoveries = Vec::new();
        let ownership = OwnershipRecord::load(node.state(), &mut recoveries)?;
        Ok(NodeApplier {
            ownership,
            manager: ManagerRecord::default(),
            recoveries,
            kubelet: KubeletView::default(),
            facts: node.facts(),
            relief: BTreeMap::new(),
            creations: Creations::default(),
            backoff: (WriteBackoff::default(), Instant::now()),
            unit_handoff: None,
        })
    }

    /// What the engine recorded: the kubelet as read, what was left to it, the facts
    /// of the last computation, the recoveries.
    pub fn recorded(&self) -> Recorded<'_> {
        Recorded {
            kubelet: self.kubelet.settings.as_ref(),
            kubelet_unread: self.kubelet.unread.as_ref(),
            conflict: self.kubelet.conflict.as_ref(),
            memory: &self.facts.memory,
            recoveries: &self.recoveries,
        }
    }

    /// Records a recovery the caller made of one of its own records.
    pub fn note_recovery(&mut self, recovery: Recovery) {
        tracing::warn!(%recovery, "state record unusable");
        self.recoveries.push(recovery);
    }

    /// The containers whose memory.high relief raises (cgroup -> bytes, None: `max`);
    /// the next pass writes them, and the policy's value again for those left out.
    pub fn set_relief(&mut self, raised: BTreeMap<String, Option<i64>>) {
        self.relief = raised;
    }

    /// Relief's memory.high over the policy's, where memory.high is set at all.
    fn apply_relief(&self, desired: &mut DesiredNode<'_>) {
        if self.relief.is_empty() {
            return;
        }
        for c in desired
            .pods
            .iter_mut()
            .flat_map(|p| p.containers.iter_mut())
        {
            let Some(raised) = c.path.as_ref().and_then(|p| self.relief.get(p)) else {
                continue;
            };
            if c.values.get(MEMORY_HIGH).is_some() {
                c.values.insert(
                    MEMORY_HIGH,
                    match raised {
                        Some(bytes) => CgroupValue::Bytes(*bytes),
                        None => CgroupValue::max(),
                    },
                );
            }
        }
    }

    /// A container is being created with nodemem's values in its spec (NRI): the
    /// runtime writes them while it creates the cgroup, before the container's first
    /// instruction. The reaction still writes them the moment the cgroup appears (under
    /// emulation the runtime takes half a second; both write the same values).
    ///
    /// The files are nodemem's to give back from now on, though no write of its own
    /// changes them, and the claim is saved at once: an agent restarted before the
    /// container starts finds the values already in place, writes nothing and so could
    /// not claim them later (leaving would then keep them).
    pub fn created_by_runtime(
        &mut self,
        node: &Node,
        path: &str,
        files: Vec<&'static str>,
    ) -> Result<(), ApplyError> {
        self.ownership.owned.claim_set_at_creation(path, &files);
        self.creations.created(path, files);
        self.ownership.save(node.state()).map_err(ApplyError::State)
    }

    /// The container started: the runtime has written its values, and the next pass
    /// over the cgroup tells whether someone else changed them since.
    pub fn started_by_runtime(&mut self, path: &str) {
        self.creations.started(path);
    }

    /// Files set at creation that held another value when their cgroup was first found
    /// (and were written back), since the last call.
    pub fn take_overridden(&mut self) -> Vec<Overridden> {
        self.creations.take_overridden()
    }

    /// The agent's pass over `reach` for `settings`: under `enforcement: Agent` the node
    /// computed and written; under Kubelet and Observe what nodemem set is given back
    /// (the kubelet enforces, or nothing is), and the node is computed for the status:
    /// what the kubelet is asked to do, what the agent would write.
    pub fn enforce<'p>(
        &mut self,
        node: &Node,
        settings: &NodeSettings,
        status: &NodeStatusFacts,
        pods: &'p [NodePod],
        reach: Reach<'_>,
    ) -> Result<(DesiredNode<'p>, ApplyReport), ApplyError> {
        if settings.enforcement == Enforcement::Agent {
            return self.write_node(node, settings, status, pods, WriteMode::Write, reach);
        }
        self.give_back_and_predict(node, settings, status, pods, reach)
    }

    /// Computes the node and applies it (or, in [`WriteMode::DryRun`], only plans) over
    /// `reach`: a row of named steps, the node computed once.
    /// Settings the node cannot carry out are refused before anything is written.
    pub fn write_node<'p>(
        &mut self,
        node: &Node,
        settings: &NodeSettings,
        status: &NodeStatusFacts,
        pods: &'p [NodePod],
        mode: WriteMode,
        reach: Reach<'_>,
    ) -> Result<(DesiredNode<'p>, ApplyReport), ApplyError> {
        let manager = self.prepare(node, settings, status, reach)?;
        let desired = self.compute(settings, pods, manager)?;
        let dry_run = mode == WriteMode::DryRun;
        let reached = reach.cgroups(&desired);
        let mut cgroups = desired.cgroups();
        if let Some(own) = node.own_cgroup() {
            cgroups.retain(|c| c.path != own);
        }
        let report = self.plan_and_execute(node, &cgroups, reach, reached.as_deref(), dry_run)?;
        if !dry_run {
            // The cgroups the pass covered, as write_cgroups_within limited them.
            cgroups.retain(|c| reached.as_ref().is_none_or(|s| s.contains(c.path)));
            self.hand_off_units(node, &cgroups, &report, reached.is_none());
        }
        let manager = desired.memory_manager.as_ref();
        self.record(
            node,
            settings,
            manager,
            &report,
            reached.as_deref(),
            dry_run,
        )?;
        Ok((desired, report))
    }

    /// Before computing: the settings fit the node, the kubelet's settings are read
    /// (whole-node passes), the Node's facts taken, the Memory Manager loaded (Static).
    fn prepare(
        &mut self,
        node: &Node,
        settings: &NodeSettings,
        status: &NodeStatusFacts,
        reach: Reach<'_>,
    ) -> Result<Option<MemoryManager>, ApplyError> {
        check_node_can_satisfy(settings, node)?;
        if self.kubelet.settings.is_none() || matches!(reach, Reach::Node) {
            self.kubelet.read(node.kubelet_files());
        }
        self.set_node(status);
        if settings.memory_manager.policy == MemoryManagerPolicy::Static {
            let state = node.state();
            self.manager
                .load(state, &self.facts, settings, &mut self.recoveries)
        } else {
            Ok(None)
        }
    }

    /// The node computation, relief's memory.high over it, and what it leaves to the
    /// kubelet.
    fn compute<'p>(
        &mut self,
        settings: &NodeSettings,
        pods: &'p [NodePod],
        manager: Option<MemoryManager>,
    ) -> Result<DesiredNode<'p>, ApplyError> {
        let mut desired = desired_node(NodeInput {
            settings,
            facts: &self.facts,
            pods,
            memory_manager: manager,
        })
        .map_err(ApplyError::reserved_memory)?;
        self.apply_relief(&mut desired);
        self.kubelet.decide_conflict(&self.facts.memory, settings);
        Ok(desired)
    }

    /// The writes that differ, planned and carried out (or only planned) over the
    /// pass's reach, ownership saved before the first write.
    fn plan_and_execute(
        &mut self,
        node: &Node,
        cgroups: &[DesiredCgroup<'_>],
        reach: Reach<'_>,
        reached: Option<&BTreeSet<String>>,
        dry_run: bool,
    ) -> Result<ApplyReport, ApplyError> {
        let leave_alone = self.kubelet.left_alone();
        self.creations.forget_unstarted();
        let whole = matches!(reach, Reach::Node) && !dry_run;
        if whole && self.ownership.rederive {
            self.ownership.owned.claim_unknown(cgroups, leave_alone);
            self.ownership.rederive = false;
        }
        if whole {
            if let Some(recovery) = self.ownership.check(node.state())? {
                self.note_recovery(recovery);
            }
        }
        // What the pass may write is saved before its first write (an agent killed
        // between the two must still find it in its record to give it back).
        let (backoff, started) = &mut self.backoff;
        let now = started.elapsed();
        let state = node.state();
        let (owned, mut save) = self.ownership.split();
        write_cgroups_within(
            node.cgroup_fs(),
            cgroups,
            owned,
            ApplyOptions {
                dry_run,
                page_size: self.facts.memory.page_size,
                leave_alone,
            },
            Some((backoff, now)),
            reached,
            &mut |owned: &crate::Ownership| save(state, owned),
        )
        .map_err(ApplyError::RecordNotSaved)
    }

    /// What the pass leaves for systemd's record of the units it covered (`whole`: the
    /// whole node, whose cgroups are then all that is live).
    fn hand_off_units(
        &mut self,
        node: &Node,
        covered: &[DesiredCgroup<'_>],
        report: &ApplyReport,
        whole: bool,
    ) {
        if !node.holds_units() {
            return;
        }
        let handoff = self.unit_handoff.get_or_insert_with(UnitHandoff::default);
        handoff.rewritten.extend(
            report
                .applied
                .iter()
                .map(|w| (w.cgroup.clone(), w.file.clone())),
        );
        let not_applied = report
            .failed
            .iter()
            .map(|f| &f.write)
            .chain(&report.vanished)
            .map(|w| (w.cgroup.as_str(), w.file.as_str()))
            .chain(
                report
                    .deferred
                    .iter()
                    .map(|d| (d.cgroup.as_str(), d.file.as_str())),
            );
        handoff.held = held_values(covered, &self.ownership.owned, &report.applied, not_applied);
        handoff.live = whole.then(|| covered.iter().map(|c| c.path.to_string()).collect());
    }

    /// After the writes: the Memory Manager kept for the next pass, the overrides of
    /// values set at creation found, and the records that changed saved (each save is
    /// an fsync).
    fn record(
        &mut self,
        node: &Node,
        settings: &NodeSettings,
        manager: Option<&MemoryManager>,
        report: &ApplyReport,
        reached: Option<&BTreeSet<String>>,
        dry_run: bool,
    ) -> Result<(), ApplyError> {
        self.manager.keep(settings, manager);
        if dry_run {
            return Ok(());
        }
        self.creations.found(report, reached);
        let static_policy = settings.memory_manager.policy == MemoryManagerPolicy::Static;
        let state = node.state();
        self.ownership.save(state).map_err(ApplyError::State)?;
        self.manager
            .save(state, manager, static_policy)
            .map_err(ApplyError::State)
    }

    /// Under Kubelet and Observe: what nodemem set is given back over `reach`, and the
    /// node computed once, for `settings`, for the status. The give-back needs no
    /// computation of its own: the settings that give back ([`off`]) manage no cgroup,
    /// and a pass reaches the same cgroups whatever the settings (both tested in
    /// `applier/give_back_tests.rs`); its steps are [`NodeApplier::write_node`]'s with no
    /// cgroup to set.
    fn give_back_and_predict<'p>(
        &mut self,
        node: &Node,
        settings: &NodeSettings,
        status: &NodeStatusFacts,
        pods: &'p [NodePod],
        reach: Reach<'_>,
    ) -> Result<(DesiredNode<'p>, ApplyReport), ApplyError> {
        let off = off();
        self.prepare(node, &off, status, reach)?;
        let predicted = match self.predict(settings, pods) {
            Ok(predicted) => predicted,
            Err(e) => {
                // Settings the node cannot compute (a reservedMemory that does not fit)
                // do not hold the give-back back: it is computed for `off` alone.
                self.write_node(node, &off, status, pods, WriteMode::Write, reach)?;
                return Err(e);
            }
        };
        self.kubelet.decide_conflict(&self.facts.memory, &off);
        let reached = reach.cgroups(&predicted);
        let report = self.plan_and_execute(node, &[], reach, reached.as_deref(), false)?;
        self.hand_off_units(node, &[], &report, reached.is_none());
        self.record(node, &off, None, &report, reached.as_deref(), false)?;
        Ok((predicted, report))
    }

    /// What the passes since the last call leave for systemd's record of the units;
    /// None when nodemem does not hold values in units or no pass wrote since.
    pub fn take_unit_handoff(&mut self) -> Option<UnitHandoff> {
        self.unit_handoff.take()
    }

    /// What the node computation says for `settings` with the facts just set, without
    /// applying anything: under `enforcement: Kubelet` the kubelet applies it, and
    /// status still reports the totals and pods it covers.
    fn predict<'p>(
        &self,
        settings: &NodeSettings,
        pods: &'p [NodePod],
    ) -> Result<DesiredNode<'p>, ApplyError> {
        desired_node(NodeInput {
            settings,
            facts: &self.facts,
            pods,
            memory_manager: None,
        })
        .map_err(ApplyError::reserved_memory)
    }

    /// The Node's memory figures and kubelet version (which decides the rules), and
    /// the kubelet's hard eviction threshold from its configuration as last read (its
    /// default when the file is not there; a percentage of capacity), which the
    /// kubelet's memory.high ceiling adds back (`NodeMemoryFacts::kubelet_allocatable`).
    fn set_node(&mut self, status: &NodeStatusFacts) {
        let hard_eviction = self.kubelet.hard_eviction_memory(status.capacity_memory);
        let memory = &mut self.facts.memory;
        memory.allocatable_memory = status.allocatable_memory;
        memory.capacity_memory = status.capacity_memory;
        memory.kubelet_version = status.kubelet_version();
        memory.kubelet_float = status.kubelet_float();
        memory.hard_eviction_memory = hard_eviction;
    }
}

/// Settings that give back everything nodemem set.
pub fn off() -> NodeSettings {
    NodeSettings {
        memory_qos: nodemem_model::values::memory_qos::MemoryQosSettings {
            enabled: false,
            ..Default::default()
        },
        ..NodeSettings::default()
    }
}

/// Settings this node cannot carry out.
fn check_node_can_satisfy(settings: &NodeSettings, node: &Node) -> Result<(), ApplyError> {
    let d = node.discovery();
    let mut problems = Vec::new();
    if settings.memory_qos.enabled && !d.has_controller("memory") {
        problems.push(Unsatisfiable::NoMemoryController);
    }
    if settings.memory_manager.policy == MemoryManagerPolicy::Static {
        if !d.has_controller("cpuset") {
            problems.push(Unsatisfiable::StaticWithoutCpuset);
        }
        if d.topology.is_none() {
            problems.push(Unsatisfiable::StaticWithoutNuma);
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ApplyError::Unsatisfiable(problems))
    }
}
