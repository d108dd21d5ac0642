//! One pass over a node: refuse unsafe paths, observe, plan, record what the pass may
//! write, execute, and update the ownership record. The caller loads the record and
//! says how to save it (see [`crate::state`]); it is saved before the first write.

use nodemem_cgroup::{CgroupFs, CgroupPath};
use nodemem_model::node::DesiredCgroup;
use serde::Serialize;

use crate::execute::{execute, observe, FailedWrite};
use crate::plan::{files_to_observe, intend, plan_leaving, update_ownership, Ownership, Write};

/// How one pass runs: planned only or written, the node's page size, the files left to the kubelet.
#[derive(Clone, Copy, Debug)]
pub struct ApplyOptions {
    /// Plan only: nothing is written and the ownership record is unchanged.
    pub dry_run: bool,
    /// The node's base page size (memory.* values are compared in pages).
    pub page_size: i64,
    /// Files to neither set nor restore: the node's kubelet enforces them itself.
    pub leave_alone: &'static [&'static str],
}

/// What one application of a plan did to the node's files: each planned write applied,
/// gone with its cgroup, failed, or held back by its backoff, and the cgroups it could
/// not reach. The agent's conditions, Events and metrics are read from it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyReport {
    /// With `dry_run`, the writes that would be made, in plan order; otherwise empty
    /// (see `applied`, `vanished` and `failed`, which together are the plan).
    pub planned: Vec<Write>,
    /// Writes the kernel took, in plan order.
    pub applied: Vec<Write>,
    /// Skipped because the cgroup disappeared meanwhile.
    pub vanished: Vec<Write>,
    /// Writes the kernel refused, each with its error.
    pub failed: Vec<FailedWrite>,
    /// Desired cgroups that do not exist (yet).
    pub missing: Vec<String>,
    /// Desired cgroups refused before any I/O (hostile identifiers), with why.
    pub refused: Vec<String>,
    /// Interface files read to plan.
    pub reads: usize,
    /// Writes held back: their file failed before and its backoff has not passed.
    pub deferred: Vec<crate::backoff::Deferred>,
}

impl ApplyReport {
    /// Whether the node holds the whole plan: nothing failed, refused or held back.
    pub fn ok(&self) -> bool {
        self.failed.is_empty() && self.refused.is_empty() && self.deferred.is_empty()
    }

    /// Writes planned: attempted, or with `dry_run` proposed.
    pub fn writes(&self) -> usize {
        self.planned.len() + self.applied.len() + self.vanished.len() + self.failed.len()
    }

    /// Every planned write, whatever became of it.
    pub fn all_writes(&self) -> impl Iterator<Item = &Write> {
        self.planned
            .iter()
            .chain(&self.applied)
            .chain(&self.vanished)
            .chain(self.failed.iter().map(|f| &f.write))
    }
}

/// [`write_cgroups_within`] over the whole node, the ownership record kept in memory only
/// (tests and benchmarks).
pub fn write_cgroups(
    fs: &CgroupFs,
    desired: &[DesiredCgroup<'_>],
    owned: &mut Ownership,
    options: ApplyOptions,
) -> ApplyReport {
    let Ok(report) = write_cgroups_within(fs, desired, owned, options, None, None, &mut in_memory);
    report
}

/// A record kept in memory only: saving cannot fail.
pub fn in_memory(_: &Ownership) -> Result<(), std::convert::Infallible> {
    Ok(())
}

/// [`write_cgroups`] with two refinements. `backoff` (with the current time) holds back writes
/// to files whose earlier failures' backoff has not passed and records this pass's
/// failures. `reach` limits the pass to those cgroups (None: the whole node): a cgroup
/// that just appeared is planned, read and written alone, nothing else is read, and
/// owned files outside the reach are neither read nor restored.
///
/// `save` persists the ownership record. It is called before the first write when the
/// pass adds to the record (the files it may set, the values it claims): a process
/// killed between a write and the caller's save after the pass restarts on a record
/// that names every file it wrote. When `save` fails nothing is written, `owned` is as
/// it was, and the error is returned. The caller saves again after the pass (restores
/// and failures change the record).
pub fn write_cgroups_within<E>(
    fs: &CgroupFs,
    desired: &[DesiredCgroup<'_>],
    owned: &mut Ownership,
    options: ApplyOptions,
    mut backoff: Option<(&mut crate::backoff::WriteBackoff, std::time::Duration)>,
    reach: Option<&std::collections::BTreeSet<String>>,
    save: &mut dyn FnMut(&Ownership) -> Result<(), E>,
) -> Result<ApplyReport, E> {
    let mut report = ApplyReport::default();
    let mut safe = Vec::with_capacity(desired.len());
    for d in desired {
        if reach.is_some_and(|s| !s.contains(d.path)) {
            continue;
        }
        match CgroupPath::new(d.path) {
            Ok(_) => safe.push(*d),
            Err(e) => report.refused.push(e.to_string()),
        }
    }
    let reached_owned;
    let owned_view: &Ownership = match reach {
        None => owned,
        Some(s) => {
            reached_owned = Ownership {
                files: owned
                    .files
                    .iter()
                    .filter(|(p, _)| s.contains(*p))
                    .map(|(p, f)| (p.clone(), f.clone()))
                    .collect(),
            };
            &reached_owned
        }
    };
    let wanted = files_to_observe(&safe, owned_view);
    let (observed, mut held) = observe(fs, &wanted);
    report.reads = wanted
        .iter()
        .filter(|(p, _)| matches!(observed.get(*p), Some(crate::plan::CgroupState::Present(_))))
        .map(|(_, f)| f.len())
        .sum();
    let mut plan = plan_leaving(
        &safe,
        &observed,
        owned_view,
        options.page_size,
        options.leave_alone,
    );
    report.missing = std::mem::take(&mut plan.missing);
    if options.dry_run {
        report.planned = plan.writes;
        return Ok(report);
    }
    let mut writes = std::mem::take(&mut plan.writes);
    if let Some((b, now)) = backoff.as_mut() {
        writes.retain(|w| match b.deferred(&w.cgroup, &w.file, *now) {
            Some(d) => {
                report.deferred.push(d);
                false
            }
            None => true,
        });
    }
    let intended = intend(owned, &plan, &writes);
    if !intended.is_empty() {
        if let Err(e) = save(owned) {
            owned.forget(&intended);
            return Err(e);
        }
    }
    let executed = execute(fs, writes, &mut held);
    if let Some((b, now)) = backoff {
        for f in &executed.failed {
            b.failed(&f.write.cgroup, &f.write.file, &f.error, now);
        }
        for w in &executed.applied {
            b.succeeded(&w.cgroup, &w.file);
        }
        for w in &executed.vanished {
            b.forget_cgroup(&w.cgroup);
        }
    }
    let failed: Vec<&Write> = executed.failed.iter().map(|f| &f.write).collect();
    update_ownership(
        owned,
        &plan,
        &executed.applied,
        &executed.vanished,
        &failed,
        &intended,
    );
    report.applied = executed.applied;
    report.vanished = executed.vanished;
    report.failed = executed.failed;
    Ok(report)
}
