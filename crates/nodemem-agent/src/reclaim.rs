//! Proactive reclaim (issue 46, `reclaim`): the containers the policy's QoS classes
//! name, each with its own step controller ([`nodemem_model::feedback::reclaim`]). On
//! every tick the containers whose interval passed are read (memory.current,
//! memory.stat, memory.pressure: three small reads) and stepped; under `Active` a step is
//! written to memory.reclaim and the container read again, so that what is reported
//! is what memory.current and the working set lost, not what was asked (the kernel
//! may take more). Under `Observe` nothing is written: the steps are what Active would
//! ask. The figures go to status on whole-node passes: at once when its headline changes,
//! at most every 30 s when only its figures moved.

use std::collections::BTreeMap;
use std::time::Instant;

use nodemem_api::config::ReclaimSummary;
use nodemem_cgroup::reclaim::{sample, ReclaimFiles, Reclaimed, MEMORY_RECLAIM};
use nodemem_cgroup::{CgroupError, CgroupFs, CgroupPath};
pub use nodemem_model::feedback::reclaim::ReclaimMode;
use nodemem_model::feedback::reclaim::{Hold, Reclaim as Settings, Reclaimer, Sample, Step};
use nodemem_model::feedback::reclaim_targets::targets;
use nodemem_model::node::DesiredNode;
use tracing::warn;

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
    reclaimer: Reclaimer,
    /// memory.current when first read under this revision.
    first_current: Option<i64>,
    /// The last reading, and the stall and refaults per second since the one before.
    last: Option<Sample>,
    stall_us_per_s: u64,
    refaults_per_s: u64,
    /// Its files did not parse once: said once, not on every tick.
    warned: bool,
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
    }
}

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
    /// Every tick's report since the revision was applied, summed.
    totals: TickReport,
    /// The headline last put in status (see [`Reclaim::news`]), its figures and when.
    reported: Option<(String, bool, i64, bool)>,
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
            totals: TickReport::default(),
            reported: None,
            reported_figures: None,
            reported_at: None,
        }
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
        if self.revision != revision || self.settings.as_ref() != settings {
            self.revision = revision.to_string();
            self.totals = settings.map_or_else(TickReport::default, |s| {
                counted_before(last, revision, s.mode)
            });
            self.tracked.clear();
            self.unsupported = false;
        }
        self.settings = settings.cloned();
        let Some(settings) = settings else {
            self.tracked.clear();
            return;
        };
        let mut kept = BTreeMap::new();
        for t in targets(desired, &settings.classes) {
            if Some(t.path) == own_cgroup {
                continue;
            }
            let tracked = match self.tracked.remove(t.path) {
                Some(mut old) => {
                    old.floor = t.floor;
                    old
                }
                None => Tracked {
                    floor: t.floor,
                    reclaimer: Reclaimer::default(),
                    first_current: None,
                    last: None,
                    stall_us_per_s: 0,
                    refaults_per_s: 0,
                    warned: false,
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
        let Some(settings) = self.settings.clone() else {
            return report;
        };
        for (path, t) in &mut self.tracked {
            if !t.reclaimer.due(at) {
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
            match t.reclaimer.step(&settings.settings, &now) {
                Step::Reclaim { bytes } => {
                    report.steps += 1;
                    report.asked += bytes;
                    match settings.mode {
                        ReclaimMode::Observe => {}
                        ReclaimMode::Active if self.unsupported => {}
                        ReclaimMode::Active => {
                            if self.swappiness_key.is_none() {
                                self.swappiness_key = takes_swappiness(fs, &cgroup);
                            }
                            match write(fs, &cgroup, bytes, &now, at, t.floor, self.swap) {
                                Ok(after) => {
                                    report.add(&lost(&now, &after));
                                    t.last = Some(after);
                                }
                                Err(e) => {
                                    warn!(cgroup = %path, bytes, error = %e, "memory.reclaim refused");
                                    report.failed_writes += 1;
                                }
                            }
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
        self.totals.add(&report);
        report
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
    /// of containers and whether any was read yet.
    fn headline(&self, s: Option<&ReclaimSummary>) -> Option<(String, bool, i64, bool)> {
        let s = s?;
        let read = self.tracked.values().any(|t| t.last.is_some());
        Some((s.mode.clone(), s.supported, s.containers, read))
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

/// Whether memory.reclaim takes `swappiness=`; None when the probe's write failed for
/// another reason (it is tried again at the next step).
fn takes_swappiness(fs: &CgroupFs, cgroup: &CgroupPath) -> Option<bool> {
    match fs.reclaim_takes_swappiness(cgroup) {
        Ok(takes) => Some(takes),
        Err(e) => {
            warn!(cgroup = %cgroup, error = %e, "cannot find out whether memory.reclaim takes swappiness=");
            None
        }
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
    }
}

/// A container's reading: None when its cgroup cannot be read (gone, or not there
/// yet: the next tick tries again), an error when a file does not parse. Anon counts
/// as reclaimable only where the node has swap and the container's memory.swap.max is
/// not 0.
fn read(
    fs: &CgroupFs,
    cgroup: &CgroupPath,
    at: u64,
    floor: i64,
    node_swap: bool,
) -> Result<Option<Sample>, nodemem_cgroup::parse::ParseError> {
    let files = ["memory.current", "memory.stat", "memory.pressure"].map(|f| fs.read(cgroup, f));
    let [Ok(current), Ok(stat), Ok(pressure)] = files else {
        return Ok(None);
    };
    let swap = node_swap
        && fs
            .read(cgroup, "memory.swap.max")
            .is_ok_and(|v| v.trim() != "0");
    let files = ReclaimFiles {
        current: &current,
        stat: &stat,
        pressure: &pressure,
    };
    sample(at, files, floor, swap).map(Some)
}

/// Writes a step and reads the container again. "Less found" (EAGAIN) is no failure.
fn write(
    fs: &CgroupFs,
    cgroup: &CgroupPath,
    bytes: i64,
    before: &Sample,
    at: u64,
    floor: i64,
    swap: bool,
) -> Result<Sample, CgroupError> {
    let _: Reclaimed = fs.reclaim(cgroup, bytes)?;
    // Counted from the reading after; if the cgroup went in between, nothing is
    // counted as taken.
    Ok(read(fs, cgroup, at, floor, swap)
        .ok()
        .flatten()
        .unwrap_or(*before))
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
        let mut r = Reclaim::new();
        r.refresh("r1", Some(&reclaim(mode)), &d, None, None);
        (r, CgroupFs::new(node.root.path()), path_of(&d, "cache"))
    }

    /// 1 % of 512 MiB, in whole pages.
    const STEP: i64 = (512 * MI / 100) / 4096 * 4096;

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
        let mut again = Reclaim::new();
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
        let mut other = Reclaim::new();
        other.refresh(
            "r2",
            Some(&reclaim(ReclaimMode::Active)),
            &d,
            None,
            Some(&last),
        );
        assert_eq!(other.summary().unwrap().reclaimed_bytes, 0);
        let mut observing = Reclaim::new();
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
        let mut r = Reclaim::new();
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
