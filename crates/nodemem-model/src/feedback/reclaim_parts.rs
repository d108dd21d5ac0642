//! How one reclaim step is written so that it never takes a container below its
//! floor (issue 58, pure): in parts, memory.current read again after each, every part
//! small enough that the kernel's worst overshoot stays above the floor.
//!
//! Why the kernel's protection is no floor here: `memory.reclaim` written at a cgroup
//! makes that cgroup the root of the reclaim, and the root of a reclaim has no
//! protection of its own (`mm/memcontrol.c` `mem_cgroup_calculate_protection`: the
//! target's effective memory.min and memory.low are zero), so a container's own
//! memory.min or memory.low does not hold against a write at the container.
//!
//! Why a step is split: on Linux 6.1 (the real node's kernel, Debian 12) a write of N
//! bytes runs `try_to_free_mem_cgroup_pages` for what is left of N, which asks each
//! NUMA node's LRU lists for all of it (`mm/vmscan.c` `shrink_zones` walks every
//! zone, `shrink_lruvec` counts against its own total), and never for less than
//! `SWAP_CLUSTER_MAX` (32) pages, in batches of that many per list. A write of 50 MiB
//! took 87 MiB on the real node's two NUMA nodes (2026-11-28); kernels from 6.5 ask in
//! quarters ("mm: vmscan: fix inaccurate reclaim during proactive reclaim"), which
//! this bound also covers. So the worst a write of `part` bytes takes is, per NUMA
//! node, the part rounded up to the kernel's batch and one batch more on each of the
//! four LRU lists: [`worst_taken`]. A part is at most a `2 x nodes`-th of the headroom
//! above the floor and its margin, so that even the worst keeps half the headroom.

/// A page, bytes.
pub const PAGE: i64 = 4096;
/// The kernel's reclaim batch: `SWAP_CLUSTER_MAX` pages (`include/linux/swap.h`).
pub const KERNEL_BATCH: i64 = 32 * PAGE;
/// The LRU lists a batch may be taken from past the ask, one each (inactive and
/// active anon and file).
const LISTS: i64 = 4;
/// The largest part: 8 MiB. A step of 10 % of a 4 GiB container is 52 writes.
pub const PART_MAX: i64 = 8 << 20;
/// Kept above the floor per NUMA node: more than a node's worst overshoot
/// (`LISTS + 1` batches, 640 KiB).
pub const MARGIN_PER_NODE: i64 = 1 << 20;
/// Assumed where the node's NUMA nodes are not known: more than most machines have,
/// so parts are smaller, never larger, than they need be.
pub const UNKNOWN_NUMA_NODES: u32 = 8;

/// What a write of `part` bytes can take at most on a machine of `numa_nodes`.
pub fn worst_taken(part: i64, numa_nodes: u32) -> i64 {
    let asked = (part.max(KERNEL_BATCH) + KERNEL_BATCH - 1) / KERNEL_BATCH * KERNEL_BATCH;
    i64::from(numa_nodes.max(1)) * (asked + LISTS * KERNEL_BATCH)
}

/// The next part of a step: `left` bytes of the step still to ask, the container's
/// memory.current now and its floor. None when nothing more may be asked: the step
/// is done, or the headroom above the floor and its margin is too small for even the
/// kernel's smallest batch to be safe.
pub fn next_part(left: i64, current: i64, floor: i64, numa_nodes: u32) -> Option<i64> {
    let nodes = i64::from(numa_nodes.max(1));
    let headroom = current - floor - nodes * MARGIN_PER_NODE;
    let part = left.min(PART_MAX).min(headroom / (2 * nodes));
    let part = part - part % PAGE;
    (part >= KERNEL_BATCH).then_some(part)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: i64 = 1 << 20;

    #[test]
    fn far_from_the_floor_a_part_is_the_largest_or_what_is_left() {
        assert_eq!(next_part(100 * MI, 4096 * MI, 64 * MI, 2), Some(PART_MAX));
        assert_eq!(next_part(3 * MI, 4096 * MI, 64 * MI, 2), Some(3 * MI));
        // What is left, in whole pages.
        assert_eq!(next_part(MI + 5, 4096 * MI, 64 * MI, 1), Some(MI));
    }

    #[test]
    fn near_the_floor_parts_shrink_and_stop_above_it() {
        // 64 MiB floor, 2 nodes: 2 MiB margin; 30 MiB of headroom past it gives 7.5 MiB.
        assert_eq!(
            next_part(100 * MI, 96 * MI, 64 * MI, 2),
            Some(30 * MI / 4 / PAGE * PAGE)
        );
        // Less than a batch would be safe: nothing.
        assert_eq!(next_part(100 * MI, 66 * MI + 256 * 1024, 64 * MI, 2), None);
        assert_eq!(next_part(100 * MI, 64 * MI, 64 * MI, 2), None);
        // Below the floor (the container's own doing): nothing.
        assert_eq!(next_part(100 * MI, 10 * MI, 64 * MI, 1), None);
        assert_eq!(next_part(0, 4096 * MI, 0, 1), None, "the step is done");
    }

    /// The invariant, over every headroom up to 64 MiB (by 4 KiB pages) and above (by
    /// 1 MiB), 1 to 8 NUMA nodes, any floor: a part the kernel overshoots the worst it
    /// can still leaves memory.current above the floor plus half the margin, and a
    /// whole step run part by part under that worst never crosses the floor.
    #[test]
    fn the_worst_the_kernel_can_take_never_crosses_the_floor() {
        let floor = 64 * MI;
        for nodes in 1..=8u32 {
            let headrooms = (0..=64 * MI / PAGE)
                .map(|p| p * PAGE)
                .chain((65..=2048).map(|m| m * MI));
            for h in headrooms {
                let current = floor + h;
                if let Some(part) = next_part(i64::MAX, current, floor, nodes) {
                    assert!(part % PAGE == 0 && (KERNEL_BATCH..=PART_MAX).contains(&part));
                    let after = current - worst_taken(part, nodes);
                    assert!(
                        after > floor + i64::from(nodes) * MARGIN_PER_NODE / 2,
                        "{nodes} nodes, headroom {h}: part {part} could leave {after}"
                    );
                }
            }
        }
        for nodes in [1u32, 2, 4, 8] {
            let mut current = floor + 700 * MI;
            let mut left = 600 * MI;
            let mut writes = 0;
            while let Some(part) = next_part(left, current, floor, nodes) {
                current -= worst_taken(part, nodes);
                left -= part;
                writes += 1;
                assert!(
                    current > floor,
                    "{nodes} nodes: {current} after {writes} writes"
                );
            }
            assert!(writes < 500, "{nodes} nodes: {writes} writes");
        }
    }

    #[test]
    fn the_worst_counts_each_node_the_batch_and_the_lists() {
        assert_eq!(worst_taken(PAGE, 1), 5 * KERNEL_BATCH);
        assert_eq!(worst_taken(MI, 2), 2 * (MI + 4 * KERNEL_BATCH));
        assert_eq!(worst_taken(MI, 0), worst_taken(MI, 1));
    }
}
