//! One pass over a node: refuse unsafe paths, observe, plan, execute, and update the
//! ownership record. The caller loads and saves the record (see [`crate::state`]).

use nodemem_cgroup::{CgroupFs, CgroupPath};
use nodemem_model::node::DesiredCgroup;
use serde::Serialize;

use crate::execute::{execute, observe, FailedWrite};
use crate::plan::{files_to_observe, plan, update_ownership, Ownership, Write};

#[derive(Clone, Copy, Debug)]
pub struct ApplyOptions {
    /// Plan only: nothing is written and the ownership record is unchanged.
    pub dry_run: bool,
    /// The node's base page size (memory.* values are compared in pages).
    pub page_size: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyReport {
    /// The writes in plan order (with `dry_run`, what would be written).
    pub planned: Vec<Write>,
    pub applied: Vec<Write>,
    /// Skipped because the cgroup disappeared meanwhile.
    pub vanished: Vec<Write>,
    pub failed: Vec<FailedWrite>,
    /// Desired cgroups that do not exist (yet).
    pub missing: Vec<String>,
    /// Desired cgroups refused before any I/O (hostile identifiers), with why.
    pub refused: Vec<String>,
    /// Interface files read to plan.
    pub reads: usize,
}

impl ApplyReport {
    pub fn ok(&self) -> bool {
        self.failed.is_empty() && self.refused.is_empty()
    }
}

pub fn apply(
    fs: &CgroupFs,
    desired: &[DesiredCgroup],
    owned: &mut Ownership,
    options: ApplyOptions,
) -> ApplyReport {
    let mut report = ApplyReport::default();
    let mut safe = Vec::with_capacity(desired.len());
    for d in desired {
        match CgroupPath::new(&d.path) {
            Ok(_) => safe.push(d.clone()),
            Err(e) => report.refused.push(e.to_string()),
        }
    }
    let wanted = files_to_observe(&safe, owned);
    let observed = observe(fs, &wanted);
    report.reads = wanted
        .iter()
        .filter(|(p, _)| matches!(observed.get(*p), Some(crate::plan::CgroupState::Present(_))))
        .map(|(_, f)| f.len())
        .sum();
    let plan = plan(&safe, &observed, owned, options.page_size);
    report.planned = plan.writes.clone();
    report.missing = plan.missing.clone();
    if options.dry_run {
        return report;
    }
    let executed = execute(fs, &plan);
    update_ownership(owned, &plan, &executed.applied, &executed.vanished);
    report.applied = executed.applied;
    report.vanished = executed.vanished;
    report.failed = executed.failed;
    report
}
