//! `nodemem check`: whether the controller leads and is ready, as the chart's `helm
//! test` pod asks it after an install or an upgrade: a replica of its Deployment is
//! ready, and the Lease is held by one of the Deployment's pods, ready, renewed within
//! the Lease's duration. What it reads is the apiserver's (no metrics, no port): the
//! same objects `kubectl` shows. The decision is [`leads`], without I/O.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::Client;

/// What the check read.
pub struct Seen<'a> {
    pub deployment: Option<&'a Deployment>,
    pub lease: Option<&'a Lease>,
    /// The Deployment's pods (by its selector).
    pub pods: &'a [Pod],
    pub now: Timestamp,
}

/// Whether `pod` reports the Ready condition True.
fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The answer: Ok with what leads, or Err with what is wrong, each naming the object.
pub fn leads(seen: &Seen<'_>, deployment: &str) -> Result<String, String> {
    let d = seen
        .deployment
        .ok_or_else(|| format!("no Deployment {deployment}"))?;
    let wanted = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let ready_replicas = d
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    if ready_replicas == 0 {
        return Err(format!(
            "Deployment {deployment}: no replica ready (0 of {wanted})"
        ));
    }
    let lease = seen.lease.ok_or_else(|| {
        format!(
            "no Lease {}: no replica has ever led",
            crate::leadership::lease::LEASE
        )
    })?;
    let spec = lease.spec.as_ref();
    let holder = spec
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
        .ok_or_else(|| format!("Lease {}: nobody holds it", crate::leadership::lease::LEASE))?;
    let duration = spec
        .and_then(|s| s.lease_duration_seconds)
        .unwrap_or(15)
        .max(1);
    let renewed = spec
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| t.0)
        .ok_or_else(|| {
            format!(
                "Lease {}: {holder} never renewed it",
                crate::leadership::lease::LEASE
            )
        })?;
    let age = seen.now.duration_since(renewed);
    let age_seconds = age.as_secs_f64();
    if age_seconds > f64::from(duration) {
        return Err(format!(
            "Lease {}: {holder} last renewed it {age_seconds:.0} s ago, past its {duration} s: no replica leads",
            crate::leadership::lease::LEASE
        ));
    }
    let pod = seen
        .pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(holder))
        .ok_or_else(|| {
            format!(
                "Lease {}: its holder {holder} is not a pod of Deployment {deployment}",
                crate::leadership::lease::LEASE
            )
        })?;
    if !ready(pod) {
        return Err(format!("the leader {holder} is not ready"));
    }
    Ok(format!(
        "{holder} leads (renewed {:.0} s ago, within {duration} s); {ready_replicas} of {wanted} replicas of {deployment} ready",
        age_seconds.max(0.0)
    ))
}

/// Reads what [`leads`] decides on.
pub async fn check(
    client: &Client,
    namespace: &str,
    deployment: &str,
    timeout: Duration,
) -> Result<String, String> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let answer = read_and_decide(client, namespace, deployment).await;
        // A leader elected a moment ago, a replica still starting: asked again until
        // the timeout, the last answer stands.
        if answer.is_ok() || std::time::Instant::now() >= deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn read_and_decide(
    client: &Client,
    namespace: &str,
    deployment: &str,
) -> Result<String, String> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let d = deployments
        .get_opt(deployment)
        .await
        .map_err(|e| format!("Deployment {namespace}/{deployment}: {e}"))?;
    let lease = leases
        .get_opt(crate::leadership::lease::LEASE)
        .await
        .map_err(|e| format!("Lease {namespace}/{}: {e}", crate::leadership::lease::LEASE))?;
    let selector = d
        .as_ref()
        .and_then(|d| d.spec.as_ref())
        .and_then(|s| s.selector.match_labels.as_ref())
        .map(|l| {
            l.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let listed = if selector.is_empty() {
        Vec::new()
    } else {
        pods.list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| format!("pods of Deployment {namespace}/{deployment}: {e}"))?
            .items
    };
    leads(
        &Seen {
            deployment: d.as_ref(),
            lease: lease.as_ref(),
            pods: &listed,
            now: Timestamp::now(),
        },
        deployment,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(ready: i32) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "nodemem-controller"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "c"}},
                "template": {"metadata": {}, "spec": {"containers": []}}},
            "status": {"readyReplicas": ready}}))
        .unwrap()
    }

    fn lease(holder: &str, renewed: &str) -> Lease {
        serde_json::from_value(json!({
            "metadata": {"name": "nodemem-controller"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed}}))
        .unwrap()
    }

    fn pod(name: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}}))
        .unwrap()
    }

    #[test]
    fn a_ready_pod_holding_a_fresh_lease_leads_and_everything_else_says_what_is_wrong() {
        let now: Timestamp = "2026-11-30T12:00:10Z".parse().unwrap();
        let d = deployment(2);
        let fresh = lease("c-1", "2026-11-30T12:00:05.000000Z");
        let pods = [pod("c-1", true), pod("c-2", true)];
        let seen =
            |d: Option<&'static Deployment>, l: Option<&'static Lease>, p: &'static [Pod]| Seen {
                deployment: d,
                lease: l,
                pods: p,
                now,
            };
        // (Leaked for the 'static borrows of the table below; a test's few bytes.)
        let d: &'static Deployment = Box::leak(Box::new(d));
        let fresh: &'static Lease = Box::leak(Box::new(fresh));
        let pods: &'static [Pod] = Box::leak(Box::new(pods));
        let ok = leads(&seen(Some(d), Some(fresh), pods), "nodemem-controller").unwrap();
        assert!(ok.starts_with("c-1 leads (renewed 5 s ago"), "{ok}");
        assert!(ok.contains("2 of 2 replicas"), "{ok}");

        let none_ready: &'static Deployment = Box::leak(Box::new(deployment(0)));
        let stale: &'static Lease =
            Box::leak(Box::new(lease("c-1", "2026-11-30T11:59:00.000000Z")));
        let stranger: &'static Lease =
            Box::leak(Box::new(lease("laptop-123", "2026-11-30T12:00:09.000000Z")));
        let empty: &'static Lease = Box::leak(Box::new(lease("", "2026-11-30T12:00:09.000000Z")));
        let unready: &'static [Pod] = Box::leak(Box::new([pod("c-1", false)]));
        for (what, s, says) in [
            (
                "no deployment",
                seen(None, Some(fresh), pods),
                "no Deployment nodemem-controller",
            ),
            (
                "none ready",
                seen(Some(none_ready), Some(fresh), pods),
                "no replica ready (0 of 2)",
            ),
            (
                "no lease",
                seen(Some(d), None, pods),
                "no replica has ever led",
            ),
            (
                "nobody",
                seen(Some(d), Some(empty), pods),
                "nobody holds it",
            ),
            (
                "stale",
                seen(Some(d), Some(stale), pods),
                "70 s ago, past its 15 s",
            ),
            (
                "a stranger",
                seen(Some(d), Some(stranger), pods),
                "is not a pod of Deployment",
            ),
            (
                "unready leader",
                seen(Some(d), Some(fresh), unready),
                "the leader c-1 is not ready",
            ),
        ] {
            let e = leads(&s, "nodemem-controller").unwrap_err();
            assert!(e.contains(says), "{what}: {e}");
        }
    }
}
