//! A pool under `enforcement: Observe` gets a throttling-factor recommendation (issue
//! 19): real agents observe their containers' working sets, the real controller sums
//! their tallies into the policy's `status.recommendation`, and `kubectl nodemem
//! recommend` prints it through kubectl's plugin mechanism; `-o yaml` gives the policy
//! with that factor, which `kubectl nodemem diff -f` and `kubectl apply -f` take.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nodemem_api::NodeMemoryPolicy;
use nodemem_testkit::kubelet::FakeKubelet;
use nodemem_testkit::{ControlPlane, Identity};
use serde_json::{json, Value};

use crate::agent::{app_cgroup, spawn_agent, AgentProcess};
use crate::common::{
    create_namespace, create_pod, dynamic, eventually, own_control_plane, pool_nodes,
    spawn_controller,
};

const MI: i64 = 1 << 20;
const NS: &str = "rec-work";

/// `kubectl ARGS` with the plugin on PATH, as a user's shell has it.
fn kubectl(cp: &ControlPlane, plugin_dir: &Path, args: &[&str]) -> crate::common::Ran {
    crate::common::kubectl_with_plugin(cp.admin_kubeconfig(), plugin_dir, args)
}

async fn recommendation(client: &kube::Client) -> Option<Value> {
    let p = dynamic::<NodeMemoryPolicy>(client).get("rec").await.ok()?;
    let r = p.data["status"].get("recommendation")?.clone();
    Some(r)
}

#[tokio::test]
async fn an_observed_pool_gets_a_recommendation_and_kubectl_nodemem_recommend_prints_it() {
    let cp = own_control_plane().await;
    let client = cp.client(&Identity::Admin).await.unwrap();
    let trees = pool_nodes(&client, &[("rec-1", "rec"), ("rec-2", "rec")]).await;
    let _kubelet = FakeKubelet::start(client.clone(), trees.clone());
    create_namespace(&client, NS).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    // Working sets, MiB, of containers with request 64Mi and limit 256Mi: each needs
    // factor (ws - 64) / 192 to stay under memory.high. At 80 %, each node's five must
    // have four fitting as well as the pool's ten (one node must not steer its pool,
    // so in a pool of two each node's containers alone must reach the target): 150Mi
    // needs 0.45, which is the recommendation; 240Mi needs 0.92, so the current 0.8
    // throttles one in ten. At 0.4 rec-1 alone has three of five (60 %).
    let usage = [
        ("rec-1", [100, 150, 240, 120, 130]),
        ("rec-2", [120, 130, 140, 110, 100]),
    ];
    for (node, _) in &usage {
        for i in 0..5 {
            create_pod(
                &pods,
                json!({"metadata": {"name": format!("app-{node}-{i}")},
                    "spec": {"nodeName": node, "containers": [{"name": "app", "image": "x",
                        "resources": {"requests": {"memory": "64Mi"}, "limits": {"memory": "256Mi"}}}]}}),
            )
            .await;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut agents: Vec<AgentProcess> = Vec::new();
    for (node, tree) in &trees {
        let kubeconfig = cp.kubeconfig(&Identity::Agent(node.clone())).await.unwrap();
        let node_dir = dir.path().join(node);
        std::fs::create_dir_all(&node_dir).unwrap();
        agents.push(spawn_agent(
            node,
            tree.root(),
            &node_dir,
            &kubeconfig,
            "agent.log",
        ));
    }
    let controller_kubeconfig = cp.kubeconfig(&Identity::Controller).await.unwrap();
    let controller_log = dir.path().join("controller.log");
    let _controller = spawn_controller(
        &controller_kubeconfig,
        "controller-a",
        "nodemem:test",
        &controller_log,
    );
    let logs = || {
        let mut all = std::fs::read_to_string(&controller_log).unwrap_or_default();
        for a in &agents {
            all.push_str(&a.log());
        }
        all
    };
    let policy: NodeMemoryPolicy = serde_json::from_value(json!({
        "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
        "metadata": {"name": "rec", "labels": {"team": "platform"}},
        "spec": {"nodeSelector": {"matchLabels": {"nodemem.io/pool": "rec"}},
            "memoryQoS": {"throttlingFactor": 0.8, "reservationPolicy": "TieredReservation"},
            "enforcement": "Observe",
            "rollout": {"minReadySeconds": 0},
            "recommendation": {"targetPercent": 80, "minContainers": 6}},
    }))
    .unwrap();
    Api::<NodeMemoryPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();

    for (node, ws) in &usage {
        for (i, mib) in ws.iter().enumerate() {
            let path = app_cgroup(&pods, &format!("app-{node}-{i}")).await;
            let tree = &trees[*node];
            eventually(
                "the pod's container cgroup",
                Duration::from_secs(60),
                &logs,
                async || tree.root().join(&path).is_dir().then_some(()),
            )
            .await;
            // Page cache on top, which counts for nothing.
            tree.set_usage(&path, (mib + 30) * MI, 30 * MI).unwrap();
        }
    }

    // Six containers seen, but a day of observation is the default: nothing yet, and
    // the status says what is missing.
    let waiting = eventually(
        "too little evidence",
        Duration::from_secs(90),
        &logs,
        async || {
            let r = recommendation(&client).await?;
            (r["reason"] == "TooLittleEvidence" && r["containers"] == 10 && r["nodes"] == 2)
                .then_some(r)
        },
    )
    .await;
    let message = waiting["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "a recommendation needs at least 6 container(s) with room for a memory.high on at least 2 node(s) (half the pool), each observed for 86400 s (spec.recommendation); so far 10 container(s) on 2 node(s), 2 of them for "
        ),
        "{message}"
    );
    assert!(waiting.get("throttlingFactor").is_none(), "{waiting:#}");
    let revision = dynamic::<NodeMemoryPolicy>(&client)
        .get("rec")
        .await
        .unwrap()
        .data["status"]["revision"]
        .clone();

    // Enough evidence for this test: three seconds.
    Api::<NodeMemoryPolicy>::all(client.clone())
        .patch(
            "rec",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"recommendation": {"minObservationSeconds": 3}}})),
        )
        .await
        .unwrap();
    let r = eventually(
        "a recommendation",
        Duration::from_secs(90),
        &logs,
        async || {
            let r = recommendation(&client).await?;
            (r["reason"] == "Recommended").then_some(r)
        },
    )
    .await;
    assert_eq!(r["throttlingFactor"], 0.45, "{r:#}");
    assert_eq!(r["fittingPercent"], 80.0, "{r:#}");
    assert_eq!(r["currentFactor"], 0.8, "{r:#}");
    assert_eq!(r["currentThrottledPercent"], 10.0, "{r:#}");
    assert_eq!(
        (r["containers"].clone(), r["nodes"].clone()),
        (json!(10), json!(2))
    );
    assert!(r["observedSeconds"].as_i64().unwrap() >= 3, "{r:#}");
    let distribution = r["distribution"].as_array().unwrap();
    assert_eq!(distribution.len(), 20);
    assert_eq!(distribution[7]["factor"], 0.4);
    assert_eq!(distribution[7]["fittingPercent"], 60.0, "{r:#}");
    // The recommendation's own settings are no new revision: nothing rolled out.
    assert_eq!(
        dynamic::<NodeMemoryPolicy>(&client)
            .get("rec")
            .await
            .unwrap()
            .data["status"]["revision"],
        revision
    );
    // Observing wrote nothing: memory.high is the kernel's default everywhere.
    for (node, tree) in &trees {
        for i in 0..5 {
            let path = app_cgroup(&pods, &format!("app-{node}-{i}")).await;
            assert_eq!(tree.read(&path, "memory.high").unwrap(), "max");
        }
    }

    // Through kubectl, as a user types it.
    let plugin_dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        nodemem_e2e::nodemem(),
        plugin_dir.path().join("kubectl-nodemem"),
    )
    .unwrap();
    let table = kubectl(&cp, plugin_dir.path(), &["nodemem", "recommend", "rec"]);
    assert_eq!(table.code, 0, "{}{}", table.stdout, table.stderr);
    let out = &table.stdout;
    assert!(out.contains("Recommended"), "{out}");
    assert!(
        out.contains("throttlingFactor 0.45 keeps 80% of 10 container(s) under memory.high (target 80%); the current 0.8 throttles 10%"),
        "{out}"
    );
    let row = |factor: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(factor))
            .unwrap_or_else(|| panic!("no {factor} row: {out}"))
            .to_string()
    };
    assert!(row("0.45").trim_end().ends_with("recommended"), "{out}");
    assert!(row("0.80").trim_end().ends_with("current"), "{out}");

    let yaml = kubectl(
        &cp,
        plugin_dir.path(),
        &["nodemem", "recommend", "rec", "-o", "yaml"],
    );
    assert_eq!(yaml.code, 0, "{}", yaml.stderr);
    let manifest: Value = serde_yaml::from_str(&yaml.stdout).unwrap();
    assert_eq!(manifest["spec"]["memoryQoS"]["throttlingFactor"], 0.45);
    assert_eq!(manifest["spec"]["enforcement"], "Observe");
    assert_eq!(manifest["metadata"]["labels"]["team"], "platform");
    assert!(manifest.get("status").is_none());
    let file = dir.path().join("rec.yaml");
    std::fs::write(&file, &yaml.stdout).unwrap();
    let diff = kubectl(
        &cp,
        plugin_dir.path(),
        &["nodemem", "diff", "-f", file.to_str().unwrap()],
    );
    assert_ne!(
        diff.code, 2,
        "diff takes the manifest: {}{}",
        diff.stdout, diff.stderr
    );
    assert!(diff.stdout.contains("rec"), "{}", diff.stdout);
    // Committed and applied, it is the new revision, and its observation starts over.
    let applied = kubectl(
        &cp,
        plugin_dir.path(),
        &["apply", "-f", file.to_str().unwrap()],
    );
    assert_eq!(applied.code, 0, "{}", applied.stderr);
    eventually(
        "the new factor observed",
        Duration::from_secs(90),
        &logs,
        async || {
            let p = dynamic::<NodeMemoryPolicy>(&client).get("rec").await.ok()?;
            let r = p.data["status"].get("recommendation")?;
            (p.data["status"]["revision"] != revision && r["currentFactor"] == 0.45).then_some(())
        },
    )
    .await;

    // A policy that does not exist is a clear error, not a panic.
    let missing = kubectl(&cp, plugin_dir.path(), &["nodemem", "recommend", "nope"]);
    assert_eq!(missing.code, 1, "{}", missing.stdout);
    assert!(
        missing.stderr.contains("nodememorypolicy nope"),
        "{}",
        missing.stderr
    );
}
