//! A controller that stops for good stands down: a leader stopped (SIGTERM, SIGINT)
//! while its Deployment is gone, being deleted or scaled to zero removes its handoff
//! finalizer from every policy, so that no policy is left Terminating without a
//! controller to finish its handoff. A restart or an upgrade (the Deployment stays,
//! with replicas) keeps them: the next leader carries on.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams};
use kube::Client;
use nodemem_api::NodeMemoryPolicy;
use tracing::{info, warn};

/// Resolves when the process is asked to stop.
pub(crate) async fn stopped() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                warn!(error = %e, "cannot watch for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = terminate => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Whether the controller's Deployment says no controller follows this one.
fn last_one(deployment: Option<&Deployment>) -> bool {
    match deployment {
        None => true,
        Some(d) => {
            d.metadata.deletion_timestamp.is_some()
                || d.spec.as_ref().and_then(|s| s.replicas) == Some(0)
        }
    }
}

/// Stands down when `deployment` (the controller's own, in `namespace`) says no
/// controller follows.
pub(crate) async fn stand_down(client: &Client, namespace: &str, deployment: Option<&str>) {
    let Some(name) = deployment else {
        info!("stopping; policies keep their handoff finalizer (no --deployment to tell an uninstall from a restart)");
        return;
    };
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let deployment = match deployments.get_opt(name).await {
        Ok(d) => d,
        Err(e) => {
            warn!(error = %e, deployment = %name, "cannot read the controller's Deployment; policies keep their handoff finalizer");
            return;
        }
    };
    if !last_one(deployment.as_ref()) {
        info!(deployment = %name, "stopping; another controller follows, policies keep their handoff finalizer");
        return;
    }
    let released = let_go_of_every_policy(client).await;
    info!(
        deployment = %name,
        released,
        "the controller's Deployment is gone, being deleted or scaled to zero: stood down (no policy holds the handoff finalizer)"
    );
}

/// Removes the handoff finalizer from every policy; how many held it.
async fn let_go_of_every_policy(client: &Client) -> usize {
    let policies: Api<NodeMemoryPolicy> = Api::all(client.clone());
    let list = match policies.list_metadata(&ListParams::default()).await {
        Ok(l) => l,
        Err(e) => {
            warn!(error = %e, "cannot list the policies to stand down");
            return 0;
        }
    };
    let mut released = 0;
    for p in list.items {
        let Some(policy) = p.metadata.name else {
            continue;
        };
        match nodemem_plumbing::handoff::let_go(&policies, &policy).await {
            Ok(true) => released += 1,
            Ok(false) => {}
            Err(e) => warn!(%policy, error = %e, "handoff finalizer not removed"),
        }
    }
    released
}

/// `nodemem stand-down`, the chart's pre-delete hook: before an uninstall takes the
/// controller's RBAC away, scale the controller to zero, wait until no replica runs
/// (each stops standing down itself), and let go of every policy. Ok: how many
/// policies it let go of.
pub async fn before_uninstall(
    client: &Client,
    namespace: &str,
    deployment: &str,
    timeout: std::time::Duration,
) -> Result<usize, String> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let scale = serde_json::json!({"spec": {"replicas": 0}});
    match deployments
        .patch(
            deployment,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&scale),
        )
        .await
    {
        Ok(_) => info!(%deployment, "scaled the controller to zero"),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(format!("deployment {namespace}/{deployment}: {e}")),
    }
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let running = match deployments.get_opt(deployment).await {
            Ok(d) => d
                .and_then(|d| d.status)
                .and_then(|s| s.replicas)
                .unwrap_or(0),
            Err(e) => return Err(format!("deployment {namespace}/{deployment}: {e}")),
        };
        if running == 0 {
            break;
        }
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "deployment {namespace}/{deployment} still runs {running} replica(s) after {} s; a running controller would put the finalizers back",
                timeout.as_secs()
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    Ok(let_go_of_every_policy(client).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_deployment_that_is_gone_deleting_or_at_zero_means_the_last_controller() {
        let d = |v: serde_json::Value| -> Deployment { serde_json::from_value(v).unwrap() };
        assert!(last_one(None));
        assert!(last_one(Some(&d(json!({"metadata": {"name": "c",
            "deletionTimestamp": "2026-11-25T00:00:00Z"}, "spec": {"replicas": 2,
            "selector": {}, "template": {}}})))));
        assert!(last_one(Some(&d(json!({"metadata": {"name": "c"},
            "spec": {"replicas": 0, "selector": {}, "template": {}}})))));
        assert!(!last_one(Some(&d(json!({"metadata": {"name": "c"},
            "spec": {"replicas": 1, "selector": {}, "template": {}}})))));
        // No replicas field: the default, one.
        assert!(!last_one(Some(&d(json!({"metadata": {"name": "c"},
            "spec": {"selector": {}, "template": {}}})))));
    }
}
