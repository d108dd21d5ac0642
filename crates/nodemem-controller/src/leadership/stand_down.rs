//! A controller that stops for good stands down: a leader stopped (SIGTERM, SIGINT)
//! while its Deployment is gone, being deleted or scaled to zero removes its handoff
//! finalizer from every policy, so that no policy is left Terminating without a
//! controller to finish its handoff. A restart or an upgrade (the Deployment stays,
//! with replicas) keeps them: the next leader carries on. A controller also stops
//! deciding the moment its Deployment says so (`no_controller_follows`), before its
//! SIGTERM: an uninstall's hook gives the nodes back and deletes what nodemem created,
//! which a controller still deciding would put back.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams};
use kube::Client;
use nodemem_api::NodeMemoryPolicy;
use tracing::{info, warn};

/// The process was asked to stop (SIGTERM, SIGINT), listened for from its start: a
/// signal that arrives while nobody awaits it (between one wait and the next) is not
/// lost. (A listener made only when awaited missed a SIGTERM sent while the controller
/// stood down, and the process never ended.)
#[derive(Clone)]
pub(crate) struct Stop(tokio::sync::watch::Receiver<bool>);

impl Stop {
    /// Listens from now on; call inside the runtime.
    pub(crate) fn listen() -> Stop {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            signalled().await;
            let _ = tx.send(true);
        });
        Stop(rx)
    }

    /// Resolves once the process was asked to stop (at once if it was before).
    pub(crate) async fn requested(&self) {
        let mut rx = self.0.clone();
        if rx.wait_for(|stop| *stop).await.is_err() {
            // The listener is gone (it cannot watch signals): never.
            std::future::pending::<()>().await;
        }
    }
}

/// Resolves at the next SIGTERM or SIGINT.
async fn signalled() {
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

/// Resolves when the controller's Deployment (`deployment` in `namespace`) is gone,
/// being deleted or scaled to zero, seen through a watch of it by name; never without
/// a Deployment. A watch that fails (an install whose RBAC cannot watch it) is retried
/// with backoff and said once: the controller then stops at its SIGTERM only.
pub(crate) async fn no_controller_follows(
    client: &Client,
    namespace: &str,
    deployment: Option<&str>,
) {
    use futures::StreamExt;
    use kube::runtime::watcher;
    use kube::runtime::WatchStreamExt;
    let Some(name) = deployment else {
        return std::future::pending().await;
    };
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let events = watcher::watcher(
        deployments,
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff();
    futures::pin_mut!(events);
    let mut seen = DeploymentSeen::default();
    let mut warned = false;
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                if !warned {
                    warn!(deployment = %name, error = %e, "cannot watch the controller's Deployment; it stops deciding at its SIGTERM only");
                    warned = true;
                }
                continue;
            }
        };
        if seen.says_last(event) {
            info!(deployment = %name, "the controller's Deployment is gone, being deleted or scaled to zero: stopped deciding");
            return;
        }
    }
    std::future::pending().await
}

/// The controller's Deployment as its watch (by name) told it: whether a list under
/// way has named it.
#[derive(Default)]
struct DeploymentSeen {
    listed: bool,
}

impl DeploymentSeen {
    /// Whether `event` says no controller follows: the Deployment deleted, being
    /// deleted or at zero replicas, or a list that did not name it.
    fn says_last(&mut self, event: kube::runtime::watcher::Event<Deployment>) -> bool {
        use kube::runtime::watcher::Event;
        match event {
            Event::Apply(d) | Event::InitApply(d) => {
                self.listed = true;
                last_one(Some(&d))
            }
            Event::Delete(_) => true,
            Event::Init => {
                self.listed = false;
                false
            }
            Event::InitDone => !self.listed,
        }
    }
}

/// Whether the controller's Deployment says now that no controller follows (a replica
/// that takes the Lease then does not start deciding); false when it cannot be read.
pub(crate) async fn none_follows_now(
    client: &Client,
    namespace: &str,
    deployment: Option<&str>,
) -> bool {
    let Some(name) = deployment else {
        return false;
    };
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    match deployments.get_opt(name).await {
        Ok(d) => last_one(d.as_ref()),
        Err(e) => {
            warn!(deployment = %name, error = %e, "cannot read the controller's Deployment");
            false
        }
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
        let params = kube::api::PatchParams::default();
        match nodemem_plumbing::finalizer::let_go(&policies, &policy, &params).await {
            Ok(true) => released += 1,
            Ok(false) => {}
            Err(e) => warn!(%policy, error = %e, "handoff finalizer not removed"),
        }
    }
    released
}

/// The controller pods `deployment` still has, terminating ones included (its status
/// counts no terminating pod, whose process may still run for its grace period).
async fn pods_left(
    client: &Client,
    namespace: &str,
    deployment: Option<&Deployment>,
) -> Result<usize, kube::Error> {
    let Some(d) = deployment else {
        return Ok(0);
    };
    let replicas = d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let labels = d
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.as_ref())
        .filter(|l| !l.is_empty());
    let Some(labels) = labels else {
        return Ok(usize::try_from(replicas).unwrap_or(0));
    };
    let selector = labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), namespace);
    let listed = pods
        .list_metadata(&ListParams::default().labels(&selector))
        .await?;
    Ok(listed.items.len())
}

/// `nodemem stand-down`, the chart's pre-delete hook: before an uninstall takes the
/// controller's RBAC away, scale the controller to zero, wait until no pod of it is
/// left (terminating ones included; each replica stops deciding when it sees the scale
/// and stands down itself), and let go of every policy. Ok: how many
/// policies it let go of.
/// The annotation Helm sets on every object a release installs (`setMetadataVisitor`,
/// `pkg/action/validate.go`), never in `helm template`'s output.
pub const HELM_RELEASE_ANNOTATION: &str = "meta.helm.sh/release-name";
/// The annotation Argo CD tracks the objects of an Application by (its default from
/// v3.0): Argo CD runs the chart's hook only when it deletes the Application.
pub const ARGOCD_TRACKING_ANNOTATION: &str = "argocd.argoproj.io/tracking-id";

/// Whether the chart's uninstall hook of Helm release `release` may stand the
/// controller down: only where its Deployment (`annotations`) was installed by that
/// release or is tracked by Argo CD, whose uninstalls are the only times they run the
/// hook. `helm template | kubectl apply` creates the hook's Job at install time, where
/// it would scale the controller to zero and give every node back.
pub fn hook_may_run(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
    release: &str,
    deployment: &str,
) -> Result<(), String> {
    let by_helm = annotations.and_then(|a| a.get(HELM_RELEASE_ANNOTATION));
    let by_argocd = annotations.is_some_and(|a| a.contains_key(ARGOCD_TRACKING_ANNOTATION));
    match (annotations, by_helm) {
        (_, Some(r)) if r == release => Ok(()),
        _ if by_argocd => Ok(()),
        (None, _) => Err(format!(
            "refusing to stand down as the uninstall hook of Helm release {release}: there is no Deployment {deployment}, so this cannot be told from a hook run outside an uninstall; to give every node back by hand, run nodemem stand-down --give-back without --hook-of-release"
        )),
        (Some(_), Some(other)) => Err(format!(
            "refusing to stand down as the uninstall hook of Helm release {release}: Deployment {deployment} belongs to Helm release {other}; nothing was changed"
        )),
        (Some(_), None) => Err(format!(
            "refusing to stand down as the uninstall hook of Helm release {release}: Deployment {deployment} was installed neither by Helm ({HELM_RELEASE_ANNOTATION}) nor by Argo CD ({ARGOCD_TRACKING_ANNOTATION}), so this hook runs outside an uninstall (helm template | kubectl apply creates it at install: render with --no-hooks); nothing was changed. To give every node back by hand, run nodemem stand-down --give-back without --hook-of-release"
        )),
    }
}

/// [`hook_may_run`] against the Deployment as the apiserver has it.
pub async fn check_hook(
    client: &Client,
    namespace: &str,
    deployment: &str,
    release: &str,
) -> Result<(), String> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let found = deployments
        .get_opt(deployment)
        .await
        .map_err(|e| format!("deployment {namespace}/{deployment}: {e}"))?;
    hook_may_run(
        found
            .as_ref()
            .map(|d| d.metadata.annotations.clone().unwrap_or_default())
            .as_ref(),
        release,
        deployment,
    )
}

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
            Ok(d) => pods_left(client, namespace, d.as_ref())
                .await
                .map_err(|e| format!("pods of deployment {namespace}/{deployment}: {e}"))?,
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
mod hook_tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn the_hook_stands_down_only_in_an_uninstall_of_its_release() {
        let with = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        let helm = with(HELM_RELEASE_ANNOTATION, "nodemem");
        assert!(hook_may_run(Some(&helm), "nodemem", "nodemem-controller").is_ok());
        let argocd = with(
            ARGOCD_TRACKING_ANNOTATION,
            "app:apps/Deployment:ns/nodemem-controller",
        );
        assert!(hook_may_run(Some(&argocd), "nodemem", "nodemem-controller").is_ok());
        let e = hook_may_run(Some(&BTreeMap::new()), "nodemem", "nodemem-controller").unwrap_err();
        assert!(
            e.contains("helm template | kubectl apply") && e.contains("nothing was changed"),
            "{e}"
        );
        let e = hook_may_run(
            Some(&with(HELM_RELEASE_ANNOTATION, "other")),
            "nodemem",
            "d",
        )
        .unwrap_err();
        assert!(e.contains("belongs to Helm release other"), "{e}");
        let e = hook_may_run(None, "nodemem", "d").unwrap_err();
        assert!(e.contains("there is no Deployment d"), "{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_deployments_watch_says_last_when_it_goes_to_zero_is_deleted_or_is_not_listed() {
        use kube::runtime::watcher::Event;
        let d = |replicas: i32| -> Deployment {
            serde_json::from_value(json!({"metadata": {"name": "c"},
                "spec": {"replicas": replicas, "selector": {}, "template": {}}}))
            .unwrap()
        };
        let mut seen = DeploymentSeen::default();
        assert!(!seen.says_last(Event::Init));
        assert!(!seen.says_last(Event::InitApply(d(2))));
        assert!(!seen.says_last(Event::InitDone), "listed with replicas");
        assert!(!seen.says_last(Event::Apply(d(1))));
        assert!(seen.says_last(Event::Apply(d(0))), "scaled to zero");
        assert!(seen.says_last(Event::Delete(d(1))), "deleted");
        // A relist that does not name it: gone while the watch was away.
        assert!(!seen.says_last(Event::Init));
        assert!(seen.says_last(Event::InitDone));
    }

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
