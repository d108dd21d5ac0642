//! Which cgroup of the node the agent itself runs in, seen through the host's mount.
//!
//! A container on cgroup v2 gets a cgroup namespace of its own (containerd does so for
//! every non-privileged container), rooted at the container's cgroup, and systemd mounts
//! cgroup2 with `nsdelegate`: the kernel then refuses, with EPERM, writes to the control
//! files of a cgroup namespace's root from inside that namespace
//! (kernel/cgroup/cgroup.c, `cgroup_file_write`). The agent reaches every cgroup through
//! the host's mount, its own container's included, so it must know which one is its
//! own and leave it alone. Its own mount (`/sys/fs/cgroup` in the container) shows that
//! namespace root: the same kernfs node, so the same device and inode as the container's
//! directory under the host's mount.

use std::collections::VecDeque;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// How deep pods' containers sit below the cgroup root (`kubepods.slice/
/// kubepods-burstable.slice/<pod>.slice/<container>.scope`).
const MAX_DEPTH: usize = 4;

/// The cgroup under `root` (relative, `""` for the root itself) that `mount` shows, or
/// None. Searched in the kubepods subtrees only, `MAX_DEPTH` levels deep.
pub fn cgroup_shown_at(root: &Path, mount: &Path) -> Option<String> {
    let wanted = std::fs::metadata(mount).ok()?;
    let same = |m: &std::fs::Metadata| m.dev() == wanted.dev() && m.ino() == wanted.ino();
    if std::fs::metadata(root).is_ok_and(|m| same(&m)) {
        return Some(String::new());
    }
    let mut queue: VecDeque<(std::path::PathBuf, String, usize)> = VecDeque::new();
    for entry in std::fs::read_dir(root).ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with("kubepods") {
            queue.push_back((entry.path(), name, 1));
        }
    }
    while let Some((path, relative, depth)) = queue.pop_front() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_dir() {
            continue;
        }
        if same(&meta) {
            return Some(relative);
        }
        if depth >= MAX_DEPTH {
            continue;
        }
        for entry in std::fs::read_dir(&path).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                let name = entry.file_name().to_string_lossy().to_string();
                queue.push_back((entry.path(), format!("{relative}/{name}"), depth + 1));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_directory_a_mount_shows_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        let scope = root
            .path()
            .join("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-a.scope");
        std::fs::create_dir_all(&scope).unwrap();
        std::fs::create_dir_all(root.path().join("system.slice/x.service")).unwrap();
        assert_eq!(
            cgroup_shown_at(root.path(), &scope).as_deref(),
            Some("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-a.scope")
        );
        assert_eq!(
            cgroup_shown_at(root.path(), root.path()).as_deref(),
            Some("")
        );
        // Outside the kubepods subtrees, or not there at all: not found.
        assert_eq!(
            cgroup_shown_at(root.path(), &root.path().join("system.slice/x.service")),
            None
        );
        let elsewhere = tempfile::tempdir().unwrap();
        assert_eq!(cgroup_shown_at(root.path(), elsewhere.path()), None);
        assert_eq!(
            cgroup_shown_at(root.path(), &root.path().join("missing")),
            None
        );
    }
}
