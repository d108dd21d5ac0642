//! The agent's Prometheus metrics (prometheus-client) and its HTTP endpoints: `/metrics`,
//! `/healthz` (the process serves) and `/readyz` (the node has been enforced at least
//! once, from the apiserver or from the state directory).
//!
//! Label values come from small fixed sets (no pod or path labels), so series stay
//! bounded whatever the node runs.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Why a pass ran.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Trigger {
    Start,
    Event,
    Cgroup,
    Resync,
}

impl Trigger {
    fn label(self) -> &'static str {
        match self {
            Trigger::Start => "start",
            Trigger::Event => "event",
            Trigger::Cgroup => "cgroup",
            Trigger::Resync => "resync",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TriggerLabel {
    trigger: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QosLabel {
    qos: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrnoLabel {
    errno: &'static str,
}

/// The errno of a failed write as a bounded label.
pub fn errno_label(errno: Option<i32>) -> &'static str {
    match errno {
        Some(libc::EINVAL) => "EINVAL",
        Some(libc::EACCES) => "EACCES",
        Some(libc::EPERM) => "EPERM",
        Some(libc::ENOENT) => "ENOENT",
        Some(libc::ENOSPC) => "ENOSPC",
        Some(libc::EISDIR) => "EISDIR",
        Some(libc::EBUSY) => "EBUSY",
        Some(_) => "other",
        None => "none",
    }
}

pub struct Metrics {
    registry: Registry,
    passes: Family<TriggerLabel, Counter>,
    pass_seconds: Histogram,
    reaction_seconds: Histogram,
    writes: Family<ResultLabel, Counter>,
    write_errors: Family<ErrnoLabel, Counter>,
    drift_repairs: Counter,
    memory_min: Gauge,
    memory_low: Gauge,
    managed_pods: Gauge,
    pinning_requests: Gauge,
    pinning_errors: Gauge,
    high_events: Family<QosLabel, Gauge>,
    oom_kills: Family<QosLabel, Gauge>,
    full_pressure: Family<QosLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("nodemem_agent");
        let m = Metrics {
            passes: Family::default(),
            pass_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            reaction_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            writes: Family::default(),
            write_errors: Family::default(),
            drift_repairs: Counter::default(),
            memory_min: Gauge::default(),
            memory_low: Gauge::default(),
            managed_pods: Gauge::default(),
            pinning_requests: Gauge::default(),
            pinning_errors: Gauge::default(),
            high_events: Family::default(),
            oom_kills: Family::default(),
            full_pressure: Family::default(),
            ready: AtomicBool::new(false),
            registry: Registry::default(),
        };
        registry.register(
            "passes",
            "Enforcement passes, by what started them",
            m.passes.clone(),
        );
        registry.register(
            "pass_duration_seconds",
            "Time of one enforcement pass",
            m.pass_seconds.clone(),
        );
        registry.register(
            "reaction_seconds",
            "From a cgroup directory appearing to its values being written",
            m.reaction_seconds.clone(),
        );
        registry.register(
            "writes",
            "Interface file writes, by result",
            m.writes.clone(),
        );
        registry.register(
            "write_errors",
            "Failed writes, by errno",
            m.write_errors.clone(),
        );
        registry.register(
            "drift_repairs",
            "Values found changed by someone else and written back on a resync",
            m.drift_repairs.clone(),
        );
        registry.register(
            "node_memory_min_bytes",
            "Sum of pod memory.min on the node (kubelet_memory_qos_node_memory_min_bytes)",
            m.memory_min.clone(),
        );
        registry.register(
            "node_memory_low_bytes",
            "Sum of pod memory.low on the node (kubelet_memory_qos_node_memory_low_bytes)",
            m.memory_low.clone(),
        );
        registry.register(
            "managed_pods",
            "Pods whose cgroups the agent manages",
            m.managed_pods.clone(),
        );
        registry.register(
            "memory_manager_pinning_requests",
            "NUMA pinning requests of the Static policy (memory_manager_pinning_requests_total)",
            m.pinning_requests.clone(),
        );
        registry.register(
            "memory_manager_pinning_errors",
            "NUMA pinning requests refused (memory_manager_pinning_errors_total)",
            m.pinning_errors.clone(),
        );
        registry.register(
            "memory_high_events",
            "memory.high crossings (memory.events high) summed over the managed pods of a QoS class",
            m.high_events.clone(),
        );
        registry.register(
            "oom_kills",
            "OOM kills (memory.events oom_kill) summed over the managed pods of a QoS class",
            m.oom_kills.clone(),
        );
        registry.register(
            "memory_pressure_full_avg60",
            "The highest full memory pressure (PSI avg60, percent) among the managed pods of a QoS class",
            m.full_pressure.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Memory signals per QoS class (`guaranteed`, `burstable`, `besteffort`): pods are
    /// aggregated, so the series stay three per metric whatever the node runs.
    pub fn signals(&self, per_pod: &[(&'static str, u64, u64, f64)]) {
        for qos in ["guaranteed", "burstable", "besteffort"] {
            let of_class = per_pod.iter().filter(|p| p.0 == qos);
            let (high, oom, full) = of_class.fold((0u64, 0u64, 0.0f64), |acc, p| {
                (acc.0 + p.1, acc.1 + p.2, acc.2.max(p.3))
            });
            let label = QosLabel { qos };
            self.high_events.get_or_create(&label).set(high as i64);
            self.oom_kills.get_or_create(&label).set(oom as i64);
            self.full_pressure.get_or_create(&label).set(full);
        }
    }

    /// Records one pass.
    pub fn pass(&self, trigger: Trigger, seconds: f64) {
        self.passes
            .get_or_create(&TriggerLabel {
                trigger: trigger.label(),
            })
            .inc();
        self.pass_seconds.observe(seconds);
        self.ready.store(true, Ordering::Relaxed);
    }

    pub fn reaction(&self, seconds: f64) {
        self.reaction_seconds.observe(seconds);
    }

    pub fn writes(&self, applied: usize, vanished: usize, failed: &[Option<i32>], drift: bool) {
        let inc = |result: &'static str, n: usize| {
            if n > 0 {
                self.writes
                    .get_or_create(&ResultLabel { result })
                    .inc_by(n as u64);
            }
        };
        inc("ok", applied);
        inc("vanished", vanished);
        inc("failed", failed.len());
        for errno in failed {
            self.write_errors
                .get_or_create(&ErrnoLabel {
                    errno: errno_label(*errno),
                })
                .inc();
        }
        if drift && applied > 0 {
            self.drift_repairs.inc_by(applied as u64);
        }
    }

    pub fn node(
        &self,
        memory_min: i64,
        memory_low: i64,
        managed_pods: usize,
        pinning: Option<(u64, u64)>,
    ) {
        self.memory_min.set(memory_min);
        self.memory_low.set(memory_low);
        self.managed_pods.set(managed_pods as i64);
        if let Some((requests, errors)) = pinning {
            self.pinning_requests.set(requests as i64);
            self.pinning_errors.set(errors as i64);
        }
    }

    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String does not fail");
        text
    }

    fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_str(content_type).expect("a valid content type"),
    );
    r
}

fn route(metrics: &Metrics, req: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    match req.uri().path() {
        "/metrics" => reply(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.encode(),
        ),
        "/healthz" => reply(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" if metrics.ready() => reply(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "the node has not been enforced yet\n".into(),
        ),
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try /metrics, /healthz or /readyz\n".into(),
        ),
    }
}

/// Serves the endpoints on `addr` until the process ends; returns the bound address.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<SocketAddr, String> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} for /metrics: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let response = route(&metrics, &req);
                    async move { Ok::<_, std::convert::Infallible>(response) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_encode_with_bounded_labels() {
        let m = Metrics::new();
        m.pass(Trigger::Event, 0.002);
        m.writes(3, 1, &[Some(libc::EINVAL), Some(12345)], false);
        m.writes(2, 0, &[], true);
        m.node(1 << 30, 1 << 29, 7, Some((5, 1)));
        m.signals(&[
            ("burstable", 4, 1, 2.5),
            ("burstable", 1, 0, 7.25),
            ("guaranteed", 0, 2, 0.0),
        ]);
        let text = m.encode();
        for line in [
            "nodemem_agent_passes_total{trigger=\"event\"} 1",
            "nodemem_agent_writes_total{result=\"ok\"} 5",
            "nodemem_agent_writes_total{result=\"vanished\"} 1",
            "nodemem_agent_writes_total{result=\"failed\"} 2",
            "nodemem_agent_write_errors_total{errno=\"EINVAL\"} 1",
            "nodemem_agent_write_errors_total{errno=\"other\"} 1",
            "nodemem_agent_drift_repairs_total 2",
            "nodemem_agent_node_memory_min_bytes 1073741824",
            "nodemem_agent_managed_pods 7",
            "nodemem_agent_memory_manager_pinning_errors 1",
            "nodemem_agent_memory_high_events{qos=\"burstable\"} 5",
            "nodemem_agent_oom_kills{qos=\"guaranteed\"} 2",
            "nodemem_agent_memory_pressure_full_avg60{qos=\"burstable\"} 7.25",
            "nodemem_agent_oom_kills{qos=\"besteffort\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(m.ready());
    }
}
