//! One node's enforcement, shared by `agent --once` and the in-cluster agent:
//! discovery once, then on every pass the node computation, the writes and the state
//! directory (what nodemem owns, the Memory Manager's state). The agent calls it once a
//! pass and keeps what is asynchronous (watches, systemd's unit record, health, relief).
//!
//! * [`error`]: why a pass did not apply, in a bounded set of categories.
//! * [`recovery`]: a state record that could not be trusted, and what was done instead.
//! * [`creation`]: containers created with nodemem's values (NRI) until their cgroup is
//!   found.
//! * [`reach`]: what a pass covers.
//! * the kubelet's conflict is [`crate::kubelet::conflict`], beside its settings.

pub mod creation;
pub mod error;
pub mod reach;
pub mod recovery;

#[cfg(test)]
mod give_back_tests;

use std::collections::{BTreeMap, BTreeSet};

use nodemem_cgroup::discover::{discover, Discovery};
use nodemem_cgroup::{CgroupFs, Roots};
use nodemem_model::cluster::policy::{Enforcement, MemoryManagerPolicy};

use nodemem_model::node::status::NodeStatusFacts;
use nodemem_model::node::{desired_node, DesiredNode, NodeFacts, NodeInput, NodePod};
use nodemem_model::numa::{MachineState, MemoryManager, Scope};
use nodemem_model::settings::NodeSettings;
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_model::values::memory_qos::NodeMemoryFacts;

use crate::kubelet::conflict::{kubelet_conflict, KubeletConflict};
use crate::kubelet::{KubeletFiles, KubeletSettings, KubeletUnread, OwnDropIn};
use crate::numa_state;
use crate::state::{StateDir, StateError};
use crate::units::{held_values, UnitProperty, UnitValue};
use crate::{apply_within, ApplyOptions, ApplyReport, Ownership};
use creation::{Creations, Overridden};
pub use error::{ApplyError, Category, Unsatisfiable};
pub use reach::Reach;
use recovery::unix_seconds;
pub use recovery::{Recovery, RecoveryAction};

const OWNERSHIP_FILE: &str = "ownership.json";
const OWNERSHIP_KIND: &str = "ownership";

/// Whether a pass writes or only plans (`agent --once --dry-run`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMode {
    Write,
    DryRun,
}

impl WriteMode {
    pub fn dry_run(dry_run: bool) -> Self {
        if dry_run {
            WriteMode::DryRun
        } else {
            WriteMode::Write
        }
    }
}

/// Where the applier runs and keeps its state.
#[derive(Clone, Debug)]
pub struct ApplierConfig {
    pub roots: Roots,
    pub cgroup_driver: Option<CgroupDriver>,
    pub state_dir: std::path::PathBuf,
    pub topology_scope: Scope,
    /// The kubelet's configuration file (read-only host mount) and drop-in directory.
    pub kubelet: KubeletFiles,
    /// The agent's own view of cgroup2 (`/sys/fs/cgroup` in its container): the cgroup
    /// it shows is the agent's own, which the kernel does not let it write
    /// (`nodemem_cgroup::own`).
    pub own_cgroup_mount: std::path::PathBuf,
    /// Whether the values are set as unit properties too on a systemd-driver node (the
    /// agent reaches systemd's bus): each pass then leaves a [`UnitHandoff`].
    pub systemd_units: bool,
}

/// The engine for one node: it takes the desired state of a pass, plans the writes
/// against what the files hold, applies them and records what nodemem owns (saved in the
/// state directory before each write, so a killed agent gives back everything), and
/// holds what it learned of the node between passes (discovery, the kubelet's settings,
/// the Memory Manager's record, relief's raised values, writes in backoff).
pub struct NodeApplier {
    /// The agent's own container cgroup (relative), never written.
    own_cgroup: Option<String>,
    kubelet_files: KubeletFiles,
    /// The kubelet's settings, read on whole-node passes only (not on reactions);
    /// what is assumed when they cannot be read.
    kubelet: Option<KubeletSettings>,
    /// Why the kubelet's settings could not be read (condition reason, message).
    kubelet_unread: Option<KubeletUnread>,
    /// What the last pass left to the kubelet.
    conflict: Option<KubeletConflict>,
    /// memory.high of containers relief raised (cgroup -> bytes, None: `max`): kept
    /// over the policy's value until relief ends.
    relief: std::collections::BTreeMap<String, Option<i64>>,
    /// The node facts discovery gave (allocatable memory is set per pass).
    facts: NodeFacts,
    /// The Memory Manager as the last pass left it, and the reservedMemory it was built
    /// for: the state file is read once, then kept in memory.
    manager: Option<(
        Vec<nodemem_model::cluster::policy::ReservedMemory>,
        MemoryManager,
    )>,
    /// What the state directory holds, so a pass that changed nothing writes nothing.
    saved_owned: Ownership,
    saved_manager: Option<MemoryManager>,
    /// Writes the kernel refused, retried with capped exponential backoff.
    backoff: crate::WriteBackoff,
    started: std::time::Instant,
    fs: CgroupFs,
    discovery: Discovery,
    state: StateDir,
    owned: Ownership,
    /// Whether passes leave values for systemd's record of the units (a systemd-driver
    /// node whose systemd the agent reaches).
    holds_units: bool,
    /// What the passes leave for systemd's record, until [`NodeApplier::take_unit_handoff`].
    unit_handoff: Option<UnitHandoff>,
    /// The state records this applier could not trust, in the order found.
    recoveries: Vec<Recovery>,
    /// The record of what nodemem owns was lost at start: the first whole-node pass
    /// claims what the settings manage.
    rederive_ownership: bool,
    /// Containers created with nodemem's values (NRI) until their cgroup is found.
    creations: Creations,
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

impl NodeApplier {
    /// Discovers the node and loads what nodemem owns from the state directory.
    pub fn open(config: &ApplierConfig) -> Result<Self, ApplyError> {
        nodemem_cgroup::fs::raise_open_file_limit();
        let discovery =
            discover(&config.roots, config.cgroup_driver).map_err(ApplyError::Discovery)?;
        let state = StateDir::open(&config.state_dir).map_err(ApplyError::State)?;
        let state_error = ApplyError::State;
        // An unusable record stops nothing: it is set aside and re-derived (the agent
        // must not keep a node unenforced over a torn file). An I/O error does.
        let mut recoveries = Vec::new();
        let owned: Ownership = match state.load(OWNERSHIP_FILE, OWNERSHIP_KIND) {
            Ok(owned) => owned.unwrap_or_default(),
            Err(e) if e.is_unusable() => {
                let set_aside = state
                    .set_aside(OWNERSHIP_FILE, unix_seconds())
                    .map_err(state_error)?;
                let recovery = Recovery {
                    record: state.path(OWNERSHIP_FILE).display().to_string(),
                    problem: e.to_string(),
                    action: RecoveryAction::OwnershipRederived {
                        set_aside: set_aside.display().to_string(),
                    },
                };
                tracing::warn!(%recovery, "state record unusable");
                recoveries.push(recovery);
                Ownership::default()
            }
            Err(e) => return Err(state_error(e)),
        };
        let facts = NodeFacts {
            memory: NodeMemoryFacts {
                page_size: discovery.page_size,
                kernel_version: Some(discovery.kernel_version.clone()),
                ..NodeMemoryFacts::default()
            },
            cgroup_driver: discovery.cgroup_driver,
            topology: discovery.topology.clone(),
            topology_scope: config.topology_scope,
        };
        // The agent's own container: left to its runtime (the kernel refuses the writes).
        let own_cgroup =
            nodemem_cgroup::own::cgroup_shown_at(&config.roots.cgroup, &config.own_cgroup_mount)
                .filter(|c| !c.is_empty());
        if let Some(own) = &own_cgroup {
            tracing::info!(cgroup = %own, "the agent's own container cgroup is left to its runtime: the kernel refuses writes to a cgroup namespace's root from inside it");
        }
        let holds_units = config.systemd_units && discovery.cgroup_driver == CgroupDriver::Systemd;
        Ok(NodeApplier {
            holds_units,
            unit_handoff: None,
            own_cgroup,
            kubelet_files: config.kubelet.clone(),
            kubelet: None,
            kubelet_unread: None,
            conflict: None,
            relief: Default::default(),
            facts,
            manager: None,
            saved_owned: owned.clone(),
            saved_manager: None,
            backoff: crate::WriteBackoff::default(),
            started: std::time::Instant::now(),
            fs: CgroupFs::new(&config.roots.cgroup),
            discovery,
            state,
            owned,
            rederive_ownership: !recoveries.is_empty(),
            recoveries,
            creations: Creations::default(),
        })
    }

    /// The state records this applier could not trust and what it did instead.
    pub fn recoveries(&self) -> &[Recovery] {
        &self.recoveries
    }

    /// Records a recovery the caller made of one of its own records.
    pub fn note_recovery(&mut self, recovery: Recovery) {
        tracing::warn!(%recovery, "state record unusable");
        self.recoveries.push(recovery);
    }

    /// On a whole-node pass: the record of what nodemem owns still holds what the
    /// agent last wrote; if it was damaged or removed while the agent ran, it is
    /// written again from memory.
    fn check_ownership_record(&mut self) -> Result<(), ApplyError> {
        let problem = match self.state.load::<Ownership>(OWNERSHIP_FILE, OWNERSHIP_KIND) {
            Ok(Some(o)) if o == self.saved_owned => return Ok(()),
            Ok(None) if self.saved_owned.is_empty() => return Ok(()),
            Ok(Some(_)) => "does not hold what the agent last wrote".to_string(),
            Ok(None) => "was removed".to_string(),
            Err(e) if e.is_unusable() => e.to_string(),
            Err(e) => return Err(ApplyError::State(e)),
        };
        self.state
            .save(OWNERSHIP_FILE, OWNERSHIP_KIND, &self.saved_owned)
            .map_err(ApplyError::State)?;
        let record = self.state.path(OWNERSHIP_FILE).display().to_string();
        let problem = if problem.starts_with(&record) {
            problem
        } else {
            format!("{record}: {problem}")
        };
        self.note_recovery(Recovery {
            record,
            problem,
            action: RecoveryAction::Rewritten,
        });
        Ok(())
    }

    pub fn discovery(&self) -> &Discovery {
        &self.discovery
    }

    /// The containers whose memory.high relief raises (cgroup -> bytes, None: `max`);
    /// the next pass writes them, and the policy's value again for those left out.
    pub fn set_relief(&mut self, raised: std::collections::BTreeMap<String, Option<i64>>) {
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
            if c.values
                .get(nodemem_model::values::cgroup::MEMORY_HIGH)
                .is_some()
            {
                c.values.insert(
                    nodemem_model::values::cgroup::MEMORY_HIGH,
                    match raised {
                        Some(bytes) => nodemem_model::values::cgroup::CgroupValue::Bytes(*bytes),
                        None => nodemem_model::values::cgroup::CgroupValue::max(),
                    },
                );
            }
        }
    }

    /// The cgroup tree, for reads beside the passes (the observation's samples).
    /// The agent's own container cgroup (relative), which nodemem never writes.
    pub fn own_cgroup(&self) -> Option<&str> {
        self.own_cgroup.as_deref()
    }

    pub fn cgroup_fs(&self) -> &CgroupFs {
        &self.fs
    }

    /// The memory facts the last computation used (allocatable, eviction threshold,
    /// page size).
    pub fn memory_facts(&self) -> &NodeMemoryFacts {
        &self.facts.memory
    }

    /// Reads the kubelet's configuration. When it cannot be read, the last reading
    /// stays (or, with none, a configuration that names nothing is assumed) and the
    /// `KubeletConfigRead` condition says why (enforcement: Kubelet refuses on its own
    /// read).
    fn read_kubelet(&mut self) {
        match self.kubelet_files.read(OwnDropIn::OnDisk) {
            Ok(k) => {
                if self.kubelet_unread.take().is_some() {
                    tracing::info!(from = ?k.origin.sources(), "read the kubelet's configuration");
                }
                self.kubelet = Some(k);
            }
            Err(e) => {
                let message = e.to_string();
                if self
                    .kubelet_unread
                    .as_ref()
                    .is_none_or(|u| u.message != message)
                {
                    tracing::warn!(error = %message, "the kubelet's configuration cannot be read");
                }
                let kept_last = match &self.kubelet_unread {
                    Some(u) => u.kept_last,
                    None => self.kubelet.is_some(),
                };
                if self.kubelet.is_none() {
                    self.kubelet = Some(KubeletSettings::default());
                }
                self.kubelet_unread = Some(KubeletUnread {
                    reason: e.reason(),
                    message,
                    kept_last,
                });
            }
        }
    }

    /// The kubelet as last read, for the status: where from, and why not when it could
    /// not be.
    pub fn kubelet_read(&self) -> (Option<&KubeletSettings>, Option<&KubeletUnread>) {
        (self.kubelet.as_ref(), self.kubelet_unread.as_ref())
    }

    /// What the last pass left to the kubelet, if anything.
    pub fn conflict(&self) -> Option<&KubeletConflict> {
        self.conflict.as_ref()
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
        path: &str,
        files: Vec<&'static str>,
    ) -> Result<(), ApplyError> {
        self.owned.claim_set_at_creation(path, &files);
        self.creations.created(path, files);
        self.save_ownership()
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

    /// The state directory, for the agent's other records (the last known config).
    pub fn state(&self) -> &StateDir {
        &self.state
    }

    /// Computes the node and applies it (or, in [`WriteMode::DryRun`], only plans) over
    /// `reach`: a row of named steps, the node computed once.
    /// Settings the node cannot carry out are refused before anything is written.
    pub fn write_node<'p>(
        &mut self,
        settings: &NodeSettings,
        node: &NodeStatusFacts,
        pods: &'p [NodePod],
        mode: WriteMode,
        reach: Reach<'_>,
    ) -> Result<(DesiredNode<'p>, ApplyReport), ApplyError> {
        let manager = self.prepare(settings, node, reach)?;
        let desired = self.compute(settings, pods, manager)?;
        let dry_run = mode == WriteMode::DryRun;
        let reached = reach.cgroups(&desired);
        let mut cgroups = desired.cgroups();
        if let Some(own) = &self.own_cgroup {
            cgroups.retain(|c| c.path != own);
        }
        let report = self.plan_and_execute(&cgroups, reach, reached.as_deref(), dry_run)?;
        if !dry_run {
            // The cgroups the pass covered, as apply_within limited them.
            cgroups.retain(|c| reached.as_ref().is_none_or(|s| s.contains(c.path)));
            self.hand_off_units(&cgroups, &report, reached.is_none());
        }
        let manager = desired.memory_manager.as_ref();
        self.record(settings, manager, &report, reached.as_deref(), dry_run)?;
        Ok((desired, report))
    }

    /// Before computing: the settings fit the node, the kubelet's settings are read
    /// (whole-node passes), the Node's facts taken, the Memory Manager loaded (Static).
    fn prepare(
        &mut self,
        settings: &NodeSettings,
        node: &NodeStatusFacts,
        reach: Reach<'_>,
    ) -> Result<Option<MemoryManager>, ApplyError> {
        check_node_can_satisfy(settings, &self.discovery)?;
        if self.kubelet.is_none() || matches!(reach, Reach::Node) {
            self.read_kubelet();
        }
        self.set_node(node);
        if settings.memory_manager.policy == MemoryManagerPolicy::Static {
            self.memory_manager(settings)
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
        self.conflict = self
            .kubelet
            .as_ref()
            .and_then(|k| kubelet_conflict(k, self.facts.memory.kubelet_version, settings));
        Ok(desired)
    }

    /// The writes that differ, planned and carried out (or only planned) over the
    /// pass's reach, ownership saved before the first write.
    fn plan_and_execute(
        &mut self,
        cgroups: &[nodemem_model::node::DesiredCgroup<'_>],
        reach: Reach<'_>,
        reached: Option<&BTreeSet<String>>,
        dry_run: bool,
    ) -> Result<ApplyReport, ApplyError> {
        let leave_alone: &'static [&'static str] = self.conflict.as_ref().map_or(&[], |c| c.files);
        self.creations.forget_unstarted();
        let now = self.started.elapsed();
        if self.rederive_ownership && matches!(reach, Reach::Node) && !dry_run {
            self.owned.claim_unknown(cgroups, leave_alone);
            self.rederive_ownership = false;
        }
        if matches!(reach, Reach::Node) && !dry_run {
            self.check_ownership_record()?;
        }
        // What the pass may write is saved before its first write (an agent killed
        // between the two must still find it in its record to give it back).
        let (state, saved_owned) = (&self.state, &mut self.saved_owned);
        apply_within(
            &self.fs,
            cgroups,
            &mut self.owned,
            ApplyOptions {
                dry_run,
                page_size: self.facts.memory.page_size,
                leave_alone,
            },
            Some((&mut self.backoff, now)),
            reached,
            &mut |owned: &Ownership| save_record(state, saved_owned, owned),
        )
        .map_err(ApplyError::RecordNotSaved)
    }

    /// What the pass leaves for systemd's record of the units it covered (`whole`: the
    /// whole node, whose cgroups are then all that is live).
    fn hand_off_units(
        &mut self,
        covered: &[nodemem_model::node::DesiredCgroup<'_>],
        report: &ApplyReport,
        whole: bool,
    ) {
        if !self.holds_units {
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
        handoff.held = held_values(covered, &self.owned, &report.applied, not_applied);
        handoff.live = whole.then(|| covered.iter().map(|c| c.path.to_string()).collect());
    }

    /// After the writes: the Memory Manager kept for the next pass, the overrides of
    /// values set at creation found, and the records that changed saved.
    fn record(
        &mut self,
        settings: &NodeSettings,
        manager: Option<&MemoryManager>,
        report: &ApplyReport,
        reached: Option<&BTreeSet<String>>,
        dry_run: bool,
    ) -> Result<(), ApplyError> {
        self.manager = manager
            .cloned()
            .map(|m| (settings.memory_manager.reserved_memory.clone(), m));
        if dry_run {
            return Ok(());
        }
        self.creations.found(report, reached);
        let static_policy = settings.memory_manager.policy == MemoryManagerPolicy::Static;
        self.save_state(manager, static_policy)
    }

    /// The agent's pass over `reach` for `settings`: under `enforcement: Agent` the node
    /// computed and written; under Kubelet and Observe what nodemem set is given back
    /// (the kubelet enforces, or nothing is), and the node is computed for the status:
    /// what the kubelet is asked to do, what the agent would write.
    pub fn enforce<'p>(
        &mut self,
        settings: &NodeSettings,
        node: &NodeStatusFacts,
        pods: &'p [NodePod],
        reach: Reach<'_>,
    ) -> Result<(DesiredNode<'p>, ApplyReport), ApplyError> {
        if settings.enforcement == Enforcement::Agent {
            return self.write_node(settings, node, pods, WriteMode::Write, reach);
        }
        self.give_back_and_predict(settings, node, pods, reach)
    }

    /// Under Kubelet and Observe: what nodemem set is given back over `reach`, and the
    /// node computed once, for `settings`, for the status. The give-back needs no
    /// computation of its own: the settings that give back ([`off`]) manage no cgroup,
    /// and a pass reaches the same cgroups whatever the settings (both tested in
    /// `applier/give_back_tests.rs`); its steps are [`NodeApplier::write_node`]'s with no cgroup to set.
    fn give_back_and_predict<'p>(
        &mut self,
        settings: &NodeSettings,
        node: &NodeStatusFacts,
        pods: &'p [NodePod],
        reach: Reach<'_>,
    ) -> Result<(DesiredNode<'p>, ApplyReport), ApplyError> {
        let off = off();
        self.prepare(&off, node, reach)?;
        let predicted = match self.predict(settings, node, pods) {
            Ok(predicted) => predicted,
            Err(e) => {
                // Settings the node cannot compute (a reservedMemory that does not fit)
                // do not hold the give-back back: it is computed for `off` alone.
                self.write_node(&off, node, pods, WriteMode::Write, reach)?;
                return Err(e);
            }
        };
        self.conflict = self
            .kubelet
            .as_ref()
            .and_then(|k| kubelet_conflict(k, self.facts.memory.kubelet_version, &off));
        let reached = reach.cgroups(&predicted);
        let report = self.plan_and_execute(&[], reach, reached.as_deref(), false)?;
        self.hand_off_units(&[], &report, reached.is_none());
        self.record(&off, None, &report, reached.as_deref(), false)?;
        Ok((predicted, report))
    }

    /// Whether passes leave values for systemd's record of the units.
    pub fn holds_units(&self) -> bool {
        self.holds_units
    }

    /// What the passes since the last call leave for systemd's record of the units;
    /// None when nodemem does not hold values in units or no pass wrote since.
    pub fn take_unit_handoff(&mut self) -> Option<UnitHandoff> {
        self.unit_handoff.take()
    }

    /// What the node computation says for `settings`, without applying anything: under
    /// `enforcement: Kubelet` the kubelet applies it, and status still reports the
    /// totals and pods it covers.
    fn predict<'p>(
        &mut self,
        settings: &NodeSettings,
        node: &NodeStatusFacts,
        pods: &'p [NodePod],
    ) -> Result<DesiredNode<'p>, ApplyError> {
        self.set_node(node);
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
    fn set_node(&mut self, node: &NodeStatusFacts) {
        let memory = &mut self.facts.memory;
        memory.allocatable_memory = node.allocatable_memory;
        memory.capacity_memory = node.capacity_memory;
        memory.kubelet_version = node.kubelet_version();
        memory.kubelet_float = node.kubelet_float();
        memory.hard_eviction_memory = match &self.kubelet {
            Some(k) => k.hard_eviction_memory(node.capacity_memory),
            None => KubeletSettings::default().hard_eviction_memory(node.capacity_memory),
        };
    }

    /// Writes the records that changed (each write is an fsync).
    fn save_state(
        &mut self,
        manager: Option<&MemoryManager>,
        static_policy: bool,
    ) -> Result<(), ApplyError> {
        let err = ApplyError::State;
        self.save_ownership()?;
        if manager != self.saved_manager.as_ref() {
            match (manager, static_policy) {
                (Some(manager), _) => numa_state::save(&self.state, manager).map_err(err)?,
                (None, false) => numa_state::clear(&self.state).map_err(err)?,
                (None, true) => {}
            }
            self.saved_manager = manager.cloned();
        }
        Ok(())
    }

    /// Saves the record of what nodemem owns when it changed.
    fn save_ownership(&mut self) -> Result<(), ApplyError> {
        save_record(&self.state, &mut self.saved_owned, &self.owned).map_err(ApplyError::State)
    }

    /// The Memory Manager to compute with: the one the last pass left when the
    /// reservedMemory is the same, otherwise the saved state, checked against this
    /// node's topology and the settings' reservedMemory (a mismatch stops the pass:
    /// nothing is written).
    fn memory_manager(
        &mut self,
        settings: &NodeSettings,
    ) -> Result<Option<MemoryManager>, ApplyError> {
        let reserved = &settings.memory_manager.reserved_memory;
        if let Some((for_reserved, m)) = &self.manager {
            if for_reserved == reserved {
                return Ok(Some(m.clone()));
            }
        }
        let facts = &self.facts;
        let Some(topology) = &facts.topology else {
            return Ok(None);
        };
        // A reservedMemory that does not fit is reported by the node computation.
        let Ok(fresh) = MachineState::new(topology, &settings.memory_manager.reserved_memory)
        else {
            return Ok(None);
        };
        let loaded = match numa_state::load(&self.state, &fresh, facts.topology_scope) {
            Ok(loaded) => loaded,
            Err(numa_state::NumaStateError::State(e)) if e.is_unusable() => {
                let file = numa_state::NUMA_STATE_FILE;
                let set_aside = self
                    .state
                    .set_aside(file, unix_seconds())
                    .map_err(ApplyError::State)?;
                let record = self.state.path(file).display().to_string();
                self.note_recovery(Recovery {
                    record,
                    problem: e.to_string(),
                    action: RecoveryAction::MemoryManagerRederived {
                        set_aside: set_aside.display().to_string(),
                    },
                });
                None
            }
            Err(e) => return Err(ApplyError::MemoryManagerState(e)),
        };
        self.saved_manager = loaded.clone();
        Ok(loaded)
    }
}

/// Saves `owned` as the ownership record when it differs from `saved`, the record on
/// disk (each save is an fsync).
fn save_record(
    state: &StateDir,
    saved: &mut Ownership,
    owned: &Ownership,
) -> Result<(), StateError> {
    if owned != saved {
        state.save(OWNERSHIP_FILE, OWNERSHIP_KIND, owned)?;
        *saved = owned.clone();
    }
    Ok(())
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
fn check_node_can_satisfy(settings: &NodeSettings, d: &Discovery) -> Result<(), ApplyError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A node of `driver` in a temporary directory: its cgroup tree (kubepods and its
    /// QoS cgroups), the kernel's release, a kubelet configuration naming nothing, and
    /// the applier's configuration for it.
    fn temp_node(
        driver: CgroupDriver,
        systemd_units: bool,
    ) -> (
        tempfile::TempDir,
        nodemem_testkit::cgroup_tree::CgroupTree,
        ApplierConfig,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cgroup");
        std::fs::create_dir(&root).unwrap();
        let tree = nodemem_testkit::cgroup_tree::CgroupTree::at(&root, driver, 1).unwrap();
        let write = |path: std::path::PathBuf, text: &str| {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write(dir.path().join("proc/sys/kernel/osrelease"), "6.1.0\n");
        write(
            dir.path().join("kubelet/config.yaml"),
            "kind: KubeletConfiguration\n",
        );
        let config = ApplierConfig {
            roots: Roots {
                cgroup: root,
                sys: dir.path().join("sys"),
                proc: dir.path().join("proc"),
            },
            cgroup_driver: Some(driver),
            state_dir: dir.path().join("state"),
            topology_scope: Scope::Container,
            kubelet: KubeletFiles::given(dir.path().join("kubelet/config.yaml"), None),
            own_cgroup_mount: dir.path().join("own"),
            systemd_units,
        };
        (dir, tree, config)
    }

    /// Pod `web` (uid-web) of one container `app` started as `id`: request 64Mi, limit
    /// 256Mi (memory.high 160Mi at factor 0.5).
    fn burstable_web(id: &str) -> NodePod {
        use nodemem_model::pod::{Container, ContainerKind, Pod, PodSpec, Resources, MEMORY};
        use nodemem_model::quantity::Quantity;
        use nodemem_model::values::cgroup_layout::{ContainerId, ContainerRuntime};
        let memory = |q: &str| [(MEMORY.to_string(), Quantity::parse(q).unwrap())].into();
        let app = Container {
            name: "app".into(),
            kind: ContainerKind::App,
            resources: Resources {
                requests: memory("64Mi"),
                limits: memory("256Mi"),
            },
        };
        let pod = Pod {
            namespace: "shop".into(),
            name: "web".into(),
            uid: "uid-web".into(),
            spec: PodSpec {
                containers: vec![app],
                ..PodSpec::default()
            },
        };
        let id = ContainerId {
            runtime: ContainerRuntime::Containerd,
            id: id.into(),
        };
        NodePod::new(pod, [("app".to_string(), id)].into(), false)
    }

    /// A temporary node (`temp_node`) running pod `web` (`burstable_web`).
    fn node_with_web(
        driver: CgroupDriver,
        systemd_units: bool,
    ) -> (tempfile::TempDir, ApplierConfig, [NodePod; 1]) {
        use nodemem_model::pod::qos::QosClass;
        let (dir, tree, config) = temp_node(driver, systemd_units);
        let id = "c1".repeat(32);
        tree.add_pod(QosClass::Burstable, "uid-web", std::slice::from_ref(&id))
            .unwrap();
        (dir, config, [burstable_web(&id)])
    }

    /// Factor 0.5, TieredReservation.
    fn at_half() -> NodeSettings {
        let reservation = nodemem_model::values::memory_qos::ReservationPolicy::TieredReservation;
        use nodemem_model::values::factor::ThrottlingFactor;
        NodeSettings {
            memory_qos: nodemem_model::values::memory_qos::MemoryQosSettings {
                enabled: true,
                throttling_factor: Some(ThrottlingFactor::from_f64(0.5).unwrap()),
                reservation_policy: reservation,
            },
            ..NodeSettings::default()
        }
    }

    fn node_of_8gi() -> NodeStatusFacts {
        NodeStatusFacts {
            allocatable_memory: Some(8 << 30),
            capacity_memory: None,
            kubelet_version: None,
            architecture: None,
        }
    }

    /// An agent killed after answering CreateContainer and before the container
    /// started: the restarted agent finds the runtime's value equal to its own and
    /// writes nothing, yet leaving the policy gives the value back.
    #[test]
    fn values_set_at_creation_are_given_back_after_a_restart_before_the_start() {
        use nodemem_model::pod::qos::QosClass;
        use nodemem_model::values::cgroup_layout::{container_dir, ContainerId, ContainerRuntime};
        let driver = CgroupDriver::Cgroupfs;
        let (_dir, tree, config) = temp_node(driver, false);
        tree.add_pod(QosClass::Burstable, "uid-a", &[]).unwrap();
        let id = ContainerId {
            runtime: ContainerRuntime::Containerd,
            id: "c1".repeat(32),
        };
        let container = container_dir(driver, QosClass::Burstable, "uid-a", &id);

        let mut applier = NodeApplier::open(&config).unwrap();
        applier
            .created_by_runtime(&container, vec!["memory.high"])
            .unwrap();
        drop(applier);
        // runc creates the cgroup with the value from the container's spec.
        let cgroup = tree.create_cgroup(&container).unwrap();
        std::fs::write(cgroup.join("memory.high"), "167772160").unwrap();

        let mut applier = NodeApplier::open(&config).unwrap();
        let (_, report) = applier
            .write_node(&off(), &node_of_8gi(), &[], WriteMode::Write, Reach::Node)
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(cgroup.join("memory.high")).unwrap(),
            "max",
            "{report:?}"
        );
    }

    /// On a systemd-driver node whose systemd the agent reaches, a pass leaves the files
    /// it wrote and the values it holds in slices and scopes for systemd's record, once;
    /// a dry run leaves nothing, and neither does a node without systemd's units.
    #[test]
    fn a_pass_leaves_its_unit_values_for_systemd_once() {
        let (_dir, config, pods) = node_with_web(CgroupDriver::Systemd, true);
        let settings = at_half();
        let mut applier = NodeApplier::open(&config).unwrap();
        assert!(applier.holds_units());
        let (desired, report) = applier
            .write_node(
                &settings,
                &node_of_8gi(),
                &pods,
                WriteMode::DryRun,
                Reach::Node,
            )
            .unwrap();
        assert!(
            report.applied.is_empty() && !report.planned.is_empty(),
            "{report:?}"
        );
        assert_eq!(applier.take_unit_handoff(), None, "a dry run wrote nothing");

        let (_, report) = applier
            .write_node(
                &settings,
                &node_of_8gi(),
                &pods,
                WriteMode::Write,
                Reach::Node,
            )
            .unwrap();
        let handoff = applier.take_unit_handoff().expect("the pass wrote");
        let written: Vec<(String, String)> = report
            .applied
            .iter()
            .map(|w| (w.cgroup.clone(), w.file.clone()))
            .collect();
        assert_eq!(handoff.rewritten, written);
        let container = desired.pods[0].containers[0].path.clone().unwrap();
        assert!(container.ends_with(".scope"), "{container}");
        let held = &handoff.held[&container];
        assert_eq!(
            held.get(&UnitProperty::MemoryHigh),
            Some(&UnitValue::Bytes(160 << 20)),
            "{held:?}"
        );
        let live = handoff
            .live
            .expect("a whole-node pass names the node's cgroups");
        assert!(live.contains(&container), "{live:?}");
        assert_eq!(applier.take_unit_handoff(), None, "taken once");

        // A second pass writes nothing: what it holds is still handed over, without
        // rewritten files.
        applier
            .write_node(
                &settings,
                &node_of_8gi(),
                &pods,
                WriteMode::Write,
                Reach::Node,
            )
            .unwrap();
        let again = applier.take_unit_handoff().expect("held values");
        assert!(again.rewritten.is_empty(), "{again:?}");
        assert_eq!(again.held, handoff.held);

        let (_dir, _, files_only) = temp_node(CgroupDriver::Systemd, false);
        assert!(!NodeApplier::open(&files_only).unwrap().holds_units());
        let (_dir, _, cgroupfs) = temp_node(CgroupDriver::Cgroupfs, true);
        assert!(!NodeApplier::open(&cgroupfs).unwrap().holds_units());
    }

    /// The agent's pass: under Observe nothing is written yet the status computes the
    /// settings' values; under Agent they are written; under Kubelet they are given back
    /// while still computed for the status.
    #[test]
    fn a_pass_writes_only_under_agent_and_computes_the_settings_under_every_mode() {
        use nodemem_model::values::cgroup::MEMORY_HIGH;
        let (_dir, config, pods) = node_with_web(CgroupDriver::Cgroupfs, false);
        let mut settings = at_half();
        let mut applier = NodeApplier::open(&config).unwrap();
        let high = |desired: &DesiredNode<'_>| {
            desired.pods[0].containers[0]
                .values
                .get(MEMORY_HIGH)
                .map(|v| v.render())
        };
        let on_node = || {
            let path = config.roots.cgroup.join(tree_path(&pods[0]));
            std::fs::read_to_string(path.join(MEMORY_HIGH)).unwrap()
        };
        for (mode, written, file) in [
            (Enforcement::Observe, false, "max"),
            (Enforcement::Agent, true, "167772160"),
            (Enforcement::Kubelet, true, "max"),
        ] {
            settings.enforcement = mode;
            let (desired, report) = applier
                .enforce(&settings, &node_of_8gi(), &pods, Reach::Node)
                .unwrap();
            assert_eq!(high(&desired).as_deref(), Some("167772160"), "{mode:?}");
            assert_eq!(!report.applied.is_empty(), written, "{mode:?}: {report:?}");
            assert_eq!(on_node(), file, "{mode:?}");
        }
    }

    /// Under Kubelet enforcement, settings the node cannot compute (reservedMemory on a
    /// NUMA node it does not have) are refused, yet what nodemem set is given back
    /// first: the refusal does not leave Agent's values on the node.
    #[test]
    fn settings_the_node_cannot_compute_do_not_hold_the_give_back_back() {
        use nodemem_model::cluster::policy::{MemoryManagerPolicy, ReservedMemory};
        use nodemem_model::values::cgroup::MEMORY_HIGH;
        let (dir, config, pods) = node_with_web(CgroupDriver::Cgroupfs, false);
        let numa = dir.path().join("sys/devices/system/node/node0");
        std::fs::create_dir_all(&numa).unwrap();
        std::fs::write(numa.join("meminfo"), "Node 0 MemTotal:       1048576 kB\n").unwrap();
        let high = config
            .roots
            .cgroup
            .join(tree_path(&pods[0]))
            .join(MEMORY_HIGH);
        let mut applier = NodeApplier::open(&config).unwrap();
        let mut settings = at_half();
        applier
            .enforce(&settings, &node_of_8gi(), &pods, Reach::Node)
            .unwrap();
        assert_eq!(std::fs::read_to_string(&high).unwrap(), "167772160");

        settings.enforcement = Enforcement::Kubelet;
        settings.memory_manager.policy = MemoryManagerPolicy::Static;
        settings.memory_manager.reserved_memory = vec![ReservedMemory {
            numa_node: 7,
            limits: [(
                "memory".to_string(),
                nodemem_model::quantity::Quantity::parse("16Mi").unwrap(),
            )]
            .into(),
        }];
        let refused = applier.enforce(&settings, &node_of_8gi(), &pods, Reach::Node);
        assert!(
            format!("{refused:?}").contains("NUMA node 7 does not exist on this node"),
            "{refused:?}"
        );
        assert_eq!(std::fs::read_to_string(&high).unwrap(), "max");
    }

    /// Where pod `pod`'s first container is in a cgroupfs tree.
    fn tree_path(pod: &NodePod) -> String {
        use nodemem_model::pod::qos::QosClass;
        use nodemem_model::values::cgroup_layout::container_dir;
        let id = &pod.container_ids()["app"];
        container_dir(
            CgroupDriver::Cgroupfs,
            QosClass::Burstable,
            &pod.pod().uid,
            id,
        )
    }
}
