//! A kubelet restart as a reason for a whole-node pass. A v1.37 kubelet resets
//! memory.min and memory.low of kubepods (and the burstable slice's memory.low) to 0
//! when it starts with its Memory QoS off or without TieredReservation
//! (`qos_container_manager_linux.go`), through systemd on a systemd-driver node: the
//! agent puts its values back (and tells systemd again, `UnitRecords::rewritten`) on
//! the pass that follows, instead of at its next resync.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use futures::Stream;
use kube::runtime::watcher;
use tracing::info;

use super::batch::Update;

/// Whether the kubelet started again between two looks: a start time seen before and
/// a different one now. A kubelet not found (stopped, or no host PID namespace) is no
/// restart; the one that comes back is.
pub(super) fn restarted(before: Option<SystemTime>, now: Option<SystemTime>) -> bool {
    matches!((before, now), (Some(b), Some(n)) if b != n)
}

/// A whole-node pass (`Update::Resync`) each time the kubelet under `proc_root` is seen
/// to have started again, looking every `period`.
pub(super) fn kubelet_restarts(
    proc_root: PathBuf,
    period: Duration,
) -> impl Stream<Item = watcher::Result<Update>> + Send {
    let look = move || nodemem_apply::kubelet::kubelet_started_at(&proc_root);
    let first = look();
    futures::stream::unfold(
        (tokio::time::interval(period), first, look),
        |(mut ticks, mut seen, look)| async move {
            loop {
                ticks.tick().await;
                let now = look();
                let again = restarted(seen, now);
                seen = now.or(seen);
                if again {
                    info!("the kubelet started again: a whole-node pass puts back what it reset");
                    return Some((Ok(Update::Resync), (ticks, seen, look)));
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_new_start_time_after_a_known_one_is_a_restart() {
        let t = |s: u64| Some(SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        assert!(restarted(t(10), t(20)));
        assert!(!restarted(t(10), t(10)), "the same kubelet");
        assert!(!restarted(None, t(10)), "first seen");
        assert!(!restarted(t(10), None), "stopped: not yet back");
        assert!(!restarted(None, None));
    }
}
