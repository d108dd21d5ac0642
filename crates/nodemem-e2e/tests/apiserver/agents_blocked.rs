//! An install whose agents cannot start says so at once (issue 41, item 3): on a control
//! plane whose PodSecurity default is baseline, the agents' namespace without labels
//! (as `helm install --create-namespace` makes it, with the chart's
//! `agent.podSecurityLabels=false`) refuses every agent pod. The policy names the cause
//! in Kubernetes' words on each of its nodes within a minute (`AgentsBlocked`, and a
//! Warning Event), not at the progress deadline; once the namespace is labelled and
//! the pods exist, it says nothing keeps them. The agent DaemonSet, edited or deleted
//! by hand, comes back as the controller builds it.

use std::time::Duration;

use kube::api::Api;
use nodemem_testkit::control_plane::Options;
use nodemem_testkit::Identity;
use serde_json::{json, Value};

use crate::common::{condition, eventually, own_control_plane_with, policies, pool_nodes};

const NODES: [(&str, &str); 2] = [("blk-1", "blk"), ("blk-2", "blk")];

#[tokio::test]
async fn agents_refused_at_admission_are_named_on_their_policy_within_a_minute() {
    let cp = own_control_plane_with(Options {
        pod_security_default: Some("baseline".into()),
        ..Options::default()
    })
    .await;
    let admin = cp.admin_kubeconfig().to_path_buf();
    let kubectl = |args: &[&str]| {
        nodemem_testkit::clients::kubectl(&admin, args).unwrap_or_else(|e| panic!("{e}"))
    };
    // The namespace as `helm install --create-namespace` leaves it: no labels.
    kubectl(&[
        "label",
        "namespace",
        "nodemem-system",
        "pod-security.kubernetes.io/enforce-",
        "pod-security.kubernetes.io/audit-",
        "pod-security.kubernetes.io/warn-",
    ]);
    let client = cp.client(&Identity::Admin).await.unwrap();
    let _trees = pool_nodes(&client, &NODES).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("controller.log");
    let _controller = crate::common::spawn_controller_with(
        &cp.kubeconfig(&Identity::Controller).await.unwrap(),
        "agents-blocked",
        "nodemem:test",
        &log,
        &["--namespace=nodemem-system"],
    );
    let policies = policies(client.clone());
    crate::common::create_policy(
        &policies,
        "blk",
        json!({"nodeSelector": {"matchLabels": {"nodemem.io/pool": "blk"}},
                    "memoryQoS": {"throttlingFactor": 0.8},
                    "rollout": {"minReadySeconds": 0}}),
    )
    .await;
    let created = std::time::Instant::now();
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let blocked = |status: &Value, truth: &str| {
        condition(status, "AgentsBlocked")
            .filter(|c| c["status"] == truth)
            .cloned()
    };
    let status_of = async || -> Option<Value> {
        policies
            .get_status("blk")
            .await
            .ok()?
            .data
            .get("status")
            .cloned()
    };
    let said = eventually(
        "AgentsBlocked=True on the policy",
        Duration::from_secs(60),
        &logs,
        async || blocked(&status_of().await?, "True"),
    )
    .await;
    let message = said["message"].as_str().unwrap();
    assert_eq!(said["reason"], "FailedCreate", "{said}");
    assert!(
        message.contains("violates PodSecurity \"baseline:latest\"")
            && message.contains("on 2 node(s)")
            && message.contains("blk-1, blk-2"),
        "{message}"
    );
    eprintln!("AgentsBlocked after {:?}: {message}", created.elapsed());
    // The rollout has not given up on them: no deadline passed. But nothing reaches
    // those nodes without a person: GitOps tools read it as failed now, not at their
    // timeout.
    let status = eventually(
        "Stalled=True AgentsBlocked",
        Duration::from_secs(30),
        &logs,
        async || {
            let status = status_of().await?;
            let stalled = condition(&status, "Stalled")?;
            (stalled["status"] == "True" && stalled["reason"] == "AgentsBlocked").then_some(status)
        },
    )
    .await;
    assert_eq!(
        condition(&status, "Progressing").unwrap()["reason"],
        "Updating",
        "{status}"
    );
    let object = serde_json::to_value(policies.get("blk").await.unwrap()).unwrap();
    let (kstatus, message) = nodemem_testkit::gitops::kstatus(&object).unwrap();
    assert_eq!(kstatus, "Failed", "{message}");
    assert!(message.contains("violates PodSecurity"), "{message}");
    let (argocd, message) = nodemem_testkit::gitops::argocd_health(&object).unwrap();
    assert_eq!(argocd, "Degraded", "{message}");
    let events = kubectl(&[
        "get",
        "events",
        "-A",
        "--field-selector",
        "reason=AgentsBlocked",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(events.contains("violates PodSecurity"), "{events:?}");

    // Labelled, and the DaemonSet synced again (an edit; its controller's backoff after
    // a minute of refusals is minutes): the pods exist, nothing keeps them.
    kubectl(&[
        "label",
        "namespace",
        "nodemem-system",
        "pod-security.kubernetes.io/enforce=privileged",
    ]);
    kubectl(&[
        "annotate",
        "daemonset",
        "nodemem-agent",
        "-n",
        "nodemem-system",
        "nodemem.test/nudge=1",
    ]);
    let cleared = eventually(
        "AgentsBlocked=False once the pods exist",
        Duration::from_secs(60),
        &logs,
        async || blocked(&status_of().await?, "False"),
    )
    .await;
    assert_eq!(cleared["reason"], "AsExpected", "{cleared}");
    let status = status_of().await.unwrap();
    assert_eq!(
        condition(&status, "Stalled").unwrap()["status"],
        "False",
        "{status}"
    );
    let pods: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(client.clone(), "nodemem-system");
    let listed = pods
        .list(&kube::api::ListParams::default().labels("app.kubernetes.io/name=nodemem-agent"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 2, "an agent pod per node");

    the_daemonset_comes_back_when_deleted_or_edited(&kubectl, &client, &logs).await;
}

/// Someone edits the agent DaemonSet's spec (another image) or deletes it: the
/// controller applies its own again (its watch sees a generation it did not write, or
/// none), without waiting for a policy or node change.
async fn the_daemonset_comes_back_when_deleted_or_edited(
    kubectl: &dyn Fn(&[&str]) -> String,
    client: &kube::Client,
    logs: &dyn Fn() -> String,
) {
    use k8s_openapi::api::apps::v1::DaemonSet;
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), "nodemem-system");
    let image_and_uid = async || {
        let ds = daemonsets.get_opt("nodemem-agent").await.ok()??;
        let image = ds.spec?.template.spec?.containers.first()?.image.clone()?;
        Some((image, ds.metadata.uid?))
    };
    let (image, uid) = image_and_uid().await.expect("the agent DaemonSet");
    assert_eq!(image, "nodemem:test");
    kubectl(&[
        "set",
        "image",
        "daemonset/nodemem-agent",
        "-n",
        "nodemem-system",
        "agent=someone/else:1",
    ]);
    eventually(
        "the edited DaemonSet's image set back",
        Duration::from_secs(30),
        logs,
        async || (image_and_uid().await?.0 == "nodemem:test").then_some(()),
    )
    .await;
    kubectl(&[
        "delete",
        "daemonset",
        "nodemem-agent",
        "-n",
        "nodemem-system",
        "--wait=true",
    ]);
    let started = std::time::Instant::now();
    let (image, new_uid) = eventually(
        "the deleted DaemonSet created again",
        Duration::from_secs(30),
        logs,
        async || image_and_uid().await.filter(|(_, u)| *u != uid),
    )
    .await;
    assert_eq!(image, "nodemem:test");
    assert_ne!(new_uid, uid);
    assert!(
        logs().contains("deleted or changed by someone else"),
        "the controller says why it applied the DaemonSet again"
    );
    eprintln!(
        "the deleted agent DaemonSet back after {:.2} s",
        started.elapsed().as_secs_f64()
    );
}
