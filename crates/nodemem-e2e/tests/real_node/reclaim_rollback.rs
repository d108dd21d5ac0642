//! Phase "reclaim", second: a revision whose reclaim takes what a pod reads is rolled
//! back by the refault gate, on the real kernel.
//!
//! From that Active revision, a revision whose reclaim heeds neither refaults
//! (`maxRefaultsPerSecond: 1000000`) nor pressure, rolled out with `failurePolicy:
//! Rollback`, `minReadySeconds: 60` and `health.maxRefaultsPerSecond: 20`. The agent
//! measures the hot pod reading back what is taken (`Healthy=False SustainedRefaults`),
//! the controller fails the node and the pool returns by itself: `rolledBackRevision`,
//! `Degraded=True RolledBack`, the node's config back on the careful revision, and the
//! policy's `RollingBack` Event carries the agent's words. Then the spec says the
//! careful revision again and the rollback is cleared. Measured 2026-11-28: "a managed
//! pod reads back 827 evicted page(s) a second (...; tolerated: 20)" (1,164 in another
//! run), back in about 10 s.

use super::reclaim_cold::refaults;
use super::*;

/// A reckless revision: reclaim that heeds neither refaults nor pressure (the largest
/// budgets admission allows), every 2 s, 10 % of a container at a step.
const RECKLESS: &str = r#"{"spec":{"reclaim":{"mode":"Active","intervalSeconds":2,"maxStepPermille":100,
    "maxRefaultsPerSecond":1000000,"targetStallMicrosecondsPerSecond":100000},
    "rollout":{"minReadySeconds":60,"failurePolicy":"Rollback","health":{"maxRefaultsPerSecond":20}}}}"#;
/// The careful revision's spec again (reclaim's budgets back to their defaults), and
/// the phase's rollout.
const CAREFUL: &str = r#"{"spec":{"reclaim":{"maxRefaultsPerSecond":null,"targetStallMicrosecondsPerSecond":null},
    "rollout":{"minReadySeconds":0,"failurePolicy":null,"health":null}}}"#;

/// Issue 46's rollback: from an Active revision that leaves the hot pod's page cache
/// alone, a revision whose reclaim ignores refaults and pressure, gated at 20 refaults
/// a second per pod with failurePolicy Rollback. On the node the agent measures the hot
/// pod reading back what was taken (`Healthy=False SustainedRefaults`), the controller
/// fails the node and the pool returns to the revision before, by itself
/// (`rolledBackRevision`, `Degraded=True RolledBack`).
pub(crate) async fn a_reclaim_that_refaults_is_rolled_back(
    node: &mut RealNode,
    bed: &Bed<'_>,
    hot: &str,
) {
    let name = node.name.clone();
    let client = &bed.client;
    let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
    let policies: Api<nodemem_api::NodeMemoryPolicy> = Api::all(client.clone());
    let careful = configs.get(&name).await.unwrap().spec.revision;
    let refaults_before = refaults(node, hot);
    kubectl(
        bed.admin(),
        &["patch", "nmp", "real", "--type=merge", "-p", RECKLESS],
    )
    .unwrap();
    let reckless = eventually(
        "the reckless revision",
        Duration::from_secs(60),
        async || {
            let r = policies.get_status("real").await.ok()?.status?.revision?;
            (r != careful).then_some(r)
        },
    )
    .await;

    // The pool's return: the node back on the careful revision, and the policy saying
    // so (RollingBack on the way, RolledBack once there). The agent's verdict lasts as
    // long as the controller takes to act on it (a second or so on this node); the
    // policy's RollingBack Event keeps it.
    let rolled = within(Duration::from_secs(180), async || {
        let p = policies.get_status("real").await.ok()?.status?;
        let back = configs.get(&name).await.ok()?.spec.revision == careful;
        let settled = p
            .conditions
            .iter()
            .any(|c| c.type_ == "Degraded" && c.reason == "RolledBack");
        (p.rolled_back_revision.as_deref() == Some(reckless.as_str()) && back && settled)
            .then_some(p)
    })
    .await;
    let hot_refaults = refaults(node, hot) - refaults_before;
    let Some(rolled) = rolled else {
        panic!(
            "the reckless revision {reckless} was not rolled back (the hot pod refaulted {hot_refaults} pages): {}",
            kubectl(bed.admin(), &["get", "nmp", "real", "-o", "yaml"]).unwrap_or_default()
        )
    };
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    let message = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("real"))
        .filter(|e| e.reason.as_deref() == Some("RollingBack"))
        .filter_map(|e| e.note)
        .find(|n| n.contains(&reckless))
        .unwrap_or_else(|| panic!("no RollingBack Event names {reckless}: {rolled:?}"));
    assert!(
        message.contains(
            "its agent reports Healthy=False SustainedRefaults: a managed pod reads back "
        ) && message.contains("(memory.stat workingset_refault_*; tolerated: 20)"),
        "{message}"
    );
    assert_eq!(rolled.failed_node_names, vec![name.clone()], "{rolled:?}");
    let degraded = rolled
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .unwrap_or_else(|| panic!("no Degraded condition: {rolled:?}"));
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "RolledBack"),
        "{degraded:?}"
    );
    eprintln!(
        "reclaim rollback: {reckless} rolled back to {careful} ({message}); the hot pod refaulted {hot_refaults} pages meanwhile"
    );
    // Applied again on the careful revision; the spec says it again, and the phase's
    // rollout is back.
    config_applied(
        client,
        bed.admin(),
        &name,
        Some(&reckless),
        Duration::from_secs(120),
    )
    .await;
    kubectl(
        bed.admin(),
        &["patch", "nmp", "real", "--type=merge", "-p", CAREFUL],
    )
    .unwrap();
    eventually(
        "the spec on the careful revision again",
        Duration::from_secs(60),
        async || {
            let s = policies.get_status("real").await.ok()?.status?;
            (s.revision.as_deref() == Some(careful.as_str()) && s.rolled_back_revision.is_none())
                .then_some(())
        },
    )
    .await;
}
