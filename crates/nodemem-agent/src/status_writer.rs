//! The agent's status writes, off the enforcement path. A pass hands its status over
//! and goes on; a task of its own writes the latest one (server-side apply, the
//! agent's field manager). Under pod churn the statuses of passes that follow each
//! other quickly are skipped, only the latest is written: the churn soak showed a
//! pass that waits for its own status write falls behind its watches by seconds. A
//! write that fails is tried again, with the newest status, after a delay that doubles
//! with each failure in a row up to [`CAP`], never sooner than the apiserver's
//! Retry-After (`nodemem_api::backoff`, as the controller's writes): thousands of
//! agents that API Priority and Fairness turned away do not all come back at once. A
//! status whose only news is the observation's figures waits until `refresh` has passed
//! since the last write (a newer status replaces it meanwhile; one with news a reader
//! acts on is written at once, figures and all).

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use nodemem_api::{NodeMemoryConfig, NodeMemoryConfigStatus};
use serde_json::json;
use tokio::sync::watch;
use tracing::warn;

use crate::metrics::Metrics;

/// The longest an agent waits between failed status writes (a Retry-After above it is
/// still honoured): once the apiserver has room again, a node's status is at most this
/// far behind (the controller's rollout reads it), and 20,000 agents waiting at the cap
/// are 1,250 writes a second spread over it, a fan-out's load.
pub const CAP: Duration = Duration::from_secs(16);

/// The latest status to write: the config's name, its uid, its status, and whether it
/// may wait for the refresh (its only news is figures).
type Latest = Option<(String, Option<String>, NodeMemoryConfigStatus, bool)>;

pub struct StatusWriter {
    latest: watch::Sender<Latest>,
    metrics: std::sync::Arc<Metrics>,
}

impl StatusWriter {
    /// Starts the writing task; it ends when the writer is dropped.
    pub fn start(
        configs: Api<NodeMemoryConfig>,
        field_manager: &'static str,
        refresh: Duration,
        metrics: std::sync::Arc<Metrics>,
    ) -> Self {
        let (latest, rx) = watch::channel(None);
        tokio::spawn(write_latest(
            configs,
            field_manager,
            rx,
            refresh,
            metrics.clone(),
        ));
        StatusWriter { latest, metrics }
    }

    /// Hands a status over; a newer one replaces it if it is not written yet. The uid
    /// is a precondition of the write: a status for a config that was deleted never
    /// lands on the one created again under its name.
    /// `may_wait`: its only news is figures (`status::StatusWrite::Coalesced`): it is
    /// written once the refresh has passed since the last write.
    pub fn send(
        &self,
        config: &str,
        uid: Option<&str>,
        status: NodeMemoryConfigStatus,
        may_wait: bool,
    ) {
        // What the node runs, whether or not the write gets through.
        self.metrics.conditions(&status.conditions);
        self.latest.send_replace(Some((
            config.to_string(),
            uid.map(str::to_string),
            status,
            may_wait,
        )));
    }
}

async fn write_latest(
    configs: Api<NodeMemoryConfig>,
    field_manager: &'static str,
    mut rx: watch::Receiver<Latest>,
    refresh: Duration,
    metrics: std::sync::Arc<Metrics>,
) {
    let mut last_write: Option<tokio::time::Instant> = None;
    // Failed writes in a row, for the backoff.
    let mut failures: u32 = 0;
    // Status fields the installed CRD does not declare (an agent newer than its CRDs):
    // left out of every write, so the rest of the status still lands.
    let mut undeclared: Vec<Vec<String>> = Vec::new();
    while rx.changed().await.is_ok() {
        loop {
            let Some((name, uid, status, may_wait)) = rx.borrow_and_update().clone() else {
                break;
            };
            if let Some(due) = last_write.map(|at| at + refresh).filter(|_| may_wait) {
                if tokio::time::Instant::now() < due {
                    tokio::select! {
                        // A newer status: look again (it may not wait).
                        changed = rx.changed() => if changed.is_err() { return } else { continue },
                        _ = tokio::time::sleep_until(due) => {}
                    }
                }
            }
            let mut patch = json!({
                "apiVersion": "nodemem.io/v1alpha1",
                "kind": "NodeMemoryConfig",
                "status": status,
            });
            if let Some(uid) = &uid {
                patch["metadata"] = json!({"uid": uid});
            }
            crate::crd_skew::strip(&mut patch, &undeclared);
            let params = PatchParams::apply(field_manager).force();
            match configs
                .patch_status(&name, &params, &Patch::Apply(&patch))
                .await
            {
                Ok(_) => {
                    metrics.status_write("ok");
                    last_write = Some(tokio::time::Instant::now());
                    failures = 0;
                    break;
                }
                // Fields the installed CRD does not declare (the apiserver answers
                // 500, the field manager's error): written again without them at once
                // (new fields each time, so this ends).
                Err(kube::Error::Api(s))
                    if newly_undeclared(&s.message, &patch, &mut undeclared) =>
                {
                    warn!(config = %name, message = %s.message, "the installed NodeMemoryConfig CRD is older than this agent: its status is written without the fields it lacks; apply this release's CRDs (kubectl apply --server-side -f crds/)");
                    continue;
                }
                // The config is gone, or is another object now (the uid differs): this
                // status is for nobody; the pass for the new one sends its own.
                Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409 | 422) => {
                    metrics.status_write("gone");
                    warn!(config = %name, code = s.code, message = %s.message, "status not written: the config it was for is gone (or refuses it); the next pass sends its own");
                    break;
                }
                // Anything else (429, 5xx, the connection): the newest status after
                // the backoff; a newer status meanwhile does not cut it short.
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let retry_after = nodemem_api::backoff::retry_after(&e);
                    let jitter = 0.5 + fastrand::f64() / 2.0;
                    let wait = nodemem_api::backoff::delay(failures, jitter, retry_after, CAP);
                    let throttled = matches!(&e, kube::Error::Api(s) if s.code == 429);
                    metrics.status_write(if throttled { "throttled" } else { "error" });
                    warn!(error = %e, failures, wait_ms = wait.as_millis() as u64, "status not written; the newest status is written after the wait");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

/// Whether `message` refuses fields of `patch` the CRD does not declare that are not left
/// out yet; they are added to `undeclared`.
fn newly_undeclared(
    message: &str,
    patch: &serde_json::Value,
    undeclared: &mut Vec<Vec<String>>,
) -> bool {
    let new: Vec<Vec<String>> = crate::crd_skew::undeclared_fields(message)
        .into_iter()
        .filter(|p| !undeclared.contains(p))
        .filter(|p| crate::crd_skew::strip(&mut patch.clone(), std::slice::from_ref(p)))
        .collect();
    let any = !new.is_empty();
    undeclared.extend(new);
    any
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// What the scripted apiserver saw: when each status write came, and its body.
    type Seen = Arc<Mutex<Vec<(Instant, String)>>>;

    /// One HTTP/1.1 request's body off `sock` (headers, then Content-Length bytes);
    /// None when the client closed the connection.
    async fn request_body(sock: &mut tokio::net::TcpStream) -> Option<String> {
        let mut buf = Vec::new();
        let mut byte = [0u8; 1];
        while !buf.ends_with(b"\r\n\r\n") {
            if sock.read(&mut byte).await.ok()? == 0 {
                return None;
            }
            buf.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        sock.read_exact(&mut body).await.ok()?;
        Some(String::from_utf8_lossy(&body).into_owned())
    }

    /// An apiserver that answers the first `refusals` status writes as API Priority and
    /// Fairness does when a level is full (429, with `Retry-After: after` when above 0),
    /// then accepts.
    async fn apiserver(refusals: usize, after: u32) -> (String, Seen) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen: Seen = Arc::default();
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let log = log.clone();
                tokio::spawn(async move {
                    while let Some(body) = request_body(&mut sock).await {
                        let n = {
                            let mut log = log.lock().unwrap();
                            log.push((Instant::now(), body));
                            log.len()
                        };
                        let (status, extra, body) = if n <= refusals {
                            let mut status = json!({"kind": "Status", "apiVersion": "v1",
                                "status": "Failure", "reason": "TooManyRequests", "code": 429,
                                "message": "too many requests, please try again later"});
                            let mut header = String::new();
                            if after > 0 {
                                status["details"] = json!({"retryAfterSeconds": after});
                                header = format!("Retry-After: {after}\r\n");
                            }
                            ("429 Too Many Requests", header, status)
                        } else {
                            let config = json!({"apiVersion": "nodemem.io/v1alpha1",
                                "kind": "NodeMemoryConfig", "metadata": {"name": "n1"},
                                "spec": {"policy": "p", "revision": "r"}});
                            ("200 OK", String::new(), config)
                        };
                        let body = body.to_string();
                        let answer = format!(
                            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if sock.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (url, seen)
    }

    fn status(revision: &str) -> NodeMemoryConfigStatus {
        NodeMemoryConfigStatus {
            observed_revision: Some(revision.into()),
            ..NodeMemoryConfigStatus::default()
        }
    }

    /// The agent's client (`with_brief_retries`) against `url`.
    fn client(url: &str) -> kube::Client {
        let config = kube::Config::new(url.parse().unwrap());
        nodemem_plumbing::kubeclient::with_brief_retries(config).unwrap()
    }

    /// Turned away with 429s and `Retry-After: 1`: the client tries the request three
    /// times, a second apart, then the writer waits at least the apiserver's second
    /// again; a newer status handed over meanwhile cuts none of the waits short, and the
    /// write after them carries it; the metric says throttled, then ok.
    #[tokio::test]
    async fn a_429_is_waited_out_for_its_retry_after_and_the_newest_status_written() {
        let (url, seen) = apiserver(3, 1).await;
        let client = client(&url);
        let metrics = Arc::new(Metrics::new());
        let writer = StatusWriter::start(
            Api::all(client),
            "nodemem-agent",
            Duration::from_secs(30),
            metrics.clone(),
        );
        writer.send("n1", None, status("first"), false);
        let written = |n: usize| seen.lock().unwrap().len() >= n;
        while !written(1) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        writer.send("n1", None, status("newer"), false);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            seen.lock().unwrap().len(),
            1,
            "no request within the Retry-After"
        );
        let started = Instant::now();
        while !written(4) {
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "never written again"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 4, "one write after the waits: {seen:?}");
        for (i, w) in seen.windows(2).enumerate() {
            let gap = w[1].0 - w[0].0;
            assert!(
                gap >= Duration::from_secs(1),
                "request {} after {gap:?}",
                i + 2
            );
        }
        for (at, body) in &seen[..3] {
            assert!(body.contains("\"first\""), "{at:?}: {body}");
        }
        assert!(seen[3].1.contains("\"newer\""), "{}", seen[3].1);
        let exposition = metrics.encode();
        for result in ["throttled", "ok"] {
            let line = format!("nodemem_agent_status_writes_total{{result=\"{result}\"}} 1");
            assert!(exposition.contains(&line), "{line} in\n{exposition}");
        }
    }

    /// Failures in a row wait longer each time: with no Retry-After, after three
    /// failed writes (each three requests in the client) the next write comes at least
    /// 0.5, 1 and 2 s after the failure before it (the backoff's 1, 2, 4 s, halved at
    /// most by jitter).
    #[tokio::test]
    async fn failures_in_a_row_back_off_exponentially() {
        let (url, seen) = apiserver(9, 0).await;
        let client = client(&url);
        let writer = StatusWriter::start(
            Api::all(client),
            "nodemem-agent",
            Duration::from_secs(30),
            Arc::new(Metrics::new()),
        );
        writer.send("n1", None, status("r"), false);
        let started = Instant::now();
        while seen.lock().unwrap().len() < 10 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{:?}",
                seen.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let times: Vec<Instant> = seen.lock().unwrap().iter().map(|s| s.0).collect();
        // The writer's waits: between a write's last request and the next write's first.
        let waits: Vec<Duration> = [3, 6, 9].iter().map(|&i| times[i] - times[i - 1]).collect();
        for (wait, least) in waits.iter().zip([500, 1000, 2000]) {
            assert!(*wait >= Duration::from_millis(least), "waits {waits:?}");
        }
    }
}
