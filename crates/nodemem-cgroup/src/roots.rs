//! Where the kernel's file systems are mounted.

use std::path::PathBuf;

/// The cgroup v2 mount, sysfs and procfs. Tests and the VM point these elsewhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Roots {
    pub cgroup: PathBuf,
    pub sys: PathBuf,
    pub proc: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Roots {
            cgroup: PathBuf::from("/sys/fs/cgroup"),
            sys: PathBuf::from("/sys"),
            proc: PathBuf::from("/proc"),
        }
    }
}
