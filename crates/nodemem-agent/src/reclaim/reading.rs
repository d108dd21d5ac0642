//! A container's reading for reclaim, and the `swappiness=` probe: what the loop's
//! tick and the writer's thread (`super::writer`) both do.

use nodemem_cgroup::reclaim::{sample, ReclaimFiles};
use nodemem_cgroup::{CgroupFs, CgroupPath};
use nodemem_model::feedback::reclaim::Sample;
use tracing::warn;

/// A container's reading: None when its cgroup cannot be read (gone, or not there
/// yet: the next tick tries again), an error when a file does not parse. Anon counts
/// as reclaimable only where the node has swap and the container's memory.swap.max is
/// not 0.
pub fn read(
    fs: &CgroupFs,
    cgroup: &CgroupPath,
    at: u64,
    floor: i64,
    node_swap: bool,
) -> Result<Option<Sample>, nodemem_cgroup::parse::ParseError> {
    let files = ["memory.current", "memory.stat", "memory.pressure"].map(|f| fs.read(cgroup, f));
    let [Ok(current), Ok(stat), Ok(pressure)] = files else {
        return Ok(None);
    };
    let swap = node_swap
        && fs
            .read(cgroup, "memory.swap.max")
            .is_ok_and(|v| v.trim() != "0");
    let files = ReclaimFiles {
        current: &current,
        stat: &stat,
        pressure: &pressure,
    };
    sample(at, files, floor, swap).map(Some)
}

/// Whether memory.reclaim takes `swappiness=`; None when the probe's write failed for
/// another reason (it is tried again at the next step).
pub fn takes_swappiness(fs: &CgroupFs, cgroup: &CgroupPath) -> Option<bool> {
    match fs.reclaim_takes_swappiness(cgroup) {
        Ok(takes) => Some(takes),
        Err(e) => {
            warn!(cgroup = %cgroup, error = %e, "cannot find out whether memory.reclaim takes swappiness=");
            None
        }
    }
}
