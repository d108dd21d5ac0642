//! The thin executor: reads what a plan needs and performs its writes in order. A
//! cgroup that vanished meanwhile (the pod was deleted) is skipped and counted; any
//! other failure is recorded with the file, the value and the errno, and the rest of
//! the plan still runs.

use std::collections::{BTreeMap, BTreeSet};

use nodemem_cgroup::{CgroupFs, CgroupPath, HeldFile, OpenCgroup};
use serde::Serialize;

use crate::plan::{CgroupState, Observed, Write};

/// What `observe` keeps open for the writes that follow: cgroup directories (each path
/// is resolved once per apply) and the files read (a changed file is rewritten through
/// the descriptor it was read with: one open per file, not two).
#[derive(Debug, Default)]
pub struct OpenDirs {
    dirs: BTreeMap<String, OpenCgroup>,
    files: BTreeMap<String, BTreeMap<String, HeldFile>>,
}

impl OpenDirs {
    fn file(&mut self, cgroup: &str, file: &str) -> Option<&mut HeldFile> {
        self.files.get_mut(cgroup)?.get_mut(file)
    }

    fn len(&self) -> usize {
        self.dirs.len() + self.files.values().map(BTreeMap::len).sum::<usize>()
    }

    fn contains_key(&self, path: &str) -> bool {
        self.dirs.contains_key(path)
    }

    fn get(&self, path: &str) -> Option<&OpenCgroup> {
        self.dirs.get(path)
    }

    fn insert(&mut self, path: String, dir: OpenCgroup) {
        self.dirs.insert(path, dir);
    }
}

/// Descriptors kept free for everything else the process does.
const SPARE_DESCRIPTORS: u64 = 128;

/// Reads the files `plan::files_to_observe` names, holding each cgroup directory open
/// for the writes that follow (as many as the open-file limit allows; the rest are
/// opened by path). Paths that are not safe were refused before (see
/// [`crate::write_cgroups()`]); here they read as missing.
pub fn observe(fs: &CgroupFs, wanted: &BTreeMap<String, BTreeSet<String>>) -> (Observed, OpenDirs) {
    let budget = nodemem_cgroup::fs::open_file_limit().saturating_sub(SPARE_DESCRIPTORS) as usize;
    let mut held = OpenDirs::default();
    let mut observed = Observed::new();
    // Each file is opened relative to its cgroup's parent directory, held open (paths
    // come sorted, parents first; ancestors are opened on the way, one component each),
    // and kept for the rewrite: one open per file, and one per parent directory.
    for (path, files) in wanted {
        let state = match CgroupPath::new(path) {
            Ok(p) if held.len() + files.len() + p.depth() < budget => {
                match hold_files(fs, &p, files, &mut held, budget) {
                    Some(state) => state,
                    None => read_by_path(fs, &p, files),
                }
            }
            Ok(p) => read_by_path(fs, &p, files),
            Err(_) => CgroupState::Missing,
        };
        observed.insert(path.clone(), state);
    }
    (observed, held)
}

/// Reads `files` of `path` through its held parent and keeps them open; None when the
/// parent cannot be held (the caller reads by path).
fn hold_files(
    fs: &CgroupFs,
    path: &CgroupPath,
    files: &BTreeSet<String>,
    held: &mut OpenDirs,
    budget: usize,
) -> Option<CgroupState> {
    let parent = path.parent()?;
    let leaf = path.as_str().rsplit('/').next().unwrap_or(path.as_str());
    let parent_dir = open_held(fs, &parent, held, budget).ok()??;
    let mut read = BTreeMap::new();
    let mut missing = 0;
    let mut opened = Vec::new();
    for f in files {
        match parent_dir.hold_in_child(leaf, f, is_writable(f)) {
            Ok(mut h) => {
                read.insert(f.clone(), h.read().ok().map(|t| t.trim().to_string()));
                opened.push((f.clone(), h));
            }
            Err(e) => {
                missing += usize::from(e.is_vanished());
                read.insert(f.clone(), None);
            }
        }
    }
    if missing == files.len() && !files.is_empty() {
        return Some(CgroupState::Missing);
    }
    held.files
        .entry(path.as_str().to_string())
        .or_default()
        .extend(opened);
    Some(CgroupState::Present(read))
}

/// Opens (and keeps) a cgroup directory, through its parent's held directory; the
/// root is opened by path.
fn open_held<'d>(
    fs: &CgroupFs,
    path: &CgroupPath,
    held: &'d mut OpenDirs,
    budget: usize,
) -> Result<Option<&'d OpenCgroup>, nodemem_cgroup::CgroupError> {
    if !held.contains_key(path.as_str()) {
        let opened = match path.parent() {
            Some(parent) if held.len() + path.depth() < budget => {
                match open_held(fs, &parent, held, budget)? {
                    Some(p) => p.open_child(path)?,
                    None => None,
                }
            }
            _ => fs.open_dir(path)?,
        };
        match opened {
            Some(dir) => held.insert(path.as_str().to_string(), dir),
            None => return Ok(None),
        }
    }
    Ok(held.get(path.as_str()))
}

fn read_by_path(fs: &CgroupFs, p: &CgroupPath, files: &BTreeSet<String>) -> CgroupState {
    if !fs.exists(p) {
        return CgroupState::Missing;
    }
    CgroupState::Present(
        files
            .iter()
            .map(|f| (f.clone(), fs.read(p, f).ok().map(|t| t.trim().to_string())))
            .collect(),
    )
}

/// A write the kernel refused, with its error and errno.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FailedWrite {
    /// The write that failed.
    #[serde(flatten)]
    pub write: Write,
    /// The error, naming the file and the value.
    pub error: String,
    /// The errno, when the kernel gave one (EINVAL, EBUSY).
    pub errno: Option<i32>,
}

/// What the writes of one pass came to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Executed {
    /// In the order performed.
    pub applied: Vec<Write>,
    /// Skipped: the cgroup was gone.
    pub vanished: Vec<Write>,
    /// Refused by the kernel.
    pub failed: Vec<FailedWrite>,
}

/// Files `observe` reads only, never rewrites.
fn is_writable(file: &str) -> bool {
    !file.ends_with(".effective")
}

/// Performs the writes in plan order, through what `observe` held open where it could.
pub fn execute(fs: &CgroupFs, writes: Vec<Write>, held: &mut OpenDirs) -> Executed {
    let mut out = Executed::default();
    for w in writes {
        let result = if let Some(file) = held.file(&w.cgroup, &w.file) {
            file.rewrite(&w.new)
        } else if let Some(dir) = held.dirs.get(&w.cgroup) {
            dir.write(&w.file, &w.new)
        } else {
            CgroupPath::new(&w.cgroup)
                .map_err(nodemem_cgroup::CgroupError::from)
                .and_then(|p| fs.write(&p, &w.file, &w.new))
        };
        match result {
            Ok(()) => {
                // Off unless asked for (RUST_LOG=nodemem_apply::write=trace): the
                // exact write sequence, logged after the kernel took the value, from
                // which a test checks that no prefix of a pass (an agent killed in
                // the middle) protects a child above its parent.
                tracing::trace!(target: "nodemem_apply::write", cgroup = %w.cgroup, file = %w.file, value = %w.new, "wrote");
                crate::fault::wrote();
                out.applied.push(w)
            }
            Err(e) if e.is_vanished() => out.vanished.push(w),
            Err(e) => out.failed.push(FailedWrite {
                write: w,
                errno: e.errno(),
                error: e.to_string(),
            }),
        }
    }
    if fs.removal_checks() {
        reclassify_removed(fs, held, &mut out);
    }
    out
}

/// On a tree of regular files (tests, benchmarks) a file held open keeps taking writes
/// after its directory is removed, where the kernel answers ENODEV. So that trees and
/// the kernel report the same, cgroups written to are checked once each afterwards
/// (one component resolved, through the held parent) and their writes moved to
/// `vanished` when gone.
fn reclassify_removed(fs: &CgroupFs, held: &OpenDirs, out: &mut Executed) {
    let mut gone: BTreeMap<&str, bool> = BTreeMap::new();
    for w in &out.applied {
        gone.entry(w.cgroup.as_str()).or_insert_with(|| {
            let (parent, leaf) = w.cgroup.rsplit_once('/').unwrap_or(("", &w.cgroup));
            match held.dirs.get(parent) {
                Some(dir) => !dir.has_child(leaf),
                None => CgroupPath::new(&w.cgroup).map_or(true, |p| !fs.exists(&p)),
            }
        });
    }
    let removed: BTreeSet<String> = gone
        .into_iter()
        .filter(|(_, g)| *g)
        .map(|(c, _)| c.to_string())
        .collect();
    if removed.is_empty() {
        return;
    }
    let (vanished, applied): (Vec<Write>, Vec<Write>) = std::mem::take(&mut out.applied)
        .into_iter()
        .partition(|w| removed.contains(&w.cgroup));
    out.applied = applied;
    out.vanished.extend(vanished);
}
