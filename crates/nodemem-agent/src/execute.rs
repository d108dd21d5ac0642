//! The thin executor: reads what a plan needs and performs its writes in order. A
//! cgroup that vanished meanwhile (the pod was deleted) is skipped and counted; any
//! other failure is recorded with the file, the value and the errno, and the rest of
//! the plan still runs.

use std::collections::{BTreeMap, BTreeSet};

use nodemem_cgroup::{CgroupFs, CgroupPath};
use serde::Serialize;

use crate::plan::{CgroupState, Observed, Plan, Write};

/// Reads the files `plan::files_to_observe` names. Paths that are not safe were
/// refused before (see [`crate::apply`]); here they read as missing.
pub fn observe(fs: &CgroupFs, wanted: &BTreeMap<String, BTreeSet<String>>) -> Observed {
    wanted
        .iter()
        .map(|(path, files)| {
            let state = match CgroupPath::new(path) {
                Ok(p) if fs.exists(&p) => CgroupState::Present(
                    files
                        .iter()
                        .map(|f| (f.clone(), fs.read(&p, f).ok().map(|t| t.trim().to_string())))
                        .collect(),
                ),
                _ => CgroupState::Missing,
            };
            (path.clone(), state)
        })
        .collect()
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FailedWrite {
    #[serde(flatten)]
    pub write: Write,
    pub error: String,
    pub errno: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Executed {
    /// In the order performed.
    pub applied: Vec<Write>,
    /// Skipped: the cgroup was gone.
    pub vanished: Vec<Write>,
    pub failed: Vec<FailedWrite>,
}

/// Performs the writes in plan order.
pub fn execute(fs: &CgroupFs, plan: &Plan) -> Executed {
    let mut out = Executed::default();
    for w in &plan.writes {
        let result = CgroupPath::new(&w.cgroup)
            .map_err(nodemem_cgroup::CgroupError::from)
            .and_then(|p| fs.write(&p, &w.file, &w.new));
        match result {
            Ok(()) => out.applied.push(w.clone()),
            Err(e) if e.is_vanished() => out.vanished.push(w.clone()),
            Err(e) => out.failed.push(FailedWrite {
                write: w.clone(),
                errno: e.errno(),
                error: e.to_string(),
            }),
        }
    }
    out
}
