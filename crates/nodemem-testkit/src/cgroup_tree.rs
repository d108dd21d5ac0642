//! A per-node temporary cgroup v2 tree that looks like the kernel's to the agent: the
//! real interface file names with kernel defaults (`0`, `max`, empty `cpuset.mems`,
//! zeroed `memory.events`), the kubepods hierarchy of the chosen cgroup driver, and
//! pod/container directories created and removed by the fake kubelet.
//!
//! It is a plain directory: nothing enforces limits. Enforcement is tested in the VM
//! tier against the real kernel.

use std::path::{Path, PathBuf};

use nodemem_model::pod::qos::QosClass;
use nodemem_model::values::cgroup_layout::{
    container_dir, kubepods, pod_dir, qos_dir, CgroupDriver, ContainerId, ContainerRuntime,
};

use crate::Error;

/// Controllers the VM's kernel offers at the root (Debian 6.1, cgroup v2).
pub const CONTROLLERS: &str = "cpuset cpu io memory hugetlb pids";

/// Interface files of a non-root cgroup with the kernel's initial values.
const DEFAULT_FILES: &[(&str, &str)] = &[
    ("cgroup.controllers", CONTROLLERS),
    ("cgroup.subtree_control", ""),
    ("cgroup.procs", ""),
    ("cgroup.events", "populated 0\nfrozen 0\n"),
    ("memory.min", "0"),
    ("memory.low", "0"),
    ("memory.high", "max"),
    ("memory.max", "max"),
    ("memory.current", "0"),
    ("memory.peak", "0"),
    ("memory.swap.max", "max"),
    ("memory.oom.group", "0"),
    (
        "memory.events",
        "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
    ),
    (
        "memory.pressure",
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
    ),
    ("memory.stat", "anon 0\nfile 0\nkernel 0\nshmem 0\n"),
    // Write-only in the kernel (5.19+); a file here so that writes land somewhere.
    ("memory.reclaim", ""),
    ("cpuset.mems", ""),
];

pub struct CgroupTree {
    root: PathBuf,
    driver: CgroupDriver,
    /// `cpuset.mems.effective` everywhere: all NUMA nodes of the simulated node.
    mems: String,
    /// New cgroups are prepared here (outside the tree, same file system) and renamed
    /// into place: a mkdir on cgroupfs shows the directory with all its files at once,
    /// and an agent reacting to the new directory must not find it half made.
    staging: PathBuf,
    staged: std::sync::atomic::AtomicU64,
    _dir: Option<tempfile::TempDir>,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::Setup(format!("{}: {e}", path.display()))
}

impl CgroupTree {
    /// A fresh tree in a temporary directory (removed on drop) for a node with
    /// `numa_nodes` NUMA nodes.
    pub fn new(driver: CgroupDriver, numa_nodes: usize) -> Result<Self, Error> {
        let dir = tempfile::Builder::new()
            .prefix("nodemem-cgroup-")
            .tempdir()
            .map_err(|e| Error::Setup(format!("temporary cgroup tree: {e}")))?;
        let root = dir.path().join("cgroup");
        std::fs::create_dir(&root).map_err(io(&root))?;
        let mut tree = Self::at(&root, driver, numa_nodes)?;
        tree._dir = Some(dir);
        Ok(tree)
    }

    /// A tree at `root` (kept on drop).
    pub fn at(root: &Path, driver: CgroupDriver, numa_nodes: usize) -> Result<Self, Error> {
        let mems = match numa_nodes {
            0 | 1 => "0".to_string(),
            n => format!("0-{}", n - 1),
        };
        let name = root.file_name().unwrap_or_default().to_string_lossy();
        let staging = root.with_file_name(format!(".{name}.staging"));
        std::fs::create_dir_all(&staging).map_err(io(&staging))?;
        let tree = CgroupTree {
            root: root.to_path_buf(),
            driver,
            mems,
            staging,
            staged: Default::default(),
            _dir: None,
        };
        // The root cgroup has no memory.min/low/high/max files in cgroup v2.
        for (file, value) in [
            ("cgroup.controllers", CONTROLLERS),
            ("cgroup.subtree_control", CONTROLLERS),
            ("cgroup.procs", ""),
            ("cpuset.mems.effective", tree.mems.as_str()),
            (
                "memory.pressure",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
            ),
        ] {
            let p = root.join(file);
            std::fs::write(&p, value).map_err(io(&p))?;
        }
        for dir in [
            kubepods(driver),
            qos_dir(driver, QosClass::Burstable),
            qos_dir(driver, QosClass::BestEffort),
        ] {
            tree.create_cgroup(dir)?;
        }
        Ok(tree)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn driver(&self) -> CgroupDriver {
        self.driver
    }

    /// Creates one cgroup directory (parents must exist, as with mkdir in cgroupfs)
    /// with every interface file at its kernel default.
    pub fn create_cgroup(&self, relative: &str) -> Result<PathBuf, Error> {
        let dir = self.root.join(relative);
        if dir.is_dir() {
            return Ok(dir);
        }
        let n = self
            .staged
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = self.staging.join(n.to_string());
        std::fs::create_dir(&tmp).map_err(io(&tmp))?;
        for (file, value) in DEFAULT_FILES {
            let p = tmp.join(file);
            std::fs::write(&p, value).map_err(io(&p))?;
        }
        let p = tmp.join("cpuset.mems.effective");
        std::fs::write(&p, &self.mems).map_err(io(&p))?;
        // Parents must exist, as with mkdir in cgroupfs.
        std::fs::rename(&tmp, &dir).map_err(io(&dir))?;
        Ok(dir)
    }

    /// Creates the pod cgroup and one cgroup per containerd container ID; returns the
    /// pod's path.
    pub fn add_pod(
        &self,
        qos: QosClass,
        uid: &str,
        container_ids: &[String],
    ) -> Result<PathBuf, Error> {
        let ids: Vec<ContainerId> = container_ids
            .iter()
            .map(|id| ContainerId {
                runtime: ContainerRuntime::Containerd,
                id: id.clone(),
            })
            .collect();
        self.add_pod_with_ids(qos, uid, &ids)
    }

    /// Creates the pod cgroup and one cgroup per container of any runtime.
    pub fn add_pod_with_ids(
        &self,
        qos: QosClass,
        uid: &str,
        container_ids: &[ContainerId],
    ) -> Result<PathBuf, Error> {
        let pod = self.create_cgroup(&pod_dir(self.driver, qos, uid))?;
        for id in container_ids {
            self.create_cgroup(&container_dir(self.driver, qos, uid, id))?;
        }
        Ok(pod)
    }

    /// Removes a pod cgroup with its containers (the runtime does this on teardown).
    pub fn remove_pod(&self, qos: QosClass, uid: &str) -> Result<(), Error> {
        let dir = self.root.join(pod_dir(self.driver, qos, uid));
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(&dir)(e)),
        }
    }

    /// Sets what the kernel reports of a cgroup's memory use: memory.current, a
    /// memory.stat whose `inactive_file` (page cache the kernel reclaims cheaply) is
    /// `inactive_file`, so the working set is the difference, and memory.peak raised
    /// to `current` when it was lower (it only grows, as the kernel's).
    pub fn set_usage(&self, relative: &str, current: i64, inactive_file: i64) -> Result<(), Error> {
        let dir = self.root.join(relative);
        let anon = current - inactive_file;
        let stat = format!(
            "anon {anon}\nfile {inactive_file}\nkernel 0\nshmem 0\ninactive_anon 0\nactive_anon {anon}\ninactive_file {inactive_file}\nactive_file 0\nunevictable 0\nworkingset_refault_anon 0\nworkingset_refault_file 0\n"
        );
        let peak = dir.join("memory.peak");
        let old_peak: i64 = std::fs::read_to_string(&peak)
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or(0);
        for (file, value) in [
            ("memory.stat", stat),
            ("memory.current", current.to_string()),
            ("memory.peak", old_peak.max(current).to_string()),
        ] {
            let p = dir.join(file);
            std::fs::write(&p, value).map_err(io(&p))?;
        }
        Ok(())
    }

    /// Reads an interface file of a cgroup (relative path), trimmed.
    pub fn read(&self, relative: &str, file: &str) -> Result<String, Error> {
        let p = self.root.join(relative).join(file);
        std::fs::read_to_string(&p)
            .map(|s| s.trim_end().to_string())
            .map_err(io(&p))
    }

    /// Every file of the tree (path relative to the root) and what it holds: a whole
    /// tree compared before and after, so that no write anywhere goes unseen.
    pub fn files(&self) -> Result<std::collections::BTreeMap<PathBuf, String>, Error> {
        let mut out = std::collections::BTreeMap::new();
        let mut dirs = vec![self.root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
                let path = entry.map_err(io(&dir))?.path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    let text = std::fs::read_to_string(&path).map_err(io(&path))?;
                    let relative = path.strip_prefix(&self.root).unwrap_or(&path);
                    out.insert(relative.to_path_buf(), text);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemd_tree_has_kernel_defaults_and_pod_dirs() {
        let t = CgroupTree::new(CgroupDriver::Systemd, 2).unwrap();
        assert_eq!(t.read("", "cpuset.mems.effective").unwrap(), "0-1");
        assert!(
            !t.root().join("memory.min").exists(),
            "the root has no memory.min"
        );
        let qos = "kubepods.slice/kubepods-burstable.slice";
        assert_eq!(t.read(qos, "memory.high").unwrap(), "max");
        assert_eq!(t.read(qos, "memory.min").unwrap(), "0");
        let pod = t
            .add_pod(QosClass::Burstable, "a-b", &["c1".into(), "c2".into()])
            .unwrap();
        assert!(pod.ends_with("kubepods-burstable-poda_b.slice"));
        let c1 = format!("{qos}/kubepods-burstable-poda_b.slice/cri-containerd-c1.scope");
        assert_eq!(
            t.read(&c1, "memory.events").unwrap().lines().nth(1),
            Some("high 0")
        );
        assert_eq!(t.read(&c1, "cpuset.mems").unwrap(), "");
        assert_eq!(t.read(&c1, "cpuset.mems.effective").unwrap(), "0-1");
        t.remove_pod(QosClass::Burstable, "a-b").unwrap();
        assert!(!pod.exists());
        // Removing twice is not an error (the runtime may race the kubelet).
        t.remove_pod(QosClass::Burstable, "a-b").unwrap();
    }

    #[test]
    fn cgroupfs_tree_and_missing_parents() {
        let t = CgroupTree::new(CgroupDriver::Cgroupfs, 1).unwrap();
        t.add_pod(QosClass::Guaranteed, "u", &["c".into()]).unwrap();
        assert_eq!(t.read("kubepods/podu/c", "memory.max").unwrap(), "max");
        assert_eq!(
            t.read("kubepods/podu/c", "cpuset.mems.effective").unwrap(),
            "0"
        );
        // Like mkdir in cgroupfs, a cgroup whose parent is missing cannot be created.
        let err = t.create_cgroup("kubepods/nope/child").unwrap_err();
        assert!(err.to_string().contains("kubepods/nope/child"), "{err}");
    }
}
