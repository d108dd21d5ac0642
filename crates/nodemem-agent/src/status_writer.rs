//! The agent's status writes, off the enforcement path. A pass hands its status over
//! and goes on; a task of its own writes the latest one (server-side apply, the
//! agent's field manager). Under pod churn the statuses of passes that follow each
//! other quickly are skipped, only the latest is written: the churn soak showed a
//! pass that waits for its own status write falls behind its watches by seconds. A
//! write that fails is tried again after a second, or sooner with a newer status. A
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
                Err(e) => {
                    metrics.status_write("error");
                    warn!(error = %e, "status not written; tried again in a second or with the next status");
                    tokio::select! {
                        changed = rx.changed() => if changed.is_err() { return },
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
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
