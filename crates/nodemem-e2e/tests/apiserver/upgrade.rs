//! `helm upgrade` in the middle of a rollout (issue 41, item 2): nodemem installed from
//! the chart as released before (`tests/fixtures/chart-previous`, its CRDs included),
//! a pool rolling from one revision to the next, then the documented upgrade: this
//! release's CRDs applied server-side, `helm upgrade` to `charts/nodemem`, the
//! controller replaced. No node loses its values at any moment (each node's container
//! memory.high sampled every 20 ms reads the old revision's or the new one's), no
//! rollout starts over (a node already on the new revision keeps its config's change
//! time), and no revision changes for settings that did not.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use nodemem_testkit::kubelet::FakeKubelet;
use nodemem_testkit::{ControlPlane, Identity};
use serde_json::{json, Value};

use crate::agent::{app_cgroup, spawn_agents};
use crate::common::{
    condition, create_app_pod, create_namespace, eventually, longest_outside, policies, pool_nodes,
    repo, spawn_controller_with, Sampler,
};

const NODES: [(&str, &str); 3] = [("up-1", "up"), ("up-2", "up"), ("up-3", "up")];

#[tokio::test]
async fn a_helm_upgrade_mid_rollout_keeps_every_value_and_every_revision() {
    let cp = tokio::task::spawn_blocking(ControlPlane::start)
        .await
        .unwrap()
        .expect("control plane");
    let admin = cp.admin_kubeconfig().to_path_buf();
    let helm = |args: &[&str]| {
        nodemem_testkit::clients::helm(&admin, args).unwrap_or_else(|e| panic!("{e}"))
    };
    let kubectl = |args: &[&str]| {
        nodemem_testkit::clients::kubectl(&admin, args).unwrap_or_else(|e| panic!("{e}"))
    };
    let previous = repo().join("tests/fixtures/chart-previous");
    let current = repo().join("charts/nodemem");
    helm(&[
        "install",
        "nodemem",
        previous.to_str().unwrap(),
        "-n",
        "nodemem-system",
        "--create-namespace",
        "--set",
        "controller.replicas=1",
    ]);
    nodemem_testkit::crds::install_dir(&cp, &previous.join("crds"))
        .await
        .unwrap();
    let client = cp.client(&Identity::Admin).await.unwrap();
    let trees = pool_nodes(&client, &NODES).await;
    let _kubelet = FakeKubelet::start(client.clone(), trees.clone());
    create_namespace(&client, "up-pods").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "up-pods");
    for (node, _) in NODES {
        create_app_pod(&pods, node, "32Mi", "256Mi").await;
    }
    let dir = tempfile::tempdir().unwrap();
    let _agents = spawn_agents(&cp, &trees, dir.path()).await;
    let log = dir.path().join("controller.log");
    let controller_kubeconfig = cp.kubeconfig(&Identity::Controller).await.unwrap();
    let start_controller = |extra: &[&str]| {
        let mut args = vec![
            "--namespace=nodemem-system",
            "--deployment=nodemem-controller",
        ];
        args.extend_from_slice(extra);
        spawn_controller_with(
            &controller_kubeconfig,
            "upgrade",
            "nodemem:test",
            &log,
            &args,
        )
    };
    let mut controller = start_controller(&[]);
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();

    let policies = policies(client.clone());
    crate::common::create_policy(
        &policies,
        "up",
        json!({"nodeSelector": {"matchLabels": {"nodemem.io/pool": "up"}},
                    "memoryQoS": {"throttlingFactor": 0.8},
                    "rollout": {"maxUnavailable": 1, "minReadySeconds": 8}}),
    )
    .await;
    let status = async || -> Option<Value> {
        policies
            .get_status("up")
            .await
            .ok()?
            .data
            .get("status")
            .cloned()
    };
    let ready_on = async |revision: Option<&str>| -> Option<Value> {
        let s = status().await?;
        let ready = condition(&s, "Ready")?["status"] == "True"
            && s["readyNodes"] == NODES.len()
            && revision.is_none_or(|r| s["revision"] == r);
        ready.then_some(s)
    };
    let first = eventually(
        "the first revision on every node",
        Duration::from_secs(90),
        &logs,
        async || ready_on(None).await,
    )
    .await["revision"]
        .as_str()
        .unwrap()
        .to_string();
    let mut files = Vec::new();
    for (node, _) in NODES {
        let cgroup = app_cgroup(&pods, &format!("app-{node}")).await;
        files.push((
            node.to_string(),
            trees[node].root().join(cgroup).join("memory.high"),
        ));
    }
    let high = |file: &std::path::Path| std::fs::read_to_string(file).unwrap().trim().to_string();
    let first_high = high(&files[0].1);
    assert_ne!(first_high, "max", "the first revision throttles");

    // The next revision, one node at a time; the upgrade comes once one node has it.
    let sampler = Sampler::start(files.clone());
    policies
        .patch(
            "up",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"memoryQoS": {"throttlingFactor": 0.6}}})),
        )
        .await
        .unwrap();
    let second = eventually(
        "one node on the next revision",
        Duration::from_secs(60),
        &logs,
        async || {
            let s = status().await?;
            let r = s["revision"].as_str()?.to_string();
            (r != first && s["updatedNodes"].as_i64()? >= 1 && s["updatedNodes"].as_i64()? < 3)
                .then_some(r)
        },
    )
    .await;
    let changed_at = || {
        let out = kubectl(&[
            "get",
            "nmc",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.spec.revision} {.metadata.annotations.nodemem\\.io/spec-changed-at}{\"\\n\"}{end}",
        ]);
        out.lines()
            .filter(|l| l.contains(&second))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let updated_before = changed_at();
    assert!(!updated_before.is_empty());

    // The upgrade, as docs/operations.md says: the controller's pod goes, the CRDs,
    // the chart, the new controller.
    controller.terminate();
    kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        current.join("crds").to_str().unwrap(),
    ]);
    helm(&[
        "upgrade",
        "nodemem",
        current.to_str().unwrap(),
        "-n",
        "nodemem-system",
        "--set",
        "controller.replicas=1",
    ]);
    let _controller = start_controller(&["--agent-pod-security-labels"]);
    let done = eventually(
        "the next revision on every node after the upgrade",
        Duration::from_secs(120),
        &logs,
        async || ready_on(Some(&second)).await,
    )
    .await;
    let samples = sampler.finish();
    let second_high = high(&files[0].1);
    assert_ne!(second_high, first_high);

    assert_eq!(
        done["revision"],
        second.as_str(),
        "the revision did not change"
    );
    let updated_after = changed_at();
    for line in &updated_before {
        assert!(
            updated_after.contains(line),
            "a node already on the new revision was written again: {line} not in {updated_after:?}"
        );
    }
    let outside = longest_outside(&samples, |_, v| v == first_high || v == second_high);
    assert!(
        outside.values().all(|d| d.is_zero()),
        "a node held neither revision's memory.high: {outside:?} ({} samples)",
        samples.len()
    );
    let history = helm(&["history", "nodemem", "-n", "nodemem-system", "-o", "json"]);
    let history: Value = serde_json::from_str(&history).unwrap();
    assert_eq!(history.as_array().map(Vec::len), Some(2), "{history}");
    assert_eq!(history[1]["status"], "deployed", "{history}");
    eprintln!(
        "helm upgrade mid-rollout: {} samples, every one on revision {first} or {second}; {} node(s) already on {second} kept their config",
        samples.len(),
        updated_before.len()
    );
}
