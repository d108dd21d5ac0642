//! Containers created with nodemem's values (NRI): which of those files someone else
//! changed before the applier first found their cgroup.

use std::collections::{BTreeMap, BTreeSet};

use crate::ApplyReport;

/// A file a container was created with (NRI) that held another value when the agent
/// first found its cgroup: someone changed it after nodemem's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overridden {
    /// The container's cgroup (relative to the cgroup root).
    pub cgroup: String,
    /// The interface file (`memory.high`).
    pub file: String,
    /// What it held instead of nodemem's value.
    pub found: Option<String>,
}

/// How long a container created with nodemem's values may take to start before it
/// is forgotten (one that never starts is never claimed).
const PENDING_CREATION: std::time::Duration = std::time::Duration::from_secs(60);

/// The containers created with nodemem's values, from the runtime's answer until a
/// pass finds their cgroup.
#[derive(Debug, Default)]
pub struct Creations {
    /// Not started yet: the files set, and since when (one that never starts is
    /// forgotten after a minute). Until it started a different value may be the
    /// runtime's, not yet written.
    pending: BTreeMap<String, (Vec<&'static str>, std::time::Instant)>,
    /// Started, until a pass finds their cgroup: a write to one of their files then is
    /// over someone else's value.
    created: BTreeMap<String, Vec<&'static str>>,
    /// Such writes since [`Creations::take_overridden`].
    overridden: Vec<Overridden>,
}

impl Creations {
    /// The runtime is creating the container at `path` with `files` set.
    pub fn created(&mut self, path: &str, files: Vec<&'static str>) {
        self.pending
            .insert(path.to_string(), (files, std::time::Instant::now()));
    }

    /// The container started: the runtime has written its values.
    pub fn started(&mut self, path: &str) {
        if let Some((files, _)) = self.pending.remove(path) {
            self.created.insert(path.to_string(), files);
        }
    }

    /// Forgets containers that did not start within a minute (`PENDING_CREATION`).
    pub fn forget_unstarted(&mut self) {
        self.pending
            .retain(|_, (_, since)| since.elapsed() < PENDING_CREATION);
    }

    /// After a pass: its writes over files set at creation are overrides.
    pub fn found(&mut self, report: &ApplyReport, reach: Option<&BTreeSet<String>>) {
        let overridden = overridden_at_creation(&mut self.created, report, reach);
        self.overridden.extend(overridden);
    }

    /// The overrides found since the last call.
    pub fn take_overridden(&mut self) -> Vec<Overridden> {
        std::mem::take(&mut self.overridden)
    }
}

/// The writes of one apply to files set at creation, in the first pass that found
/// their cgroup; cgroups found (present and within the pass's reach) stop being watched.
fn overridden_at_creation(
    created: &mut BTreeMap<String, Vec<&'static str>>,
    report: &ApplyReport,
    reach: Option<&BTreeSet<String>>,
) -> Vec<Overridden> {
    let out: Vec<Overridden> = report
        .applied
        .iter()
        .filter(|w| w.kind == crate::plan::WriteKind::Set)
        .filter(|w| {
            created
                .get(&w.cgroup)
                .is_some_and(|files| files.contains(&w.file.as_str()))
        })
        .map(|w| Overridden {
            cgroup: w.cgroup.clone(),
            file: w.file.clone(),
            found: w.old.clone(),
        })
        .collect();
    created.retain(|path, _| {
        report.missing.contains(path) || reach.is_some_and(|s| !s.contains(path))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Write, WriteKind};

    #[test]
    fn a_file_set_at_creation_and_found_changed_is_named_once() {
        let write = |cgroup: &str, file: &str, old: &str| Write {
            cgroup: cgroup.into(),
            file: file.into(),
            old: Some(old.into()),
            new: "167772160".into(),
            kind: WriteKind::Set,
        };
        let mut created = BTreeMap::from([
            ("pod/a".to_string(), vec!["memory.high", "memory.low"]),
            ("pod/b".to_string(), vec!["memory.high"]),
            ("pod/c".to_string(), vec!["memory.high"]),
        ]);
        // a: another plugin left memory.high at max (written back); its memory.min was
        // not set at creation, so writing it is no override. b: not created yet. c: not
        // within this pass's reach.
        let report = ApplyReport {
            applied: vec![
                write("pod/a", "memory.high", "max"),
                write("pod/a", "memory.min", "0"),
            ],
            missing: vec!["pod/b".into()],
            ..ApplyReport::default()
        };
        let reach = BTreeSet::from(["pod/a".to_string(), "pod/b".to_string()]);
        let found = overridden_at_creation(&mut created, &report, Some(&reach));
        assert_eq!(
            found,
            vec![Overridden {
                cgroup: "pod/a".into(),
                file: "memory.high".into(),
                found: Some("max".into()),
            }]
        );
        assert_eq!(created.keys().collect::<Vec<_>>(), ["pod/b", "pod/c"]);
        // Once found, a later repair of the same file is drift, not an override.
        let whole_node = ApplyReport {
            applied: report.applied.clone(),
            ..ApplyReport::default()
        };
        let again = overridden_at_creation(&mut created, &whole_node, None);
        assert!(again.is_empty());
        assert!(
            created.is_empty(),
            "a whole-node pass found b and c: {created:?}"
        );
    }
}
