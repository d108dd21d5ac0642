//! What the node is: kernel version, cgroup v2 with its controllers at kubepods, the
//! cgroup driver, the base page size and the NUMA nodes. Read from the injected roots.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use nodemem_model::numa::sysfs::{node_capacity, SysfsError};
use nodemem_model::numa::NumaTopology;
use nodemem_model::values::cgroup_layout::{kubepods, CgroupDriver};

use crate::fs::CgroupFs;
use crate::parse::{controllers, ParseError};
use crate::path::CgroupPath;
use crate::roots::Roots;

/// What discovery found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discovery {
    /// `/proc/sys/kernel/osrelease`.
    pub kernel_version: String,
    pub cgroup_driver: CgroupDriver,
    /// Controllers available at kubepods (`<kubepods>/cgroup.controllers`).
    pub kubepods_controllers: BTreeSet<String>,
    /// Base page size (sysconf), which memory.* values are rounded down to.
    pub page_size: i64,
    /// NUMA nodes from sysfs; None when the kernel shows none.
    pub topology: Option<NumaTopology>,
}

impl Discovery {
    pub fn has_controller(&self, name: &str) -> bool {
        self.kubepods_controllers.contains(name)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("{}: not a cgroup v2 hierarchy (no cgroup.controllers); nodemem needs cgroup v2", .0.display())]
    NotCgroupV2(PathBuf),
    #[error("{}: no kubepods.slice or kubepods cgroup; is the kubelet running with cgroupsPerQOS?", .0.display())]
    NoKubepods(PathBuf),
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Cgroup(#[from] crate::fs::CgroupError),
    #[error(transparent)]
    Parse(#[from] ParseError),
    #[error("{}: {source}", .path.display())]
    Sysfs { path: PathBuf, source: SysfsError },
    #[error("cannot read the base page size (sysconf)")]
    PageSize,
}

fn read(path: &Path) -> Result<String, DiscoveryError> {
    std::fs::read_to_string(path).map_err(|source| DiscoveryError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The driver from the tree: `kubepods.slice` (systemd) or `kubepods` (cgroupfs).
pub fn detect_driver(fs: &CgroupFs) -> Option<CgroupDriver> {
    [CgroupDriver::Systemd, CgroupDriver::Cgroupfs]
        .into_iter()
        .find(|d| fs.root().join(kubepods(*d)).is_dir())
}

/// The base page size from the kernel, not a constant (arm64 nodes run 16K and 64K).
pub fn page_size() -> Result<i64, DiscoveryError> {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        Ok(size as i64)
    } else {
        Err(DiscoveryError::PageSize)
    }
}

/// NUMA nodes with `memory` and hugepages per size from
/// `<sys>/devices/system/node/node<N>/{meminfo,hugepages/*/nr_hugepages}`.
pub fn numa_topology(sys: &Path) -> Result<Option<NumaTopology>, DiscoveryError> {
    let base = sys.join("devices/system/node");
    let Ok(entries) = std::fs::read_dir(&base) else {
        return Ok(None);
    };
    let mut topology = NumaTopology::default();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_prefix("node"))
            .and_then(|n| n.parse::<i64>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        let meminfo_path = dir.join("meminfo");
        let meminfo = read(&meminfo_path)?;
        let mut pools = Vec::new();
        if let Ok(sizes) = std::fs::read_dir(dir.join("hugepages")) {
            for size in sizes.flatten() {
                let size_name = size.file_name().to_string_lossy().into_owned();
                let nr = read(&size.path().join("nr_hugepages"))?;
                pools.push((size_name, nr));
            }
        }
        pools.sort();
        let borrowed: Vec<(&str, &str)> = pools
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let capacity =
            node_capacity(&meminfo, &borrowed).map_err(|source| DiscoveryError::Sysfs {
                path: dir.clone(),
                source,
            })?;
        topology.nodes.insert(id, capacity);
    }
    Ok((!topology.nodes.is_empty()).then_some(topology))
}

/// Discovers the node. `driver` overrides detection (`--cgroup-driver`).
pub fn discover(roots: &Roots, driver: Option<CgroupDriver>) -> Result<Discovery, DiscoveryError> {
    let kernel_version = read(&roots.proc.join("sys/kernel/osrelease"))?
        .trim()
        .to_string();
    let fs = CgroupFs::new(&roots.cgroup);
    if !roots.cgroup.join("cgroup.controllers").is_file() {
        return Err(DiscoveryError::NotCgroupV2(roots.cgroup.clone()));
    }
    let cgroup_driver = match driver.or_else(|| detect_driver(&fs)) {
        Some(d) => d,
        None => return Err(DiscoveryError::NoKubepods(roots.cgroup.clone())),
    };
    let kp = CgroupPath::new(kubepods(cgroup_driver)).expect("a constant path");
    if !fs.exists(&kp) {
        return Err(DiscoveryError::NoKubepods(roots.cgroup.clone()));
    }
    let kubepods_controllers =
        controllers("cgroup.controllers", &fs.read(&kp, "cgroup.controllers")?)?;
    Ok(Discovery {
        kernel_version,
        cgroup_driver,
        kubepods_controllers,
        page_size: page_size()?,
        topology: numa_topology(&roots.sys)?,
    })
}
