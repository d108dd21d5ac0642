//! New cgroup directories as they appear: inotify on the kubepods tree with a narrow
//! mask (directories created, deleted or moved; cgroupfs emits IN_CREATE for mkdir),
//! a watch added for each new directory, and that directory rescanned at once, since
//! children created before its watch existed produce no event.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

use crate::path::CgroupPath;

/// A change under the watched tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeChange {
    Appeared(CgroupPath),
    Gone(CgroupPath),
}

pub struct TreeWatcher {
    inotify: Inotify,
    root: PathBuf,
    dirs: HashMap<WatchDescriptor, CgroupPath>,
    buffer: Vec<u8>,
}

fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::ONLYDIR
}

impl TreeWatcher {
    /// Watches `top` (under the cgroup root `root`) and every directory below it.
    pub fn new(root: &Path, top: &CgroupPath) -> io::Result<Self> {
        let mut w = TreeWatcher {
            inotify: Inotify::init()?,
            root: root.to_path_buf(),
            dirs: HashMap::new(),
            buffer: vec![0; 64 * 1024],
        };
        let mut found = Vec::new();
        w.watch_tree(top, &mut found)?;
        Ok(w)
    }

    /// Directories watched.
    pub fn len(&self) -> usize {
        self.dirs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }

    fn full(&self, p: &CgroupPath) -> PathBuf {
        if p.as_str().is_empty() {
            self.root.clone()
        } else {
            self.root.join(p.as_str())
        }
    }

    /// Adds a watch on `dir` and every directory below it, reporting each in `found`.
    fn watch_tree(&mut self, dir: &CgroupPath, found: &mut Vec<CgroupPath>) -> io::Result<()> {
        let path = self.full(dir);
        let wd = match self.inotify.watches().add(&path, mask()) {
            Ok(wd) => wd,
            // Gone again before the watch: nothing to cover.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        self.dirs.insert(wd, dir.clone());
        let Ok(entries) = std::fs::read_dir(&path) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                if let Some(child) = child_of(dir, &entry.file_name()) {
                    found.push(child.clone());
                    self.watch_tree(&child, found)?;
                }
            }
        }
        Ok(())
    }

    /// Blocks until something changes; every directory that appeared (including those
    /// found by rescanning a new directory) and every one that went away.
    pub fn wait(&mut self) -> io::Result<Vec<TreeChange>> {
        let mut raw = Vec::new();
        {
            let events = self.inotify.read_events_blocking(&mut self.buffer)?;
            for e in events {
                raw.push((e.wd.clone(), e.mask, e.name.map(|n| n.to_os_string())));
            }
        }
        let mut changes = Vec::new();
        for (wd, mask, name) in raw {
            if mask.contains(EventMask::IGNORED) {
                self.dirs.remove(&wd);
                continue;
            }
            if !mask.contains(EventMask::ISDIR) {
                continue;
            }
            let (Some(parent), Some(name)) = (self.dirs.get(&wd).cloned(), name) else {
                continue;
            };
            let Some(child) = child_of(&parent, &name) else {
                continue;
            };
            if mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
                changes.push(TreeChange::Appeared(child.clone()));
                let mut found = Vec::new();
                self.watch_tree(&child, &mut found)?;
                changes.extend(found.into_iter().map(TreeChange::Appeared));
            } else if mask.intersects(EventMask::DELETE | EventMask::MOVED_FROM) {
                changes.push(TreeChange::Gone(child));
            }
        }
        Ok(changes)
    }
}

/// `parent/name` when `name` is a safe component.
fn child_of(parent: &CgroupPath, name: &OsStr) -> Option<CgroupPath> {
    let name = name.to_str()?;
    let joined = if parent.as_str().is_empty() {
        name.to_string()
    } else {
        format!("{}/{name}", parent.as_str())
    };
    CgroupPath::new(&joined).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_directories_and_their_early_children_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("kubepods/burstable")).unwrap();
        let top = CgroupPath::new("kubepods").unwrap();
        let mut w = TreeWatcher::new(dir.path(), &top).unwrap();
        assert_eq!(w.len(), 2);
        // A pod with its container created in one go: the container may exist before
        // the pod directory's watch does; the rescan finds it.
        std::fs::create_dir_all(dir.path().join("kubepods/burstable/pod1/c1")).unwrap();
        // Files are not directories: no event.
        std::fs::write(dir.path().join("kubepods/burstable/pod1/memory.min"), "0").unwrap();
        let mut seen = Vec::new();
        while !seen.contains(&TreeChange::Appeared(
            CgroupPath::new("kubepods/burstable/pod1/c1").unwrap(),
        )) {
            seen.extend(w.wait().unwrap());
        }
        assert!(seen.contains(&TreeChange::Appeared(
            CgroupPath::new("kubepods/burstable/pod1").unwrap()
        )));
        assert!(
            seen.iter().all(|c| matches!(c, TreeChange::Appeared(_))),
            "{seen:?}"
        );
        // A container created later is seen through the pod's own watch.
        std::fs::create_dir(dir.path().join("kubepods/burstable/pod1/c2")).unwrap();
        assert_eq!(
            w.wait().unwrap(),
            vec![TreeChange::Appeared(
                CgroupPath::new("kubepods/burstable/pod1/c2").unwrap()
            )]
        );
        std::fs::remove_dir(dir.path().join("kubepods/burstable/pod1/c2")).unwrap();
        assert!(w.wait().unwrap().contains(&TreeChange::Gone(
            CgroupPath::new("kubepods/burstable/pod1/c2").unwrap()
        )));
    }
}
