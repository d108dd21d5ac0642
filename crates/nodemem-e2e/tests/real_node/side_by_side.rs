//! Real nodes side by side, as many as the machine holds. Each node is a VM of 2 GiB
//! with qemu's own memory and a control plane of its own (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler): about 4 GiB in all. Under TCG a node is
//! mostly waiting (the kubelet's sync loops, systemd, the test's own waits), so two on
//! two cores take little longer than one each; the budgets follow each node's pace
//! (`pace.rs`), measured with the other beside it.

use std::sync::{Condvar, Mutex};

/// What one node takes of the machine's memory, with a margin (measured: VM 2 GiB,
/// qemu ~0.3 GiB, control plane ~1 GiB).
const NODE_MIB: u64 = 5 * 1024;

static USED: Mutex<usize> = Mutex::new(0);
static FREED: Condvar = Condvar::new();

/// A node's place on the machine, given back when dropped.
pub(crate) struct Slot;

impl Drop for Slot {
    fn drop(&mut self) {
        *USED.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        FREED.notify_one();
    }
}

/// Waits for a place among [`nodes_at_once`].
pub(crate) fn slot() -> Slot {
    let most = nodes_at_once();
    let mut used = USED.lock().unwrap_or_else(|e| e.into_inner());
    while *used >= most {
        used = FREED.wait(used).unwrap_or_else(|e| e.into_inner());
    }
    *used += 1;
    Slot
}

/// `NODEMEM_NODES_AT_ONCE` when set; otherwise as many as the available memory holds,
/// at most two (the machine's two cores: a third VM would slow the others past what
/// it saves).
fn nodes_at_once() -> usize {
    if let Some(n) = std::env::var("NODEMEM_NODES_AT_ONCE")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        return n.max(1);
    }
    let available_mib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024);
    ((available_mib / NODE_MIB) as usize).clamp(1, 2)
}
