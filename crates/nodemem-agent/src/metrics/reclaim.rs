//! Proactive reclaim's metrics (`reclaim`): what it took or would take, and why it
//! held back. Labels from fixed sets only (mode, signal).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::reclaim::TickReport;
use nodemem_model::feedback::reclaim::ReclaimMode;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabel {
    mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SignalLabel {
    signal: &'static str,
}

#[derive(Debug, Default)]
pub struct ReclaimMetrics {
    containers: Family<ModeLabel, Gauge>,
    steps: Family<ModeLabel, Counter>,
    asked_bytes: Family<ModeLabel, Counter>,
    reclaimed_bytes: Counter,
    headroom_bytes: Counter,
    back_offs: Family<SignalLabel, Counter>,
    write_errors: Counter,
    writes: Counter,
    write_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    writes_behind: Counter,
}

fn mode_label(mode: ReclaimMode) -> ModeLabel {
    ModeLabel {
        mode: match mode {
            ReclaimMode::Observe => "observe",
            ReclaimMode::Active => "active",
        },
    }
}

impl ReclaimMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "reclaim_containers",
            "Containers proactive reclaim acts on (mode active) or observes (mode observe)",
            self.containers.clone(),
        );
        registry.register(
            "reclaim_steps",
            "Reclaim steps taken (mode active: written to memory.reclaim) or that would have been (mode observe)",
            self.steps.clone(),
        );
        registry.register(
            "reclaim_asked_bytes",
            "Bytes the reclaim steps asked for (mode observe: what would have been asked)",
            self.asked_bytes.clone(),
        );
        registry.register(
            "reclaimed_bytes",
            "What the containers' memory.current lost at the reclaim steps (the kernel may take more than asked)",
            self.reclaimed_bytes.clone(),
        );
        registry.register(
            "reclaim_headroom_gained_bytes",
            "What the containers' working set (memory.current less inactive file, as the kubelet's memory.available counts it) lost at the reclaim steps",
            self.headroom_bytes.clone(),
        );
        registry.register(
            "reclaim_back_offs",
            "Reclaim steps held back, by signal: pressure (PSI some stall over the target) or refaults (over their budget)",
            self.back_offs.clone(),
        );
        registry.register(
            "reclaim_write_errors",
            "memory.reclaim writes the kernel refused (other than finding less than asked)",
            self.write_errors.clone(),
        );
        registry.register(
            "reclaim_writes",
            "Reclaim steps written (each in parts, off the agent's thread)",
            self.writes.clone(),
        );
        registry.register(
            "reclaim_write_seconds",
            "Time the written reclaim steps took, from queueing to their last part (divided by reclaim_writes: the mean)",
            self.write_seconds.clone(),
        );
        registry.register(
            "reclaim_writes_behind",
            "Reclaim steps due but not taken because the container's last step was still being written or the writer's queue was full: reclaim is behind",
            self.writes_behind.clone(),
        );
    }

    /// One tick under `mode` over `containers` targets (None: reclaim is off).
    pub fn tick(&self, containers: usize, mode: Option<ReclaimMode>, t: &TickReport) {
        for m in [ReclaimMode::Observe, ReclaimMode::Active] {
            let n = if mode == Some(m) { containers } else { 0 };
            self.containers.get_or_create(&mode_label(m)).set(n as i64);
        }
        let Some(mode) = mode else {
            return;
        };
        let label = mode_label(mode);
        self.steps.get_or_create(&label).inc_by(t.steps as u64);
        self.asked_bytes
            .get_or_create(&label)
            .inc_by(u64::try_from(t.asked).unwrap_or(0));
        self.reclaimed_bytes
            .inc_by(u64::try_from(t.reclaimed).unwrap_or(0));
        self.headroom_bytes
            .inc_by(u64::try_from(t.headroom).unwrap_or(0));
        for (signal, n) in [
            ("pressure", t.pressure_back_offs),
            ("refaults", t.refault_back_offs),
        ] {
            self.back_offs
                .get_or_create(&SignalLabel { signal })
                .inc_by(n as u64);
        }
        self.write_errors.inc_by(t.failed_writes as u64);
        self.writes.inc_by(t.writes as u64);
        self.write_seconds.inc_by(t.write_time.as_secs_f64());
        self.writes_behind.inc_by(t.behind as u64);
    }
}
