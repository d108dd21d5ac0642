//! The node's pace: how much slower this run's VM is than the one the budgets were set
//! on. Under qemu's TCG the same node runs two to three times slower on one machine of
//! a kind than on another (and slower again beside a second VM), so a fixed budget
//! either waits for nothing on a fast machine or fails a healthy node on a slow one.
//! Each test measures its own node once, from qemu's start to the Node's Ready (systemd,
//! containerd's image imports, the kubelet's registration: the same work a pod start
//! does), and every budget of its waits is its base times that pace, never below
//! the base: the node's requests (`RealNode::run`) too. TESTING.md lists the base budgets and where they come from.

use std::cell::Cell;
use std::time::Duration;

use nodemem_testkit::real_node::RealNode;

/// Boot to Ready on the machine the base budgets were set on (TESTING.md: ~65 s).
const REFERENCE_READY: Duration = Duration::from_secs(65);

/// The VM's 200k shell rounds where the reclaim phase's stall target was first held
/// (the issue 57 cold run's nodes: 2.85-3.04 s).
const REFERENCE_ROUNDS_SECONDS: f64 = 3.0;

thread_local! {
    /// Each test runs its node on its own thread (and its own runtime).
    static PACE: Cell<f64> = const { Cell::new(1.0) };
    /// This node's CPU against [`REFERENCE_ROUNDS_SECONDS`] (never below 1).
    static CPU_SLOWNESS: Cell<f64> = const { Cell::new(1.0) };
}

/// How many times slower this node's CPU is than the reference one (never below 1):
/// for figures a CPU's speed sets and the machine, not nodemem, decides, such as the
/// wall time a page refault costs a task under TCG.
pub(crate) fn cpu_slowness() -> f64 {
    CPU_SLOWNESS.get()
}

/// A base budget at this node's pace.
pub(crate) fn paced(budget: Duration) -> Duration {
    budget.mul_f64(PACE.get())
}

/// The pace from boot to Ready (never below 1: a fast node keeps the base budgets), set
/// for this thread's waits, with the VM's CPU speed measured beside it for the record:
/// 200,000 rounds of a shell loop, a figure comparable between runs and machines.
pub(crate) fn measure(node: &mut RealNode, ready: Duration) -> f64 {
    let pace = (ready.as_secs_f64() / REFERENCE_READY.as_secs_f64()).max(1.0);
    PACE.set(pace);
    node.set_request_budget(RealNode::REQUEST_BUDGET.mul_f64(pace));
    let loop_seconds = node
        .run("TIMEFORMAT=%R; { time for ((i = 0; i < 200000; i++)); do :; done; } 2>&1")
        .ok()
        .and_then(|(out, _)| out.trim().parse::<f64>().ok());
    // Unknown: as slow as the reference (the figures it scales are then held as set).
    CPU_SLOWNESS.set(loop_seconds.map_or(1.0, |s| (s / REFERENCE_ROUNDS_SECONDS).max(1.0)));
    let speed = loop_seconds.map_or("unknown".to_string(), |s| format!("{s:.2} s"));
    eprintln!(
        "{}: Ready {:.0} s after qemu started (reference {} s): budgets x{pace:.2}; VM speed: 200k shell rounds in {speed}",
        node.name,
        ready.as_secs_f64(),
        REFERENCE_READY.as_secs()
    );
    pace
}
