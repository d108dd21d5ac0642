//! Real nodes one at a time unless asked for more (`NODEMEM_NODES_AT_ONCE`). Each node
//! is a VM of 2 GiB with qemu's own memory and a control plane of its own (etcd,
//! kube-apiserver, kube-controller-manager, kube-scheduler): about 4 GiB in all. Under
//! TCG two nodes on two cores do not share them well: measured 2026-11-28, every phase
//! of a node took 2.2 to 2.6 times as long beside another as alone, and the six
//! real-node tests took 2,716 s one at a time against 3,168 s two at a time. The slower
//! pace beside another node also left less room under the runtime's 2 s NRI timeout.
//! The budgets follow each node's pace (`pace.rs`) either way.

use std::sync::{Condvar, Mutex};

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

/// `NODEMEM_NODES_AT_ONCE` when set (at least 1; each node takes about 5 GiB of the
/// machine's memory), otherwise one.
fn nodes_at_once() -> usize {
    std::env::var("NODEMEM_NODES_AT_ONCE")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(1, |n| n.max(1))
}
