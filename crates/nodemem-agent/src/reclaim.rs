//! Proactive reclaim (issue 46, `reclaim`): the containers the policy's QoS classes
//! name, each with its own step controller ([`nodemem_model::feedback::reclaim`]). On
//! every tick the containers whose interval passed are read (memory.current,
//! memory.stat, memory.pressure: three small reads) and stepped; under `Active` a step is
//! a job for the writer's thread ([`writer`]), which writes it to memory.reclaim in
//! parts that never take the container below its request and reads it again, so that
//! what is reported is what memory.current and the working set lost, not what was
//! asked (the kernel may take more). A container whose last job has not finished is
//! not stepped again; that is counted as reclaim being behind. Under `Observe` nothing
//! is written: the steps are what Active would ask. The figures go to status on
//! whole-node passes: at once when its headline changes, at most every 30 s when only
//! its figures moved. A node whose refault gate fails stops reclaiming until the next
//! revision ([`Reclaim::halt`]).

pub mod reading;
pub mod writer;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use nodemem_api::config::ReclaimSummary;
use nodemem_cgroup::reclaim::MEMORY_RECLAIM;
use nodemem_cgroup::{CgroupFs, CgroupPath};
pub use nodemem_model::feedback::reclaim::ReclaimMode;
use nodemem_model::feedback::reclaim::{Hold, Reclaim as Settings, Reclaimer, Sample, Step};
use nodemem_model::feedback::reclaim_parts::UNKNOWN_NUMA_NODES;
use nodemem_model::node::reclaim_targets::{targets, Target};
use nodemem_model::node::DesiredNode;
use reading::read;
use tracing::warn;
use writer::{Done, Job, Writer};

/// How often containers are looked at; each is read only when its interval passed.
pub const TICK: std::time::Duration = std::time::Duration::from_secs(2);
/// How often figures that only moved are worth a whole-node pass (and a status
/// write, which the status writer coalesces to one per its refresh period anyway):
/// the 5-minute resync alone would leave status minutes behind what was reclaimed.
const FIGURES_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// One container reclaim acts on.
#[derive(Debug)]
struct Tracked {
    floor: i64,
    /// Its mode and pace: its workload class's, or the pool's.
    reclaim: Settings,
    reclaimer: Reclaimer,
    /// memory.current when first read under this revision.
    first_current: Option<i64>,
    /// The last reading, and the stall and refaults per second since the one before.
    last: Option<Sample>,
    stall_us_per_s: u64,
    refaults_per_s: u64,
    /// Its files did not parse once: said once, not on every tick.
    warned: bool,
    /// A job of its is queued or being written.
    in_flight: bool,
}

/// One tick's outcome, for metrics; summed, what reclaim did since the revision was
/// applied (status).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Containers read.
    pub read: usize,
    /// Steps taken (Active) or that would have been (Observe), and bytes.
    pub steps: usize,
    pub asked: i64,
    /// Active: memory.current and working set lost at the steps, and of the first
    /// the page cache and the anon.
    pub reclaimed: i64,
    pub headroom: i64,
    pub reclaimed_file: i64,
    pub reclaimed_anon: i64,
    pub pressure_back_offs: usize,
    pub refault_back_offs: usize,
    pub failed_writes: usize,
    /// Due steps not taken because the container's last job had not finished (or the
    /// writer's queue was full): reclaim is behind.
    pub behind: usize,
    /// Jobs finished, their time from queueing to done in all, and the longest.
    pub writes: usize,
    pub write_time: Duration,
    pub longest_write: Duration,
}

impl TickReport {
    fn add(&mut self, o: &TickReport) {
        self.read += o.read;
        self.steps += o.steps;
        self.asked += o.asked;
        self.reclaimed += o.reclaimed;
        self.headroom += o.headroom;
        self.reclaimed_file += o.reclaimed_file;
        self.reclaimed_anon += o.reclaimed_anon;
        self.pressure_back_offs += o.pressure_back_offs;
        self.refault_back_offs += o.refault_back_offs;
        self.failed_writes += o.failed_writes;
        self.behind += o.behind;
        self.writes += o.writes;
        self.write_time += o.write_time;
        self.longest_write = self.longest_write.max(o.longest_write);
    }
}

/// What of reclaim's summary is news at once (see [`Reclaim::news`]).
type Headline = (String, bool, i64, bool, bool);

/// Every target container's reclaim.
pub struct Reclaim {
    origin: Instant,
    revision: String,
    settings: Option<Settings>,
    /// The node has swap (a device in /proc/swaps).
    swap: bool,
    /// Some target's cgroup has no memory.reclaim (a kernel before 5.19).
    unsupported: bool,
    /// Whether memory.reclaim takes `swappiness=`; None: not found out yet (only
    /// Active writes to find out).
    swappiness_key: Option<bool>,
    tracked: BTreeMap<String, Tracked>,
    /// Where Active steps are written (made at the first).
    writer: Option<Writer>,
    /// Write steps where they are sent rather than on a thread (tests).
    inline_writes: bool,
    /// The node's NUMA nodes, which bound what one write can take (see
    /// `nodemem_model::feedback::reclaim_parts`).
    numa_nodes: u32,
    /// Counts revisions (and settings): a job of an earlier one is not counted.
    generation: u64,
    /// The containers Active reclaim took from under this revision: what the refault
    /// gate judges.
    touched: BTreeSet<String>,
    /// Why reclaim stopped on this node until the next revision; None: it runs.
    halted: Option<String>,
    /// Every tick's report since the revision was applied, summed.
    totals: TickReport,
    /// The headline last put in status (see [`Reclaim::news`]), its figures and when.
    reported: Option<Headline>,
    reported_figures: Option<ReclaimSummary>,
    reported_at: Option<Instant>,
}

impl Default for Reclaim {
    fn default() -> Self {
        Self::new()
    }
}

impl Reclaim {
    /// No swap until [`Reclaim::set_swap`] says otherwise (at whole-node passes).
    pub fn new() -> Self {
        Reclaim {
            origin: Instant::now(),
            revision: String::new(),
            settings: None,
            swap: false,
            unsupported: false,
            swappiness_key: None,
            tracked: BTreeMap::new(),
            writer: None,
            inline_writes: false,
            numa_nodes: UNKNOWN_NUMA_NODES,
            generation: 0,
            touched: BTreeSet::new(),
            halted: None,
            totals: TickReport::default(),
            reported: None,
            reported_figures: None,
            reported_at: None,
        }
    }

    /// Steps written where they are sent, in the tick (tests that read what a step
    /// took in the same tick).
    #[cfg(test)]
    pub fn with_inline_writes(mut self) -> Self {
        self.inline_writes = true;
        self
    }

    /// The node's NUMA nodes (0: not known, the safe assumption is taken).
    pub fn set_numa_nodes(&mut self, nodes: usize) {
        self.numa_nodes = match u32::try_from(nodes) {
            Ok(0) | Err(_) => UNKNOWN_NUMA_NODES,
            Ok(n) => n,
        };
    }

    /// Stops reclaim on this node for `revision` (its refault gate failed: what it took
    /// was in use), whatever the policy's failure policy, until the next revision;
    /// `why` goes to status.
    pub fn halt(&mut self, revision: &str, why: &str) {
        if self.revision == revision && self.halted.is_none() {
            warn!(revision, why, "reclaim stopped until the next revision");
            self.halted = Some(why.to_string());
        }
    }

    /// The pod cgroups whose containers Active reclaim took from under this revision
    /// (a container's cgroup is a child of its pod's in both cgroup drivers).
    pub fn touched_pods(&self) -> BTreeSet<&str> {
        self.touched
            .iter()
            .filter_map(|c| c.rsplit_once('/').map(|(pod, _)| pod))
            .collect()
    }

    /// Whether the node has swap now: a swap device turned on or off while the agent
    /// runs (`swapon`, `swapoff`) is seen at the next whole-node pass, not at the next
    /// restart. The next readings count anon as reclaimable (or stop) accordingly.
    pub fn set_swap(&mut self, swap: bool) {
        self.swap = swap;
    }

    /// After a pass: the containers to act on under `settings` (None: off), all
    /// managed ones of its classes but the agent's own (`own_cgroup`). A container
    /// kept keeps its controller; a new revision starts every figure again, but for
    /// what `last` (the config's status.reclaim) counted on this revision and mode: an
    /// agent restarted goes on from its counts rather than from nothing.
    pub fn refresh(
        &mut self,
        revision: &str,
        settings: Option<&Settings>,
        desired: &DesiredNode<'_>,
        own_cgroup: Option<&str>,
        last: Option<&ReclaimSummary>,
    ) {
        let targets = match settings {
            Some(s) => targets(desired, &s.classes)
                .into_iter()
                .map(|t| (t, s.clone()))
                .collect(),
            None => Vec::new(),
        };
        self.refresh_targets(revision, settings, targets, own_cgroup, last);
    }

    /// [`Reclaim::refresh`] with each container's own reclaim (its workload class's,
    /// `reclaim_targets::class_targets`); `headline` is the node's as status names it
    /// (`reclaim_targets::headline`: None, off).
    pub fn refresh_targets(
        &mut self,
        revision: &str,
        headline: Option<&Settings>,
        targets: Vec<(Target<'_>, Settings)>,
        own_cgroup: Option<&str>,
        last: Option<&ReclaimSummary>,
    ) {
        if self.revision != revision || self.settings.as_ref() != headline {
            self.revision = revision.to_string();
            self.totals = headline.map_or_else(TickReport::default, |s| {
                counted_before(last, revision, s.mode)
            });
            self.tracked.clear();
            self.unsupported = false;
            self.generation += 1;
            self.touched.clear();
            self.halted = None;
        }
        self.settings = headline.cloned();
        if headline.is_none() {
            self.tracked.clear();
            return;
        }
        let mut kept = BTreeMap::new();
        for (t, reclaim) in targets {
            if Some(t.path) == own_cgroup {
                continue;
            }
            let tracked = match self.tracked.remove(t.path) {
                // A container whose class changed starts again under its new pace.
                Some(mut old) if old.reclaim == reclaim => {
                    old.floor = t.floor;
                    old
                }
                _ => Tracked {
                    floor: t.floor,
                    reclaim,
                    reclaimer: Reclaimer::default(),
                    first_current: None,
                    last: None,
                    stall_us_per_s: 0,
                    refaults_per_s: 0,
                    warned: false,
                    in_flight: false,
                },
            };
            kept.insert(t.path.to_string(), tracked);
        }
        self.tracked = kept;
    }

    /// Off: no config governs the node any more (its values are given back).
    pub fn stop(&mut self) {
        self.settings = None;
        self.tracked.clear();
    }

    /// Reads and steps the containers whose interval passed.
    pub fn tick(&mut self, fs: &CgroupFs) -> TickReport {
        self.tick_at(self.origin.elapsed().as_secs(), fs)
    }

    /// [`Reclaim::tick`] at `at` seconds into the agent's run.
    fn tick_at(&mut self, at: u64, fs: &CgroupFs) -> TickReport {
        let mut report = TickReport::default();
        if self.settings.is_none() {
            return report;
        }
        self.fold_finished(&mut report);
        if self.halted.is_some() {
            self.totals.add(&report);
            return report;
        }
        let mut jobs = Vec::new();
        for (path, t) in &mut self.tracked {
            if !t.reclaimer.due(at) {
                continue;
            }
            if t.in_flight {
                report.behind += 1;
                continue;
            }
            let Ok(cgroup) = CgroupPath::new(path) else {
                continue;
            };
            // A container whose cgroup is gone (or not yet there) is tried next tick.
            let now = match read(fs, &cgroup, at, t.floor, self.swap) {
                Ok(Some(now)) => now,
                Ok(None) => continue,
                Err(e) => {
                    if !std::mem::replace(&mut t.warned, true) {
                        warn!(cgroup = %path, error = %e, "cannot read for reclaim: not reclaimed");
                    }
                    continue;
                }
            };
            report.read += 1;
            // The kernel's support does not change under a container: looked at once,
            // at its first reading, not on every step.
            if t.first_current.is_none() && !fs.dir(&cgroup).join(MEMORY_RECLAIM).exists() {
                self.unsupported = true;
            }
            t.first_current.get_or_insert(now.current);
            if let Some(last) = t.last.filter(|l| l.at < now.at) {
                let seconds = now.at - last.at;
                t.stall_us_per_s = now.stall_total_us.saturating_sub(last.stall_total_us) / seconds;
                t.refaults_per_s = now.refaults.saturating_sub(last.refaults) / seconds;
            }
            t.last = Some(now);
            match t.reclaimer.step(&t.reclaim.settings, &now) {
                Step::Reclaim { bytes } => {
                    report.steps += 1;
                    report.asked += bytes;
                    match t.reclaim.mode {
                        ReclaimMode::Observe => {}
                        ReclaimMode::Active if self.unsupported => {}
                        ReclaimMode::Active => {
                            t.in_flight = true;
                            jobs.push(Job {
                                cgroup,
                                bytes,
                                before: now,
                                numa_nodes: self.numa_nodes,
                                swap: self.swap,
                                queued: Instant::now(),
                                // Once a job has found out, no later one asks again.
                                probe_swappiness: self.swappiness_key.is_none(),
                                generation: self.generation,
                            });
                        }
                    }
                }
                Step::Hold(Hold::Pressure { .. }) => {
                    report.pressure_back_offs += 1;
                }
                Step::Hold(Hold::Refaults { .. }) => {
                    report.refault_back_offs += 1;
                }
                Step::Hold(_) => {}
            }
        }
        self.send(fs, jobs, &mut report);
        // Written in the tick (inline), or finished already: counted now.
        self.fold_finished(&mut report);
        self.totals.add(&report);
        report
    }

    /// Queues `jobs` with the writer (made at the first: a thread, or inline); a job
    /// the queue has no room for is not written, and counted behind.
    fn send(&mut self, fs: &CgroupFs, jobs: Vec<Job>, report: &mut TickReport) {
        if jobs.is_empty() {
            return;
        }
        let inline = self.inline_writes;
        let writer = self.writer.get_or_insert_with(|| {
            if inline {
                return Writer::inline(fs.clone());
            }
            Writer::thread(fs.clone()).unwrap_or_else(|e| {
                warn!(error = %e, "cannot start reclaim's writer thread: steps are written on the agent's thread");
                Writer::inline(fs.clone())
            })
        });
        for job in jobs {
            if let Err(cgroup) = writer.send(job) {
                report.behind += 1;
                if let Some(t) = self.tracked.get_mut(cgroup.as_str()) {
                    t.in_flight = false;
                }
            }
        }
    }

    /// Counts the jobs the writer finished: what each took, the reading after it.
    fn fold_finished(&mut self, report: &mut TickReport) {
        let Some(writer) = self.writer.as_mut() else {
            return;
        };
        for done in writer.finished() {
            if done.generation != self.generation {
                continue; // a job of an earlier revision
            }
            let path = done.cgroup.as_str().to_string();
            let Some(t) = self.tracked.get_mut(&path) else {
                continue; // the container went meanwhile
            };
            t.in_flight = false;
            if done.swappiness.is_some() {
                self.swappiness_key = done.swappiness;
            }
            fold(report, &done);
            if done.parts > 0 {
                t.last = Some(done.after);
                self.touched.insert(path);
            }
        }
    }

    /// The figures for status; None while reclaim is off.
    pub fn summary(&self) -> Option<ReclaimSummary> {
        let settings = self.settings.as_ref()?;
        let read: Vec<(&Tracked, &Sample)> = self
            .tracked
            .values()
            .filter_map(|t| Some((t, t.last.as_ref()?)))
            .collect();
        let sum = |f: &dyn Fn(&Tracked, &Sample) -> i64| read.iter().map(|(t, s)| f(t, s)).sum();
        let wide = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        Some(ReclaimSummary {
            revision: self.revision.clone(),
            mode: mode_name(settings.mode).to_string(),
            supported: !self.unsupported,
            swap: self.swap,
            containers: self.tracked.len() as i64,
            steps: i64::try_from(self.totals.steps).unwrap_or(i64::MAX),
            reclaimed_bytes: self.totals.reclaimed,
            reclaimed_file_bytes: self.totals.reclaimed_file,
            reclaimed_anon_bytes: self.totals.reclaimed_anon,
            swappiness_key: self.swappiness_key,
            headroom_gained_bytes: self.totals.headroom,
            // Observe asks nothing of the kernel: what its steps asked is what Active
            // would have.
            would_reclaim_bytes: if settings.mode == ReclaimMode::Observe {
                self.totals.asked
            } else {
                0
            },
            reclaimable_bytes: sum(&|_, s| s.reclaimable()),
            resident_at_start_bytes: sum(&|t, _| t.first_current.unwrap_or(0)),
            resident_bytes: sum(&|_, s| s.current),
            pressure_back_offs: i64::try_from(self.totals.pressure_back_offs).unwrap_or(i64::MAX),
            refault_back_offs: i64::try_from(self.totals.refault_back_offs).unwrap_or(i64::MAX),
            highest_stall_microseconds_per_second: read
                .iter()
                .map(|(t, _)| wide(t.stall_us_per_s))
                .max()
                .unwrap_or(0),
            target_stall_microseconds_per_second: wide(settings.settings.target_stall_us_per_s),
            refaults_per_second: read.iter().map(|(t, _)| wide(t.refaults_per_s)).sum(),
            failed_writes: i64::try_from(self.totals.failed_writes).unwrap_or(i64::MAX),
            writes_behind: i64::try_from(self.totals.behind).unwrap_or(i64::MAX),
            longest_write_milliseconds: i64::try_from(self.totals.longest_write.as_millis())
                .unwrap_or(i64::MAX),
            stopped: self.halted.clone(),
        })
    }

    /// Whether status should hear now rather than at the next resync: reclaim turned
    /// on or changed, its first readings, the kernel found unable, containers came or
    /// went; figures that moved, once 30 s have passed since the last.
    pub fn news(&self) -> bool {
        let summary = self.summary();
        if self.headline(summary.as_ref()) != self.reported {
            return true;
        }
        let stale = self
            .reported_at
            .is_none_or(|at| at.elapsed() >= FIGURES_EVERY);
        stale && summary != self.reported_figures
    }

    /// The summary as it goes into status, remembered for [`Reclaim::news`].
    pub fn report(&mut self) -> Option<ReclaimSummary> {
        let summary = self.summary();
        self.reported = self.headline(summary.as_ref());
        self.reported_figures = summary.clone();
        self.reported_at = Some(Instant::now());
        summary
    }

    /// What of a summary is news at once: the mode, the kernel's support, the number
    /// of containers, whether any was read yet and whether reclaim stopped.
    fn headline(&self, s: Option<&ReclaimSummary>) -> Option<Headline> {
        let s = s?;
        let read = self.tracked.values().any(|t| t.last.is_some());
        Some((
            s.mode.clone(),
            s.supported,
            s.containers,
            read,
            s.stopped.is_some(),
        ))
    }

    /// Containers acted on now, and the mode (for metrics).
    pub fn targets(&self) -> (usize, Option<ReclaimMode>) {
        (self.tracked.len(), self.settings.as_ref().map(|s| s.mode))
    }
}

/// What a step's write took, read from the readings around it: memory.current, the
/// working set, page cache and anon each lost (a figure that grew meanwhile counts 0).
fn lost(before: &Sample, after: &Sample) -> TickReport {
    let file = |s: &Sample| s.inactive_file + s.active_file;
    TickReport {
        reclaimed: (before.current - after.current).max(0),
        headroom: (before.working_set() - after.working_set()).max(0),
        reclaimed_file: (file(before) - file(after)).max(0),
        reclaimed_anon: (before.anon - after.anon).max(0),
        ..TickReport::default()
    }
}

/// A mode as status names it.
fn mode_name(mode: ReclaimMode) -> &'static str {
    match mode {
        ReclaimMode::Observe => "Observe",
        ReclaimMode::Active => "Active",
    }
}

/// The counts a status of this revision and mode already holds (an agent restarted
/// on it), to go on from; nothing for another revision or mode.
fn counted_before(last: Option<&ReclaimSummary>, revision: &str, mode: ReclaimMode) -> TickReport {
    let Some(l) = last.filter(|l| l.revision == revision && l.mode == mode_name(mode)) else {
        return TickReport::default();
    };
    let count = |v: i64| usize::try_from(v).unwrap_or(0);
    TickReport {
        read: 0,
        steps: count(l.steps),
        asked: l.would_reclaim_bytes,
        reclaimed: l.reclaimed_bytes,
        headroom: l.headroom_gained_bytes,
        reclaimed_file: l.reclaimed_file_bytes,
        reclaimed_anon: l.reclaimed_anon_bytes,
        pressure_back_offs: count(l.pressure_back_offs),
        refault_back_offs: count(l.refault_back_offs),
        failed_writes: count(l.failed_writes),
        behind: count(l.writes_behind),
        writes: 0,
        write_time: Duration::ZERO,
        longest_write: Duration::from_millis(
            u64::try_from(l.longest_write_milliseconds).unwrap_or(0),
        ),
    }
}

/// A finished job's figures, into `report`.
fn fold(report: &mut TickReport, done: &Done) {
    if let Some(e) = &done.error {
        warn!(cgroup = %done.cgroup, asked = done.asked, error = %e, "memory.reclaim refused");
        report.failed_writes += 1;
    }
    if done.parts > 0 {
        report.add(&lost(&done.before, &done.after));
    }
    report.writes += 1;
    report.write_time += done.took;
    report.longest_write = report.longest_write.max(done.took);
}

/// Whether the node has swap: a device or file listed in `/proc/swaps` (past its
/// header line). Unreadable: no swap assumed, so anon is never reclaimed.
pub fn node_has_swap(proc_root: &std::path::Path) -> bool {
    std::fs::read_to_string(proc_root.join("swaps"))
        .map(|t| t.lines().skip(1).any(|l| !l.trim().is_empty()))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_node::{burstable, desired, facts, path_of, pod, settings, MI};
    use nodemem_model::feedback::reclaim::ReclaimSettings;
    use nodemem_model::pod::qos::QosClass;
    use nodemem_model::values::memory_qos::ReservationPolicy;
    use serde_json::json;

    fn reclaim(mode: ReclaimMode) -> Settings {
        Settings {
            mode,
            settings: ReclaimSettings {
                target_stall_us_per_s: 1_000,
                max_step_permille: 10,
                interval_seconds: 2,
                max_refaults_per_s: 100,
            },
            classes: vec![QosClass::Burstable, QosClass::BestEffort],
        }
    }

    /// A container of 512 MiB: 300 MiB inactive and 100 MiB active page cache, 100
    /// MiB anon; `stall` µs of PSI some so far.
    fn fill(dir: &std::path::Path, stall: u64, with_reclaim: bool) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("memory.current"), format!("{}\n", 512 * MI)).unwrap();
        std::fs::write(
            dir.join("memory.stat"),
            format!(
                "anon {}\nfile {}\ninactive_anon 0\nactive_anon {}\ninactive_file {}\nactive_file {}\nworkingset_refault_anon 0\nworkingset_refault_file 0\n",
                100 * MI, 400 * MI, 100 * MI, 300 * MI, 100 * MI
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("memory.pressure"),
            format!("some avg10=0.00 avg60=0.00 avg300=0.00 total={stall}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
        )
        .unwrap();
        if with_reclaim {
            std::fs::write(dir.join(MEMORY_RECLAIM), "").unwrap();
        }
    }

    /// A node of a Burstable `cache` (request 64 MiB) and a Guaranteed `db`.
    struct Node {
        root: tempfile::TempDir,
        pods: Vec<nodemem_model::node::NodePod>,
    }

    fn node(with_reclaim: bool) -> Node {
        let pods = vec![
            burstable("cache", &"c".repeat(64)),
            pod(
                "db",
                &"d".repeat(64),
                json!({"requests": {"memory": "256Mi", "cpu": "1"}, "limits": {"memory": "256Mi", "cpu": "1"}}),
            ),
        ];
        let root = tempfile::tempdir().unwrap();
        let node = Node { root, pods };
        let s = settings(0.5, ReservationPolicy::None);
        let f = facts();
        let d = desired(&s, &f, &node.pods);
        for name in ["cache", "db"] {
            fill(&node.root.path().join(path_of(&d, name)), 0, with_reclaim);
        }
        node
    }

    fn run(node: &Node, mode: ReclaimMode) -> (Reclaim, CgroupFs, String) {
        let s = settings(0.5, ReservationPolicy::None);
        let f = facts();
        let d = desired(&s, &f, &node.pods);
        let mut r = Reclaim::new().with_inline_writes();
        r.refresh("r1", Some(&reclaim(mode)), &d, None, None);
        (r, CgroupFs::new(node.root.path()), path_of(&d, "cache"))
    }

    /// 1 % of 512 MiB, in whole pages.
    const STEP: i64 = (512 * MI / 100) / 4096 * 4096;

    /// Workload classes (issue 63): the pool observes, its batch class takes actively
    /// at a pace of its own, a service class takes nothing; each container steps at
    /// its own class's pace and mode, and status names the node's reclaim Active.
    #[test]
    fn each_container_reclaims_as_its_class_says() {
        use crate::test_node::classed;
        use nodemem_model::class::{ClassReclaim, WorkloadClass};
        use nodemem_model::node::reclaim_targets::{class_targets, headline};
        let pods = vec![
            burstable("cache", &"c".repeat(64)),
            classed(burstable("etl", &"e".repeat(64)), "batch"),
            classed(burstable("web", &"w".repeat(64)), "service"),
        ];
        let mut s = settings(0.5, ReservationPolicy::None);
        s.reclaim = Some(reclaim(ReclaimMode::Observe));
        let batch_pace = ReclaimSettings {
            max_step_permille: 20,
            ..reclaim(ReclaimMode::Active).settings
        };
        s.classes = vec![
            WorkloadClass {
                reclaim: ClassReclaim::Own {
                    mode: ReclaimMode::Active,
                    settings: batch_pace,
                },
                ..WorkloadClass::named("batch")
            },
            WorkloadClass {
                reclaim: ClassReclaim::Disabled,
                ..WorkloadClass::named("service")
            },
        ];
        let f = facts();
        let d = desired(&s, &f, &pods);
        let root = tempfile::tempdir().unwrap();
        for name in ["cache", "etl", "web"] {
            fill(&root.path().join(path_of(&d, name)), 0, true);
        }
        let mut r = Reclaim::new().with_inline_writes();
        r.refresh_targets(
            "r1",
            headline(&s).as_ref(),
            class_targets(&d, &s),
            None,
            None,
        );
        assert_eq!(
            r.targets(),
            (2, Some(ReclaimMode::Active)),
            "not the service's"
        );
        let fs = CgroupFs::new(root.path());
        r.tick_at(0, &fs);
        let t = r.tick_at(2, &fs);
        // 1 % observed on the pool's, 2 % asked of the batch class's.
        assert_eq!(
            (t.steps, t.asked),
            (2, STEP + (512 * MI / 50) / 4096 * 4096)
        );
        let written = |name: &str| {
            std::fs::read_to_string(root.path().join(path_of(&d, name)).join(MEMORY_RECLAIM))
                .unwrap()
        };
        assert_eq!(written("cache"), "", "the pool observes");
        assert!(!written("etl").is_empty(), "the batch class takes actively");
        assert_eq!(written("web"), "", "the service class takes nothing");
        assert_eq!(r.summary().unwrap().mode, "Active");
        // The batch class turned off: its container leaves, the pool's stays.
        s.classes[0].reclaim = ClassReclaim::Disabled;
        r.refresh_targets(
            "r2",
            headline(&s).as_ref(),
            class_targets(&d, &s),
            None,
            None,
        );
        assert_eq!(r.targets(), (1, Some(ReclaimMode::Observe)));
    }

    #[test]
    fn observe_reports_what_on_would_take_and_writes_nothing() {
        let node = node(true);
        let (mut r, fs, cache) = run(&node, ReclaimMode::Observe);
        assert_eq!(
            r.targets(),
            (1, Some(ReclaimMode::Observe)),
            "not the Guaranteed db"
        );
        assert_eq!(
            r.tick_at(0, &fs).steps,
            0,
            "the first reading is the baseline"
        );
        assert_eq!(r.tick_at(1, &fs).read, 0, "not due before the interval");
        let t = r.tick_at(2, &fs);
        assert_eq!((t.steps, t.asked, t.reclaimed), (1, STEP, 0));
        let s = r.summary().unwrap();
        assert_eq!(s.mode, "Observe");
        assert!(s.supported);
        assert_eq!((s.containers, s.steps, s.would_reclaim_bytes), (1, 1, STEP));
        assert_eq!(s.reclaimed_bytes, 0);
        // Page cache, not anon (no swap), above the 64 MiB request.
        assert_eq!(s.reclaimable_bytes, 400 * MI);
        assert_eq!(
            (s.resident_at_start_bytes, s.resident_bytes),
            (512 * MI, 512 * MI)
        );
        let written = std::fs::read_to_string(node.root.path().join(&cache).join(MEMORY_RECLAIM));
        assert_eq!(written.unwrap(), "", "Observe writes nothing");
    }

    #[test]
    fn on_writes_the_step_and_counts_what_memory_current_lost_not_what_it_asked() {
        let node = node(true);
        let (mut r, fs, cache) = run(&node, ReclaimMode::Active);
        r.tick_at(0, &fs);
        let t = r.tick_at(2, &fs);
        assert_eq!((t.steps, t.asked), (1, STEP));
        let written = std::fs::read_to_string(node.root.path().join(&cache).join(MEMORY_RECLAIM));
        assert_eq!(written.unwrap(), STEP.to_string());
        // A temp file takes nothing: memory.current did not move, so nothing is counted.
        let s = r.summary().unwrap();
        assert_eq!(
            (
                s.mode.as_str(),
                s.steps,
                s.reclaimed_bytes,
                s.would_reclaim_bytes
            ),
            ("Active", 1, 0, 0)
        );
    }

    /// Issue 58: the kernel reclaims in the writer's context, so a write it holds (here
    /// a FIFO nobody reads, as a slow writeback would) must not hold the agent's loop:
    /// the ticks go on at once, the container's next due step is counted behind, and the
    /// write (the swappiness probe, then the step) is counted when the kernel lets go.
    #[test]
    fn a_write_the_kernel_holds_never_holds_the_tick_and_is_counted_behind() {
        let node = node(true);
        let s = settings(0.5, ReservationPolicy::None);
        let f = facts();
        let d = desired(&s, &f, &node.pods);
        let fifo = node
            .root
            .path()
            .join(path_of(&d, "cache"))
            .join(MEMORY_RECLAIM);
        std::fs::remove_file(&fifo).unwrap();
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let mut r = Reclaim::new();
        r.refresh("r1", Some(&reclaim(ReclaimMode::Active)), &d, None, None);
        let fs = CgroupFs::new(node.root.path());
        r.tick_at(0, &fs);
        let began = Instant::now();
        assert_eq!(r.tick_at(2, &fs).steps, 1);
        let t = r.tick_at(4, &fs);
        assert_eq!((t.behind, t.steps, t.writes), (1, 0, 0));
        assert!(
            began.elapsed() < Duration::from_secs(1),
            "the ticks waited for the kernel: {:?}",
            began.elapsed()
        );
        let reader = std::thread::spawn(move || {
            // The kernel holds the write a while yet.
            std::thread::sleep(Duration::from_millis(100));
            // Two writes, which one read may see as one (a writer that opens again
            // before the reader saw the end of the first).
            let want = format!("0 swappiness=60{STEP}");
            let mut got = String::new();
            while got.len() < want.len() {
                got += &std::fs::read_to_string(&fifo).unwrap();
            }
            got
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while r.tracked.values().any(|t| t.in_flight) {
            assert!(Instant::now() < deadline, "the write never finished");
            std::thread::sleep(Duration::from_millis(20));
            // Not due again (the next step is due at 4): only what finished is counted.
            r.tick_at(3, &fs);
        }
        assert_eq!(
            reader.join().unwrap(),
            format!("0 swappiness=60{STEP}"),
            "the probe, then the step in one part"
        );
        let s = r.summary().unwrap();
        assert_eq!((s.writes_behind, s.swappiness_key), (1, Some(true)));
        assert!(s.longest_write_milliseconds >= 100, "{s:?}");
        assert_eq!(r.touched_pods().len(), 1, "the cache pod was written to");
    }

    #[test]
    fn a_halted_node_steps_no_more_until_the_next_revision() {
        let node = node(true);
        let (mut r, fs, _) = run(&node, ReclaimMode::Active);
        r.tick_at(0, &fs);
        assert_eq!(r.tick_at(2, &fs).steps, 1);
        assert_eq!(r.touched_pods().len(), 1);
        r.halt("other", "not this revision");
        assert_eq!(r.summary().unwrap().stopped, None);
        let before = r.report();
        r.halt("r1", "SustainedRefaults: what reclaim took is read back");
        assert!(r.news(), "a stop is news at once");
        for at in [4, 6, 8] {
            assert_eq!(r.tick_at(at, &fs).read, 0, "nothing read or stepped");
        }
        let s = r.summary().unwrap();
        assert_eq!(
            s.stopped.as_deref(),
            Some("SustainedRefaults: what reclaim took is read back")
        );
        assert_eq!(s.steps, before.unwrap().steps);
        let s = settings(0.5, ReservationPolicy::None);
        let f = facts();
        let d = desired(&s, &f, &node.pods);
        r.refresh("r2", Some(&reclaim(ReclaimMode::Active)), &d, None, None);
        assert_eq!(r.summary().unwrap().stopped, None);
        assert!(
            r.touched_pods().is_empty(),
            "a new revision has touched nothing"
        );
        r.tick_at(10, &fs);
        assert_eq!(r.tick_at(12, &fs).steps, 1, "it runs again");
    }

    #[test]
    fn turned_off_or_without_a_config_it_stops_at_once_and_reports_nothing() {
        let node = node(true);
        let (mut r, fs, cache) = run(&node, ReclaimMode::Active);
        r.tick_at(0, &fs);
        assert_eq!(r.tick_at(2, &fs).steps, 1);
        let file = node.root.path().join(&cache).join(MEMORY_RECLAIM);
        std::fs::write(&file, "").unwrap();
        // `mode: Disabled` (or the config deleted): the pass refreshes with no settings.
        let s = settings(0.5, ReservationPolicy::None);
        let f = facts();
        let d = desired(&s, &f, &node.pods);
        r.refresh("r2", None, &d, None, None);
        for at in [4, 6, 60, 600] {
            let t = r.tick_at(at, &fs);
            assert_eq!((t.read, t.steps), (0, 0), "at {at} s");
        }
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "",
            "nothing written after"
        );
        assert_eq!(r.summary(), None, "status.reclaim goes");
        assert_eq!(r.targets(), (0, None));
        // No config at all (given back): the same.
        r.refresh("r2", Some(&reclaim(ReclaimMode::Active)), &d, None, None);
        assert_eq!(r.targets(), (1, Some(ReclaimMode::Active)));
        r.stop();
        assert_eq!(r.targets(), (0, None));
        assert_eq!((r.tick_at(700, &fs).read, r.summary()), (0, None));
        // On again: a fresh start, a baseline before any step.
        r.refresh("r3", Some(&reclaim(ReclaimMode::Active)), &d, None, None);
        assert_eq!(r.tick_at(602, &fs).steps, 0);
        assert_eq!(r.summary().unwrap().steps, 0);
    }

    #[test]
    fn an_agent_restarted_on_its_revision_goes_on_from_what_status_counted() {
        let node = node(true);
        let (mut r, fs, _) = run(&node, ReclaimMode::Active);
        r.tick_at(0, &fs);
        r.tick_at(2, &fs);
        let before = r.report().unwrap();
        assert_eq!(before.steps, 1);
        let mut last = before.clone();
        last.reclaimed_bytes = 300 * MI;
        last.headroom_gained_bytes = 200 * MI;
        last.refault_back_offs = 4;
        // A new agent on the same revision and mode: its counts go on from status.
        let s = settings(0.5, ReservationPolicy::None);
        let f = facts();
        let d = desired(&s, &f, &node.pods);
        let mut again = Reclaim::new().with_inline_writes();
        again.refresh(
            "r1",
            Some(&reclaim(ReclaimMode::Active)),
            &d,
            None,
            Some(&last),
        );
        let go_on = again.summary().unwrap();
        assert_eq!(
            (
                go_on.steps,
                go_on.reclaimed_bytes,
                go_on.headroom_gained_bytes,
                go_on.refault_back_offs
            ),
            (1, 300 * MI, 200 * MI, 4)
        );
        again.tick_at(0, &fs);
        again.tick_at(2, &fs);
        assert_eq!(again.summary().unwrap().steps, 2, "and counts on");
        // Another revision, or another mode on it, starts from nothing.
        let mut other = Reclaim::new().with_inline_writes();
        other.refresh(
            "r2",
            Some(&reclaim(ReclaimMode::Active)),
            &d,
            None,
            Some(&last),
        );
        assert_eq!(other.summary().unwrap().reclaimed_bytes, 0);
        let mut observing = Reclaim::new().with_inline_writes();
        observing.refresh(
            "r1",
            Some(&reclaim(ReclaimMode::Observe)),
            &d,
            None,
            Some(&last),
        );
        assert_eq!(observing.summary().unwrap().steps, 0);
    }

    #[test]
    fn a_step_is_split_into_the_page_cache_and_the_anon_it_took() {
        let sample = |current: i64, inactive: i64, active: i64, anon: i64| Sample {
            at: 0,
            stall_total_us: 0,
            current,
            inactive_file: inactive,
            active_file: active,
            anon,
            refaults: 0,
            floor: 0,
            swap: true,
        };
        let before = sample(512 * MI, 300 * MI, 100 * MI, 100 * MI);
        let after = sample(400 * MI, 250 * MI, 60 * MI, 90 * MI);
        let t = lost(&before, &after);
        assert_eq!(
            (t.reclaimed, t.reclaimed_file, t.reclaimed_anon),
            (112 * MI, 90 * MI, 10 * MI)
        );
        // The working set (current less inactive file) lost 62 MiB.
        assert_eq!(t.headroom, 62 * MI);
        // A figure that grew meanwhile (the container allocated) counts nothing.
        let grew = sample(520 * MI, 300 * MI, 100 * MI, 130 * MI);
        let t = lost(&before, &grew);
        assert_eq!((t.reclaimed, t.reclaimed_file, t.reclaimed_anon), (0, 0, 0));
    }

    #[test]
    fn stall_over_the_target_backs_off_without_a_write() {
        let node = node(true);
        let (mut r, fs, cache) = run(&node, ReclaimMode::Active);
        r.tick_at(0, &fs);
        fill(&node.root.path().join(&cache), 20_000, true); // 10,000 µs/s over 2 s
        let t = r.tick_at(2, &fs);
        assert_eq!((t.steps, t.pressure_back_offs), (0, 1));
        let s = r.summary().unwrap();
        assert_eq!(
            (
                s.pressure_back_offs,
                s.highest_stall_microseconds_per_second
            ),
            (1, 10_000)
        );
        let written = std::fs::read_to_string(node.root.path().join(&cache).join(MEMORY_RECLAIM));
        assert_eq!(written.unwrap(), "");
    }

    #[test]
    fn a_kernel_without_memory_reclaim_is_reported_and_nothing_is_created() {
        let node = node(false);
        let (mut r, fs, cache) = run(&node, ReclaimMode::Active);
        r.tick_at(0, &fs);
        r.tick_at(2, &fs);
        assert!(!r.summary().unwrap().supported);
        assert_eq!(r.summary().unwrap().failed_writes, 0, "not tried");
        assert!(!node.root.path().join(&cache).join(MEMORY_RECLAIM).exists());
    }

    #[test]
    fn news_is_the_headline_not_the_figures() {
        let node = node(true);
        let (mut r, fs, _) = run(&node, ReclaimMode::Observe);
        assert!(r.news(), "reclaim turned on");
        r.report();
        r.tick_at(0, &fs);
        assert!(r.news(), "its first readings");
        r.report();
        r.tick_at(2, &fs);
        assert!(!r.news(), "a step's figures wait");
        r.reported_at = Some(Instant::now() - FIGURES_EVERY);
        assert!(r.news(), "moved figures are news once the period passed");
        r.report();
        assert!(!r.news());
        r.reported_at = Some(Instant::now() - FIGURES_EVERY);
        assert!(!r.news(), "unmoved figures never are");
        let s = settings(0.5, ReservationPolicy::None);
        let f = facts();
        let d = desired(&s, &f, &node.pods);
        r.refresh("r1", None, &d, None, None);
        assert!(r.summary().is_none());
        assert!(r.news(), "turned off");
    }

    #[test]
    fn the_guaranteed_class_only_when_named_and_never_the_agents_own_cgroup() {
        let node = node(true);
        let s = settings(0.5, ReservationPolicy::None);
        let f = facts();
        let d = desired(&s, &f, &node.pods);
        let mut all = reclaim(ReclaimMode::Active);
        all.classes.push(QosClass::Guaranteed);
        let mut r = Reclaim::new().with_inline_writes();
        r.refresh("r1", Some(&all), &d, None, None);
        assert_eq!(r.targets().0, 2);
        r.refresh("r1", Some(&all), &d, Some(&path_of(&d, "db")), None);
        assert_eq!(r.targets().0, 1);
    }

    #[test]
    fn swap_turned_on_later_counts_anon_as_reclaimable() {
        let node = node(true);
        let (mut r, fs, cache) = run(&node, ReclaimMode::Observe);
        std::fs::write(
            node.root.path().join(&cache).join("memory.swap.max"),
            "max\n",
        )
        .unwrap();
        r.tick_at(0, &fs);
        let s = r.summary().unwrap();
        assert!(!s.swap);
        assert_eq!(s.reclaimable_bytes, 400 * MI, "page cache only");
        r.set_swap(true);
        r.tick_at(2, &fs);
        let s = r.summary().unwrap();
        assert!(s.swap);
        // Page cache and anon above the 64 MiB request: all of memory.current's 512.
        assert_eq!(s.reclaimable_bytes, 448 * MI);
        r.set_swap(false);
        r.tick_at(4, &fs);
        assert_eq!(r.summary().unwrap().reclaimable_bytes, 400 * MI, "swapoff");
    }

    #[test]
    fn swap_is_a_device_in_proc_swaps() {
        let proc = tempfile::tempdir().unwrap();
        assert!(!node_has_swap(proc.path()), "unreadable: none");
        let header = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";
        std::fs::write(proc.path().join("swaps"), header).unwrap();
        assert!(!node_has_swap(proc.path()));
        std::fs::write(
            proc.path().join("swaps"),
            format!("{header}/swapfile                               file\t\t1048572\t\t0\t\t-2\n"),
        )
        .unwrap();
        assert!(node_has_swap(proc.path()));
    }
}
