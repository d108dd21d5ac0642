//! Pure write planning: `plan(desired, observed, owned)` -> the writes, in the order
//! the kernel needs them. No I/O; the executor ([`crate::execute`]) is a thin loop.
//!
//! * Only values that differ are written. memory.* values compare after rounding down
//!   to the page size (the kernel stores pages: `100000000` reads back as `99999744`),
//!   `cpuset.mems` compares as a set (`0,1` is `0-1`).
//! * Order: `cpuset.mems` widened parents first; protection (`memory.min`,
//!   `memory.low`) lowered children first, then raised parents first; `memory.high`;
//!   `cpuset.mems` narrowed children first. A parent's `cpuset.mems` that changes to a
//!   set that is neither wider nor narrower while a descendant's also changes is first
//!   widened to the union, then narrowed, so no child ever asks for a node its parent
//!   lacks.
//! * Files nodemem set before ([`Ownership`]) but no longer wants are restored:
//!   memory.min and memory.low to 0, memory.high to max, cpuset.mems to the value it had
//!   before nodemem or, when that was empty (inherit), to the parent's
//!   `cpuset.mems.effective`: the kernel refuses to empty the cpuset.mems of a cgroup
//!   with processes (ENOSPC), so "inherit" is given back as the parent's set. Files it
//!   never set are never touched.
//! * What a pass may write is recorded before it is written ([`intend`]): a process
//!   killed between a write and the record's save restarts on a record that already
//!   names the file. A desired file that already holds nodemem's value but is not
//!   recorded (an earlier agent wrote it and its record was lost) is claimed as well,
//!   so giving back still covers it.
//! * A desired cgroup that does not exist yet (the container has not started) is
//!   counted as missing and written once it appears.

use std::collections::{BTreeMap, BTreeSet};

use nodemem_cgroup::parse::{memory_value, range_list, MemoryValue};
use nodemem_model::node::DesiredCgroup;
use nodemem_model::values::cgroup::{
    CgroupValue, CPUSET_MEMS, MEMORY_HIGH, MEMORY_LOW, MEMORY_MIN,
};
use serde::{Deserialize, Serialize};

/// What nodemem set and what each file held before it did: cgroup path -> file -> the
/// value before nodemem's first write.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ownership {
    /// cgroup path -> file -> the value before nodemem's first write.
    pub files: BTreeMap<String, BTreeMap<String, String>>,
}

impl Ownership {
    /// Whether nodemem set `file` of cgroup `path`.
    pub fn owns(&self, path: &str, file: &str) -> bool {
        self.files.get(path).is_some_and(|f| f.contains_key(file))
    }

    /// How many files nodemem set.
    pub fn len(&self) -> usize {
        self.files.values().map(BTreeMap::len).sum()
    }

    /// Whether nodemem set no file.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    fn record(&mut self, path: &str, file: &str, before: &str) {
        self.files
            .entry(path.to_string())
            .or_default()
            .entry(file.to_string())
            .or_insert_with(|| before.to_string());
    }

    /// Claims every file `desired` manages that is not owned yet, its value before
    /// nodemem unknown (recorded empty): after the record of what nodemem owns was lost,
    /// what the current settings manage is re-derived so that giving back still
    /// covers it. Giving back does not depend on the value before for memory.min, .low
    /// and .high (0, 0, max); an unknown cpuset.mems is given back as the parent's set,
    /// as one that inherited. Files in `leave_alone` (left to the kubelet) are not
    /// claimed.
    pub fn claim_unknown(&mut self, desired: &[DesiredCgroup<'_>], leave_alone: &[&str]) {
        for d in desired {
            for (file, _) in d.managed() {
                if !leave_alone.contains(&file) {
                    self.record(d.path, file, "");
                }
            }
        }
    }

    /// Claims files the runtime set at creation from nodemem's values (NRI): the cgroup
    /// held the kernel's defaults before, and giving back restores them, although no
    /// write of nodemem's ever changed them.
    pub fn claim_set_at_creation(&mut self, path: &str, files: &[&str]) {
        for file in files {
            self.record(path, file, &default_value(file));
        }
    }

    fn release(&mut self, path: &str, file: &str) {
        if let Some(files) = self.files.get_mut(path) {
            files.remove(file);
            if files.is_empty() {
                self.files.remove(path);
            }
        }
    }

    /// Takes back what [`intend`] added (its save failed: nothing was written).
    pub fn forget(&mut self, added: &[(String, String)]) {
        for (path, file) in added {
            self.release(path, file);
        }
    }

    fn release_cgroup(&mut self, path: &str) {
        self.files.remove(path);
    }
}

/// One cgroup as read before planning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CgroupState {
    /// The directory does not exist.
    Missing,
    /// File -> its text (trimmed), or None when it could not be read.
    Present(BTreeMap<String, Option<String>>),
}

/// What the files hold now, for every cgroup the plan looks at.
pub type Observed = BTreeMap<String, CgroupState>;

/// The cgroups and files a plan needs read: every desired file and every owned one.
pub fn files_to_observe(
    desired: &[DesiredCgroup<'_>],
    owned: &Ownership,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for d in desired {
        out.entry(d.path.to_string())
            .or_default()
            .extend(d.managed().map(|(k, _)| k.to_string()));
    }
    for (path, files) in &owned.files {
        out.entry(path.clone())
            .or_default()
            .extend(files.keys().cloned());
        if files.contains_key(CPUSET_MEMS) {
            out.entry(parent_of(path).to_string())
                .or_default()
                .insert(CPUSET_MEMS_EFFECTIVE.to_string());
        }
    }
    out
}

/// The parent cgroup's path ("" for the root).
fn parent_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(parent, _)| parent)
}

const CPUSET_MEMS_EFFECTIVE: &str = "cpuset.mems.effective";

/// Why a write is planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum WriteKind {
    /// A value nodemem wants.
    Set,
    /// Giving back a file nodemem no longer manages.
    Restore,
}

/// One planned write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Write {
    /// The cgroup (relative to the cgroup root).
    pub cgroup: String,
    /// The interface file.
    pub file: String,
    /// The text read before planning; None when it could not be read.
    pub old: Option<String>,
    /// The text to write.
    pub new: String,
    /// Set or given back.
    pub kind: WriteKind,
}

/// The writes a pass needs, in kernel order, and the desired cgroups not there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// In the order the kernel needs (parents before children where it matters).
    pub writes: Vec<Write>,
    /// Desired cgroups that do not exist (yet).
    pub missing: Vec<String>,
    /// Owned files to forget without a write: their cgroup is gone, or they already
    /// hold the restore value.
    pub released: Vec<(String, String)>,
    /// Desired files that hold nodemem's value and are not owned: (path, file, the
    /// value recorded as before). memory.* record the kernel's default (giving back
    /// does not depend on it); cpuset.mems records what it holds, so that giving back
    /// leaves it as it is (it may be the runtime's, set from the kubelet's Memory
    /// Manager, which nodemem's prediction equals).
    pub claimed: Vec<(String, String, String)>,
}

/// The value the kernel would hold for `value` (memory.* rounded down to pages).
fn normalized_memory(value: MemoryValue, page_size: i64) -> MemoryValue {
    match value {
        MemoryValue::Bytes(b) if page_size > 0 => {
            let p = page_size as u64;
            MemoryValue::Bytes(b / p * p)
        }
        other => other,
    }
}

/// True when the file already holds what `want` asks for.
pub fn holds(file: &str, have: &str, want: &str, page_size: i64) -> bool {
    match file {
        MEMORY_MIN | MEMORY_LOW | MEMORY_HIGH => {
            match (memory_value(file, have), memory_value(file, want)) {
                (Ok(h), Ok(w)) => {
                    normalized_memory(h, page_size) == normalized_memory(w, page_size)
                }
                _ => false,
            }
        }
        CPUSET_MEMS => match (range_list(file, have), range_list(file, want)) {
            (Ok(h), Ok(w)) => h == w,
            _ => false,
        },
        _ => have.trim() == want.trim(),
    }
}

/// What a file nodemem stops managing goes back to; `parent_mems` is the parent's
/// `cpuset.mems.effective`, for a cpuset.mems that inherited before.
fn restore_value(file: &str, before: &str, parent_mems: Option<&str>) -> String {
    match file {
        MEMORY_MIN | MEMORY_LOW => "0".to_string(),
        MEMORY_HIGH => "max".to_string(),
        CPUSET_MEMS if before.trim().is_empty() => parent_mems.unwrap_or("").trim().to_string(),
        _ => before.trim().to_string(),
    }
}

fn render(value: &CgroupValue) -> String {
    value.render()
}

/// Plans the writes that take the node from `observed` to `desired`, giving back
/// what `owned` records and `desired` no longer asks for.
pub fn plan(
    desired: &[DesiredCgroup<'_>],
    observed: &Observed,
    owned: &Ownership,
    page_size: i64,
) -> Plan {
    plan_leaving(desired, observed, owned, page_size, &[])
}

/// [`plan`], leaving the files in `leave_alone` untouched (neither set nor restored):
/// files the node's kubelet enforces itself.
pub fn plan_leaving(
    desired: &[DesiredCgroup<'_>],
    observed: &Observed,
    owned: &Ownership,
    page_size: i64,
    leave_alone: &[&str],
) -> Plan {
    let mut out = Plan::default();
    let mut wanted: BTreeSet<(&str, &str)> = BTreeSet::new();
    for cgroup in desired {
        let files = match observed.get(cgroup.path) {
            Some(CgroupState::Present(files)) => files,
            _ => {
                out.missing.push(cgroup.path.to_string());
                // Still wanted: ownership of a cgroup that is only briefly gone is not
                // dropped here (released below only when nothing wants it).
                for (file, _) in cgroup.managed() {
                    wanted.insert((cgroup.path, file));
                }
                continue;
            }
        };
        for (file, value) in cgroup.managed().filter(|(f, _)| !leave_alone.contains(f)) {
            wanted.insert((cgroup.path, file));
            let want = render(value);
            let have = files.get(file).cloned().flatten();
            if let Some(h) = have.as_deref().filter(|h| holds(file, h, &want, page_size)) {
                if !owned.owns(cgroup.path, file) {
                    let before = match file {
                        CPUSET_MEMS => h.to_string(),
                        _ => default_value(file),
                    };
                    out.claimed
                        .push((cgroup.path.to_string(), file.to_string(), before));
                }
                continue;
            }
            out.writes.push(Write {
                cgroup: cgroup.path.to_string(),
                file: file.to_string(),
                old: have,
                new: want,
                kind: WriteKind::Set,
            });
        }
    }
    for (path, files) in &owned.files {
        for (file, before) in files {
            if wanted.contains(&(path.as_str(), file.as_str()))
                || leave_alone.contains(&file.as_str())
            {
                continue;
            }
            let present = match observed.get(path) {
                Some(CgroupState::Present(files)) => files,
                _ => {
                    out.released.push((path.clone(), file.clone()));
                    continue;
                }
            };
            let parent_mems = match observed.get(parent_of(path)) {
                Some(CgroupState::Present(files)) => {
                    files.get(CPUSET_MEMS_EFFECTIVE).cloned().flatten()
                }
                _ => None,
            };
            let want = restore_value(file, before, parent_mems.as_deref());
            let have = present.get(file).cloned().flatten();
            if have
                .as_deref()
                .is_some_and(|h| holds(file, h, &want, page_size))
            {
                out.released.push((path.clone(), file.clone()));
                continue;
            }
            out.writes.push(Write {
                cgroup: path.clone(),
                file: file.clone(),
                old: have,
                new: want,
                kind: WriteKind::Restore,
            });
        }
    }
    out.writes = order(out.writes, page_size);
    out
}

fn depth(path: &str) -> usize {
    if path.is_empty() {
        0
    } else {
        path.split('/').count()
    }
}

fn is_below(child: &str, parent: &str) -> bool {
    child.len() > parent.len()
        && child.starts_with(parent)
        && child.as_bytes()[parent.len()] == b'/'
}

/// A set of NUMA nodes, where an empty `cpuset.mems` (inherit) is wider than any.
#[derive(Clone, PartialEq, Eq)]
enum Mems {
    Inherit,
    Nodes(BTreeSet<u32>),
}

fn mems(text: Option<&str>) -> Option<Mems> {
    let set = range_list(CPUSET_MEMS, text?).ok()?;
    Some(if set.is_empty() {
        Mems::Inherit
    } else {
        Mems::Nodes(set)
    })
}

fn covers(wide: &Mems, narrow: &Mems) -> bool {
    match (wide, narrow) {
        (Mems::Inherit, _) => true,
        (Mems::Nodes(_), Mems::Inherit) => false,
        (Mems::Nodes(w), Mems::Nodes(n)) => n.is_subset(w),
    }
}

fn protection_bytes(text: Option<&str>, file: &str, page_size: i64) -> Option<u64> {
    match normalized_memory(memory_value(file, text?).ok()?, page_size) {
        MemoryValue::Bytes(b) => Some(b),
        MemoryValue::Max => Some(u64::MAX),
    }
}

/// Orders the writes in the five phases described at the top of this module.
fn order(writes: Vec<Write>, page_size: i64) -> Vec<Write> {
    let cpuset_paths: Vec<String> = writes
        .iter()
        .filter(|w| w.file == CPUSET_MEMS)
        .map(|w| w.cgroup.clone())
        .collect();
    let mut widen = Vec::new();
    let mut lower = Vec::new();
    let mut raise = Vec::new();
    let mut high = Vec::new();
    let mut narrow = Vec::new();
    for w in writes {
        match w.file.as_str() {
            CPUSET_MEMS => {
                let (old, new) = (mems(w.old.as_deref()), mems(Some(&w.new)));
                match (old, new) {
                    (Some(old), Some(new)) if covers(&new, &old) => widen.push(w),
                    (Some(old), Some(new)) if covers(&old, &new) => narrow.push(w),
                    (Some(Mems::Nodes(old)), Some(Mems::Nodes(new)))
                        if cpuset_paths.iter().any(|p| is_below(p, &w.cgroup)) =>
                    {
                        let union: BTreeSet<u32> = old.union(&new).copied().collect();
                        let union_text = nodemem_cgroup::parse::render_range_list(&union);
                        widen.push(Write {
                            new: union_text.clone(),
                            ..w.clone()
                        });
                        narrow.push(Write {
                            old: Some(union_text),
                            ..w
                        });
                    }
                    // Unknown old value: write it after the children are narrowed,
                    // as a narrowing.
                    _ => narrow.push(w),
                }
            }
            MEMORY_MIN | MEMORY_LOW => {
                let old = protection_bytes(w.old.as_deref(), &w.file, page_size);
                let new = protection_bytes(Some(&w.new), &w.file, page_size);
                match (old, new) {
                    (Some(o), Some(n)) if n < o => lower.push(w),
                    _ => raise.push(w),
                }
            }
            _ => high.push(w),
        }
    }
    // Stable sorts keep the input order (path order) within a depth.
    widen.sort_by_key(|w| depth(&w.cgroup));
    lower.sort_by_key(|w| std::cmp::Reverse(depth(&w.cgroup)));
    raise.sort_by_key(|w| depth(&w.cgroup));
    narrow.sort_by_key(|w| std::cmp::Reverse(depth(&w.cgroup)));
    let mut out = widen;
    out.extend(lower);
    out.extend(raise);
    out.extend(high);
    out.extend(narrow);
    out
}

/// Records, before any of `writes` is made, every file they set (with what it holds
/// now) and the plan's claims. Returns the files this added, which a write that then
/// fails gives up again ([`update_ownership`]).
pub fn intend(owned: &mut Ownership, plan: &Plan, writes: &[Write]) -> Vec<(String, String)> {
    let mut added = Vec::new();
    let mut record = |path: &str, file: &str, before: &str| {
        if !owned.owns(path, file) {
            owned.record(path, file, before);
            added.push((path.to_string(), file.to_string()));
        }
    };
    for (path, file, before) in &plan.claimed {
        record(path, file, before);
    }
    for w in writes.iter().filter(|w| w.kind == WriteKind::Set) {
        // The kernel's default stands in when the old value could not be read.
        let before = w.old.clone().unwrap_or_else(|| default_value(&w.file));
        record(&w.cgroup, &w.file, &before);
    }
    added
}

/// Ownership after a run: successful sets recorded with what the file held before,
/// successful restores and released files forgotten, vanished cgroups forgotten, and
/// files [`intend`] added whose write failed given up (the file still holds what it
/// held: nodemem never set it).
pub fn update_ownership(
    owned: &mut Ownership,
    plan: &Plan,
    applied: &[Write],
    vanished: &[Write],
    failed: &[&Write],
    intended: &[(String, String)],
) {
    for w in failed.iter().filter(|w| w.kind == WriteKind::Set) {
        if intended.iter().any(|(p, f)| *p == w.cgroup && *f == w.file) {
            owned.release(&w.cgroup, &w.file);
        }
    }
    for (path, file) in &plan.released {
        owned.release(path, file);
    }
    for w in applied {
        match w.kind {
            WriteKind::Set => {
                // The kernel's default stands in when the old value could not be read.
                let before = w.old.clone().unwrap_or_else(|| default_value(&w.file));
                owned.record(&w.cgroup, &w.file, &before);
            }
            WriteKind::Restore => owned.release(&w.cgroup, &w.file),
        }
    }
    for w in vanished {
        owned.release_cgroup(&w.cgroup);
    }
}

/// A fresh cgroup's value of a file nodemem sets.
pub fn default_value(file: &str) -> String {
    match file {
        MEMORY_HIGH => "max".to_string(),
        CPUSET_MEMS => String::new(),
        _ => "0".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemem_model::values::cgroup::CgroupValues;

    /// Leaked for the test's lifetime: a DesiredCgroup borrows its path and values.
    fn cgroup(path: &str, values: &[(&'static str, CgroupValue)]) -> DesiredCgroup<'static> {
        DesiredCgroup {
            path: Box::leak(path.to_string().into_boxed_str()),
            values: Box::leak(Box::new(
                values
                    .iter()
                    .map(|(f, v)| (*f, v.clone()))
                    .collect::<CgroupValues>(),
            )),
        }
    }

    fn present(files: &[(&str, &str)]) -> CgroupState {
        CgroupState::Present(
            files
                .iter()
                .map(|(f, v)| (f.to_string(), Some(v.to_string())))
                .collect(),
        )
    }

    fn mems(text: &str) -> CgroupValue {
        CgroupValue::Text(text.to_string())
    }

    fn sequence(p: &Plan) -> Vec<String> {
        p.writes
            .iter()
            .map(|w| format!("{} {} {}", w.cgroup, w.file, w.new))
            .collect()
    }

    #[test]
    fn values_equal_after_page_rounding_or_as_sets_are_not_written() {
        let desired = [cgroup(
            "a",
            &[
                (MEMORY_MIN, CgroupValue::Bytes(100_000_000)),
                (MEMORY_HIGH, CgroupValue::max()),
                (CPUSET_MEMS, mems("0,1")),
            ],
        )];
        let observed = Observed::from([(
            "a".to_string(),
            present(&[
                (MEMORY_MIN, "99999744"),
                (MEMORY_HIGH, "max"),
                (CPUSET_MEMS, "0-1"),
            ]),
        )]);
        assert!(plan(&desired, &observed, &Ownership::default(), 4096)
            .writes
            .is_empty());
        assert!(holds(MEMORY_MIN, "100000000", "100000000", 4096));
        assert!(
            !holds(MEMORY_MIN, "garbage", "0", 4096),
            "unreadable values are rewritten"
        );
    }

    #[test]
    fn values_set_at_creation_are_given_back_though_never_written() {
        // The runtime created the container with nodemem's values (NRI): the pass finds
        // them in place and writes nothing.
        let desired = [cgroup(
            "pod/c",
            &[
                (MEMORY_HIGH, CgroupValue::Bytes(1 << 20)),
                (MEMORY_LOW, CgroupValue::Bytes(4096)),
            ],
        )];
        let observed = Observed::from([(
            "pod/c".to_string(),
            present(&[(MEMORY_HIGH, "1048576"), (MEMORY_LOW, "4096")]),
        )]);
        let mut owned = Ownership::default();
        assert!(plan(&desired, &observed, &owned, 4096).writes.is_empty());
        // Unclaimed, leaving would keep them for good; claimed, they go back to the
        // kernel's defaults.
        assert!(plan(&[], &observed, &owned, 4096).writes.is_empty());
        owned.claim_set_at_creation("pod/c", &[MEMORY_HIGH, MEMORY_LOW]);
        let leaving = plan(&[], &observed, &owned, 4096);
        assert_eq!(
            sequence(&leaving),
            vec!["pod/c memory.low 0", "pod/c memory.high max"]
        );
    }

    #[test]
    fn cpuset_mems_widens_parents_first_and_narrows_children_first() {
        // Parent p goes 0 -> 0-1 (widen), child c goes "" -> 1 (narrow from inherit).
        let desired = [
            cgroup("p", &[(CPUSET_MEMS, mems("0-1"))]),
            cgroup("p/c", &[(CPUSET_MEMS, mems("1"))]),
        ];
        let observed = Observed::from([
            ("p".to_string(), present(&[(CPUSET_MEMS, "0")])),
            ("p/c".to_string(), present(&[(CPUSET_MEMS, "")])),
        ]);
        let p = plan(&desired, &observed, &Ownership::default(), 4096);
        assert_eq!(sequence(&p), vec!["p cpuset.mems 0-1", "p/c cpuset.mems 1"]);

        // Back again: child first, then the parent narrows.
        let desired = [
            cgroup("p", &[(CPUSET_MEMS, mems("0"))]),
            cgroup("p/c", &[(CPUSET_MEMS, mems("0"))]),
        ];
        let observed = Observed::from([
            ("p".to_string(), present(&[(CPUSET_MEMS, "0-1")])),
            ("p/c".to_string(), present(&[(CPUSET_MEMS, "1")])),
        ]);
        let p = plan(&desired, &observed, &Ownership::default(), 4096);
        assert_eq!(sequence(&p), vec!["p/c cpuset.mems 0", "p cpuset.mems 0"]);
    }

    #[test]
    fn a_parent_moving_between_disjoint_sets_passes_through_the_union() {
        // p: 0 -> 1 with child c: 0 -> 1. Writing p=1 first would strand c on 0.
        let desired = [
            cgroup("p", &[(CPUSET_MEMS, mems("1"))]),
            cgroup("p/c", &[(CPUSET_MEMS, mems("1"))]),
        ];
        let observed = Observed::from([
            ("p".to_string(), present(&[(CPUSET_MEMS, "0")])),
            ("p/c".to_string(), present(&[(CPUSET_MEMS, "0")])),
        ]);
        let p = plan(&desired, &observed, &Ownership::default(), 4096);
        assert_eq!(
            sequence(&p),
            vec!["p cpuset.mems 0-1", "p/c cpuset.mems 1", "p cpuset.mems 1"]
        );
    }

    #[test]
    fn files_the_kubelet_enforces_are_left_alone() {
        let desired = [cgroup(
            "a",
            &[
                (MEMORY_MIN, CgroupValue::Bytes(8192)),
                (CPUSET_MEMS, mems("1")),
            ],
        )];
        let observed = Observed::from([(
            "a".to_string(),
            present(&[(MEMORY_MIN, "0"), (CPUSET_MEMS, ""), (MEMORY_HIGH, "4096")]),
        )]);
        let mut owned = Ownership::default();
        owned.record("a", MEMORY_HIGH, "max");
        let p = plan_leaving(
            &desired,
            &observed,
            &owned,
            4096,
            &[MEMORY_MIN, MEMORY_HIGH],
        );
        assert_eq!(
            sequence(&p),
            vec!["a cpuset.mems 1"],
            "neither set nor restored"
        );
    }

    #[test]
    fn protection_mixed_moves_lower_before_raise() {
        // b's protection falls, a's rises: all lowering happens before any raising.
        let desired = [
            cgroup("k", &[(MEMORY_MIN, CgroupValue::Bytes(8192))]),
            cgroup("k/a", &[(MEMORY_MIN, CgroupValue::Bytes(8192))]),
            cgroup("k/b", &[(MEMORY_MIN, CgroupValue::Bytes(0))]),
        ];
        let observed = Observed::from([
            ("k".to_string(), present(&[(MEMORY_MIN, "8192")])),
            ("k/a".to_string(), present(&[(MEMORY_MIN, "0")])),
            ("k/b".to_string(), present(&[(MEMORY_MIN, "8192")])),
        ]);
        let p = plan(&desired, &observed, &Ownership::default(), 4096);
        assert_eq!(
            sequence(&p),
            vec!["k/b memory.min 0", "k/a memory.min 8192"]
        );
    }

    #[test]
    fn owned_files_are_restored_or_released_and_unowned_ones_left_alone() {
        let mut owned = Ownership::default();
        owned.record("gone", MEMORY_MIN, "0");
        owned.record("k", MEMORY_HIGH, "max");
        owned.record("k", CPUSET_MEMS, "");
        owned.record("k", MEMORY_LOW, "0");
        let observed = Observed::from([
            ("gone".to_string(), CgroupState::Missing),
            (String::new(), present(&[("cpuset.mems.effective", "0-1")])),
            (
                "k".to_string(),
                present(&[
                    (MEMORY_HIGH, "4096"),
                    (CPUSET_MEMS, "1"),
                    (MEMORY_LOW, "0"),
                    (MEMORY_MIN, "4096"),
                ]),
            ),
        ]);
        let p = plan(&[], &observed, &owned, 4096);
        // Back to the parent's set (a populated cgroup cannot be emptied): a widening,
        // so first.
        assert_eq!(sequence(&p), vec!["k cpuset.mems 0-1", "k memory.high max"]);
        let wanted = files_to_observe(&[], &owned);
        assert!(wanted[""].contains("cpuset.mems.effective"), "{wanted:?}");
        assert!(p.writes.iter().all(|w| w.kind == WriteKind::Restore));
        assert_eq!(
            p.released,
            vec![
                ("gone".to_string(), MEMORY_MIN.to_string()),
                ("k".to_string(), MEMORY_LOW.to_string())
            ]
        );
        // memory.min on k was never nodemem's: untouched.
        assert!(p.writes.iter().all(|w| w.file != MEMORY_MIN));
        let applied = p.writes.clone();
        update_ownership(&mut owned, &p, &applied, &[], &[], &[]);
        assert!(owned.is_empty());
    }

    #[test]
    fn what_a_pass_may_write_is_recorded_before_and_a_failed_write_given_up_after() {
        let desired = [
            cgroup("k", &[(MEMORY_MIN, CgroupValue::Bytes(8192))]),
            cgroup(
                "k/a",
                &[
                    (MEMORY_LOW, CgroupValue::Bytes(4096)),
                    (CPUSET_MEMS, CgroupValue::Text("1".into())),
                ],
            ),
            cgroup("k/b", &[(MEMORY_HIGH, CgroupValue::Bytes(65536))]),
        ];
        // k already holds nodemem's memory.min (an agent killed before it saved its
        // record wrote it), k/a's cpuset.mems holds nodemem's set (the runtime's, from
        // the kubelet's Memory Manager), the rest differ.
        let observed = Observed::from([
            ("k".to_string(), present(&[(MEMORY_MIN, "8192")])),
            (
                "k/a".to_string(),
                present(&[(MEMORY_LOW, "0"), (CPUSET_MEMS, "1")]),
            ),
            ("k/b".to_string(), present(&[(MEMORY_HIGH, "max")])),
        ]);
        let mut owned = Ownership::default();
        owned.record("k/b", MEMORY_HIGH, "max");
        let p = plan(&desired, &observed, &owned, 4096);
        assert_eq!(
            sequence(&p),
            vec!["k/a memory.low 4096", "k/b memory.high 65536"]
        );
        assert_eq!(
            p.claimed,
            vec![
                ("k".into(), MEMORY_MIN.into(), "0".into()),
                ("k/a".into(), CPUSET_MEMS.into(), "1".into()),
            ]
        );
        let added = intend(&mut owned, &p, &p.writes);
        // Everything the pass may write, and the claims, are owned before any write;
        // k/b was owned already.
        assert_eq!(
            added,
            vec![
                ("k".to_string(), MEMORY_MIN.to_string()),
                ("k/a".to_string(), CPUSET_MEMS.to_string()),
                ("k/a".to_string(), MEMORY_LOW.to_string()),
            ]
        );
        assert_eq!(owned.len(), 4);
        // k/a's memory.low failed, k/b's memory.high too: k/a's is given up (nodemem
        // never set it), k/b's stays nodemem's (it was before this pass).
        let failed: Vec<&Write> = p.writes.iter().collect();
        update_ownership(&mut owned, &p, &[], &[], &failed, &added);
        assert!(!owned.owns("k/a", MEMORY_LOW));
        assert!(owned.owns("k/b", MEMORY_HIGH));
        assert!(owned.owns("k", MEMORY_MIN) && owned.owns("k/a", CPUSET_MEMS));
        // Giving back: memory.min to 0; the claimed cpuset.mems is left as it is.
        let leaving = plan(&[], &observed, &owned, 4096);
        assert_eq!(sequence(&leaving), vec!["k memory.min 0"]);
        assert!(leaving
            .released
            .contains(&("k/a".to_string(), CPUSET_MEMS.to_string())));
    }

    #[test]
    fn a_lost_record_is_rederived_from_what_the_settings_manage_and_still_gives_back() {
        // The node holds nodemem's values already, so a plan writes nothing and would
        // record nothing: without the claim, giving back would leave them for good.
        let desired = [
            cgroup("k", &[(MEMORY_MIN, CgroupValue::Bytes(8192))]),
            cgroup(
                "k/a",
                &[
                    (MEMORY_LOW, CgroupValue::Bytes(4096)),
                    (MEMORY_HIGH, CgroupValue::Bytes(65536)),
                    (CPUSET_MEMS, mems("1")),
                ],
            ),
        ];
        let mut owned = Ownership::default();
        owned.claim_unknown(&desired, &[MEMORY_HIGH]);
        assert!(owned.owns("k", MEMORY_MIN) && owned.owns("k/a", MEMORY_LOW));
        assert!(
            !owned.owns("k/a", MEMORY_HIGH),
            "left to the kubelet: not claimed"
        );
        // What it held before is unknown (empty); an existing claim is kept.
        owned.claim_unknown(&desired, &[]);
        assert_eq!(owned.files["k/a"][CPUSET_MEMS], "");
        let observed = Observed::from([
            (String::new(), present(&[("cpuset.mems.effective", "0-1")])),
            ("k".to_string(), present(&[(MEMORY_MIN, "8192")])),
            (
                "k/a".to_string(),
                present(&[
                    (MEMORY_LOW, "4096"),
                    (MEMORY_HIGH, "65536"),
                    (CPUSET_MEMS, "1"),
                ]),
            ),
        ]);
        assert!(plan(&desired, &observed, &owned, 4096).writes.is_empty());
        // Given back: memory.* to the kernel's defaults, cpuset.mems to the parent's.
        let observed = Observed::from([
            ("".to_string(), present(&[("cpuset.mems.effective", "0-1")])),
            (
                "k".to_string(),
                present(&[(MEMORY_MIN, "8192"), ("cpuset.mems.effective", "0-1")]),
            ),
            (
                "k/a".to_string(),
                present(&[
                    (MEMORY_LOW, "4096"),
                    (MEMORY_HIGH, "65536"),
                    (CPUSET_MEMS, "1"),
                ]),
            ),
        ]);
        let p = plan(&[], &observed, &owned, 4096);
        let mut back = sequence(&p);
        back.sort();
        assert_eq!(
            back,
            vec![
                "k memory.min 0",
                "k/a cpuset.mems 0-1",
                "k/a memory.high max",
                "k/a memory.low 0"
            ]
        );
    }
}
