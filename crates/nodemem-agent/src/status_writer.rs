//! The agent's status writes, off the enforcement path. A pass hands its status over
//! and goes on; a task of its own writes the latest one (server-side apply, the
//! agent's field manager). Under pod churn the statuses of passes that follow each
//! other quickly are skipped, only the latest is written: the churn soak showed a
//! pass that waits for its own status write falls behind its watches by seconds. A
//! write that fails is tried again after a second, or sooner with a newer status.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use nodemem_api::{NodeMemoryConfig, NodeMemoryConfigStatus};
use serde_json::json;
use tokio::sync::watch;
use tracing::warn;

/// The latest status to write: the config's name and its status.
type Latest = Option<(String, NodeMemoryConfigStatus)>;

pub struct StatusWriter {
    latest: watch::Sender<Latest>,
}

impl StatusWriter {
    /// Starts the writing task; it ends when the writer is dropped.
    pub fn start(configs: Api<NodeMemoryConfig>, field_manager: &'static str) -> Self {
        let (latest, rx) = watch::channel(None);
        tokio::spawn(write_latest(configs, field_manager, rx));
        StatusWriter { latest }
    }

    /// Hands a status over; a newer one replaces it if it is not written yet.
    pub fn send(&self, config: &str, status: NodeMemoryConfigStatus) {
        self.latest.send_replace(Some((config.to_string(), status)));
    }
}

async fn write_latest(
    configs: Api<NodeMemoryConfig>,
    field_manager: &'static str,
    mut rx: watch::Receiver<Latest>,
) {
    while rx.changed().await.is_ok() {
        loop {
            let Some((name, status)) = rx.borrow_and_update().clone() else {
                break;
            };
            let patch = json!({
                "apiVersion": "nodemem.io/v1alpha1",
                "kind": "NodeMemoryConfig",
                "status": status,
            });
            let params = PatchParams::apply(field_manager).force();
            match configs
                .patch_status(&name, &params, &Patch::Apply(&patch))
                .await
            {
                Ok(_) => break,
                Err(e) => {
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
