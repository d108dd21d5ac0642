//! Leaving a policy is as gradual as joining one: the real controller and a real agent
//! per simulated node, on a control plane of their own. A deleted override hands each
//! node back to the pool's policy through that policy's rollout while every node keeps
//! the values of one policy or the other (sampled from its cgroup files every 20 ms);
//! a selector that shrinks releases its nodes one batch after another; `kubectl
//! nodemem release --now` lets the rest go at once; a controller stopped while its
//! Deployment is scaled to zero lets go of every policy, so none is left Terminating.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use nodemem_api::{NodeMemoryConfig, NodeMemoryPolicy};
use nodemem_testkit::kubelet::FakeKubelet;
use nodemem_testkit::Identity;
use serde_json::{json, Value};

use crate::agent::{app_cgroup, spawn_agents};
use crate::common::{
    condition, create_app_pod, create_namespace, dynamic, eventually, longest_outside,
    own_control_plane, pool_nodes, reports_good, spawn_controller_with, Sampler,
};

const NODES: [&str; 3] = ["ho-1", "ho-2", "ho-3"];

fn policy(name: &str, pool: &str, priority: i32, factor: f64, min_ready: i32) -> Value {
    json!({
        "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {"nodemem.io/pool": pool}},
            "priority": priority,
            "memoryQoS": {"throttlingFactor": factor, "reservationPolicy": "TieredReservation"},
            "rollout": {"maxUnavailable": 1, "minReadySeconds": min_ready}},
    })
}

/// A node's config deleted 50 times in a row, every re-created one reported; an
/// override at priority 1 deleted while it runs on two nodes: each node's container
/// memory.high sampled every 20 ms never holds a value of neither policy (0.000 s), no
/// config is deleted, owners change, `kubectl get nmp -o wide` shows `Releasing` with
/// `TARGET` and `LEAVING`, every `NodesUpdating` batch is an Event line of its own; a
/// selector shrunk to nothing releases one node per minReadySeconds and deletes the
/// configs at the end; `kubectl nodemem release --now` (refused for a live policy and
/// without `--now`) lets a deleted policy's held nodes go at once; a restarted
/// controller keeps the finalizers, one stopped while its Deployment is at zero lets go
/// of every policy and a deletion then needs no controller.
#[tokio::test]
async fn leaving_a_policy_is_a_rollout_and_never_strands_one() {
    let cp = own_control_plane().await;
    let client = cp.client(&Identity::Admin).await.unwrap();
    let named: Vec<(&str, &str)> = NODES.iter().map(|n| (*n, "ho")).collect();
    let trees = pool_nodes(&client, &named).await;
    let _kubelet = FakeKubelet::start(client.clone(), trees.clone());
    create_namespace(&client, "work").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "work");
    for node in NODES {
        create_app_pod(&pods, node, "64Mi", "256Mi").await;
    }
    let dir = tempfile::tempdir().unwrap();
    let agents = spawn_agents(&cp, &trees, dir.path()).await;
    let plugin_dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        nodemem_e2e::nodemem(),
        plugin_dir.path().join("kubectl-nodemem"),
    )
    .unwrap();
    let admin = cp.admin_kubeconfig().to_path_buf();
    let user = |args: &[&str]| crate::common::kubectl_with_plugin(&admin, plugin_dir.path(), args);

    // The controller as the chart runs it: it knows its Deployment (created here; no
    // kubelet runs its pods, the process below is the replica).
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), "nodemem-system");
    deployments
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "nodemem-controller"},
                "spec": {"replicas": 1,
                    "selector": {"matchLabels": {"app": "nodemem-controller"}},
                    "template": {"metadata": {"labels": {"app": "nodemem-controller"}},
                        "spec": {"containers": [{"name": "controller", "image": "nodemem:test"}]}}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let controller_kubeconfig = cp.kubeconfig(&Identity::Controller).await.unwrap();
    let controller_log = dir.path().join("controller.log");
    let start_controller = || {
        spawn_controller_with(
            &controller_kubeconfig,
            "replica-a",
            "nodemem:test",
            &controller_log,
            &[
                "--namespace=nodemem-system",
                "--deployment=nodemem-controller",
            ],
        )
    };
    let mut controller = start_controller();
    let logs = || {
        format!(
            "controller log:\n{}\nagent ho-1 log:\n{}",
            std::fs::read_to_string(&controller_log).unwrap_or_default(),
            agents["ho-1"].log()
        )
    };

    let policies = dynamic::<NodeMemoryPolicy>(&client);
    let configs = dynamic::<NodeMemoryConfig>(&client);
    let create = |p: Value| {
        let policies = policies.clone();
        async move {
            policies
                .create(&PostParams::default(), &serde_json::from_value(p).unwrap())
                .await
                .unwrap()
        }
    };
    let status_of = |name: &'static str| {
        let policies = policies.clone();
        async move {
            let p = policies.get_opt(name).await.unwrap()?;
            Some((
                p.metadata.clone(),
                p.data.get("status").cloned().unwrap_or_default(),
            ))
        }
    };
    // Every node's config on `policy`, reported good.
    let all_on = |policy: &'static str| {
        let configs = configs.clone();
        async move {
            let list = configs.list(&Default::default()).await.ok()?;
            let on = list
                .items
                .iter()
                .filter(|c| c.data["spec"]["policy"] == policy && reports_good(c))
                .count();
            (on == NODES.len()).then_some(())
        }
    };

    create(policy("ho-general", "ho", 0, 0.9, 2)).await;
    eventually(
        "ho-general on every node",
        Duration::from_secs(90),
        &logs,
        async || all_on("ho-general").await,
    )
    .await;
    let (meta, _) = eventually(
        "the handoff finalizer",
        Duration::from_secs(30),
        &logs,
        async || {
            let (meta, s) = status_of("ho-general").await?;
            meta.finalizers
                .iter()
                .flatten()
                .any(|f| f == nodemem_api::HANDOFF_FINALIZER)
                .then_some((meta, s))
        },
    )
    .await;
    let general_uid = meta.uid.clone().unwrap();

    // 0. A node's config deleted by hand, 50 times in a row: the controller creates it
    //    again and its agent reports every new one (its status used to be skipped when
    //    it read the same as the deleted one's).
    let mut slowest = Duration::ZERO;
    for round in 0..50 {
        let before = configs.get("ho-1").await.unwrap();
        let old_uid = before.metadata.uid.clone();
        let started = Instant::now();
        configs
            .delete("ho-1", &DeleteParams::default())
            .await
            .unwrap();
        eventually(
            &format!("round {round}: the re-created config of ho-1 reported"),
            Duration::from_secs(20),
            &logs,
            async || {
                let c = configs.get_opt("ho-1").await.ok()??;
                (c.metadata.uid != old_uid && reports_good(&c)).then_some(())
            },
        )
        .await;
        slowest = slowest.max(started.elapsed());
    }
    eprintln!(
        "a config deleted 50 times: every re-created one reported, the slowest after {:.2} s",
        slowest.as_secs_f64()
    );
    let mut files = Vec::new();
    for node in NODES {
        let cgroup = app_cgroup(&pods, &format!("app-{node}")).await;
        files.push((
            node.to_string(),
            trees[node].root().join(cgroup).join("memory.high"),
        ));
    }
    let high = |file: &Path| {
        std::fs::read_to_string(file)
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    let general_high = high(&files[0].1);
    assert_ne!(general_high, "max");

    // 0b. Every config deleted at once (`kubectl delete nmc --all`): the controller
    //     writes each again at once at the revision its node ran (a repair, not a
    //     rollout step of minReadySeconds each), and no agent gives its values back in
    //     the meantime (it keeps them for a grace, `node_sync::grace`). Sampled through
    //     the grace and after it.
    let uids: Vec<Option<String>> = configs
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| c.metadata.uid.clone())
        .collect();
    let sampler = Sampler::start(files.clone());
    let started = Instant::now();
    let deleted = user(&["delete", "nmc", "--all"]);
    assert_eq!(deleted.code, 0, "{}", deleted.stderr);
    eventually(
        "every config written again and reported",
        Duration::from_secs(30),
        &logs,
        async || {
            let list = configs.list(&Default::default()).await.ok()?;
            let fresh = list
                .items
                .iter()
                .filter(|c| !uids.contains(&c.metadata.uid) && reports_good(c))
                .filter(|c| c.data["spec"]["policy"] == "ho-general")
                .count();
            (fresh == NODES.len()).then_some(())
        },
    )
    .await;
    let repaired = started.elapsed();
    tokio::time::sleep(Duration::from_secs(12)).await;
    let samples = sampler.finish();
    let outside = longest_outside(&samples, |_, v| v == general_high);
    eprintln!(
        "kubectl delete nmc --all: every config written again and reported after {:.2} s; {} samples; longest time a node ran without its values: {outside:?}",
        repaired.as_secs_f64(),
        samples.len()
    );
    assert!(samples.len() > 100, "{} samples", samples.len());
    assert!(
        outside.values().all(|d| d.is_zero()),
        "a node ran without nodemem's values after its config was deleted: {outside:?}"
    );

    // 1. An override at priority 1, deleted mid-rollout: its nodes go back through
    //    ho-general's rollout; no config is deleted; no node runs neither policy.
    let sampler = Sampler::start(files.clone());
    create(policy("ho-overlap", "ho", 1, 0.8, 2)).await;
    // Two nodes on the override (the third waits for a slot): handing them back takes
    // ho-general's rollout at least one minReadySeconds.
    let overlap_high = eventually(
        "the override on two nodes",
        Duration::from_secs(60),
        &logs,
        async || {
            let moved: Vec<String> = files
                .iter()
                .map(|(_, file)| high(file))
                .filter(|v| *v != general_high && v != "max")
                .collect();
            (moved.len() >= 2).then(|| moved[0].clone())
        },
    )
    .await;
    let (mut config_watch, _) = crate::common::watch_configs(&client).await;
    let deletes = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = deletes.clone();
    let watcher = tokio::spawn(async move {
        use kube::runtime::watcher::Event;
        while let Some(Ok(e)) = futures::StreamExt::next(&mut config_watch).await {
            if let Event::Delete(c) = e {
                seen.lock()
                    .unwrap()
                    .push(c.metadata.name.unwrap_or_default());
            }
        }
    });
    assert_eq!(
        user(&["delete", "nmp", "ho-overlap", "--wait=false"]).code,
        0
    );
    let wide = eventually(
        "ho-overlap Releasing",
        Duration::from_secs(30),
        &logs,
        async || {
            let out = user(&["get", "nmp", "ho-overlap", "-o", "wide"]);
            out.stdout.contains("Releasing").then_some(out.stdout)
        },
    )
    .await;
    eprintln!("while the override's nodes leave it:\n{wide}");
    let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    assert!(
        header.ends_with(&[
            "REVISION",
            "TARGET",
            "LEAVING",
            "MEMORYHIGH",
            "EXCLUDED",
            "RECLAIM"
        ]),
        "{wide}"
    );
    eventually(
        "the override gone",
        Duration::from_secs(90),
        &logs,
        async || status_of("ho-overlap").await.is_none().then_some(()),
    )
    .await;
    eventually(
        "ho-general on every node again",
        Duration::from_secs(60),
        &logs,
        async || all_on("ho-general").await,
    )
    .await;
    let samples = sampler.finish();
    watcher.abort();
    // Each batch of each revision is an Event line of its own (kube-runtime's recorder
    // folded them into one series that kept the first batch's words).
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let updating: Vec<(String, i32)> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("NodesUpdating")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("ho-general")
        })
        .map(|e| (e.note.unwrap_or_default(), e.series.map_or(1, |s| s.count)))
        .collect();
    let notes: std::collections::BTreeSet<&String> = updating.iter().map(|(n, _)| n).collect();
    assert!(updating.len() >= 3, "{updating:?}");
    assert_eq!(
        notes.len(),
        updating.len(),
        "one line per batch: {updating:?}"
    );
    assert!(
        notes.iter().any(|n| n.contains("ho-1")) && notes.iter().any(|n| n.contains("ho-2")),
        "{updating:?}"
    );
    let outside = longest_outside(&samples, |_, v| v == general_high || v == overlap_high);
    let worst = outside.values().max().copied().unwrap_or_default();
    eprintln!(
        "handoff of a deleted override: {} samples; longest time a node ran the values of neither policy: {:.3} s ({outside:?})",
        samples.len(),
        worst.as_secs_f64()
    );
    assert_eq!(worst, Duration::ZERO, "{outside:?}\n{}", logs());
    assert!(
        samples.iter().any(|s| s.2 == overlap_high),
        "the override reached a node"
    );
    let deleted = deletes.lock().unwrap().clone();
    assert!(deleted.is_empty(), "configs deleted: {deleted:?}");
    for c in configs.list(&Default::default()).await.unwrap().items {
        let owners = c.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(
            owners.iter().map(|o| o.uid.as_str()).collect::<Vec<_>>(),
            [general_uid.as_str()],
            "{:?} changed owner",
            c.metadata.name
        );
    }

    // 2. The selector shrinks to nothing: released one node at a time, each after the
    //    one before was ready for minReadySeconds (2 s); the configs go at the end.
    let sampler = Sampler::start(files.clone());
    policies
        .patch(
            "ho-general",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"nodeSelector": {"matchLabels": {"nodemem.io/pool": "nowhere"}}}}),
            ),
        )
        .await
        .unwrap();
    eventually(
        "every node released",
        Duration::from_secs(90),
        &logs,
        async || {
            let list = configs.list(&Default::default()).await.ok()?;
            list.items.is_empty().then_some(())
        },
    )
    .await;
    let samples = sampler.finish();
    let mut released_at: Vec<Instant> = NODES
        .iter()
        .map(|n| {
            samples
                .iter()
                .find(|s| s.1 == *n && s.2 == "max")
                .unwrap_or_else(|| panic!("{n} never released"))
                .0
        })
        .collect();
    released_at.sort();
    let gaps: Vec<f64> = released_at
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    eprintln!("a shrinking selector released the nodes {gaps:?} s apart");
    assert!(gaps.iter().all(|g| *g >= 1.5), "one at a time: {gaps:?}");
    eventually(
        "ho-general settled",
        Duration::from_secs(30),
        &logs,
        async || {
            let (_, s) = status_of("ho-general").await?;
            (condition(&s, "Progressing")?["reason"] == "Complete" && s["leavingNodes"] == 0)
                .then_some(())
        },
    )
    .await;

    // 3. Back in the pool; deleted with no other policy and a long minReadySeconds: one
    //    node is released, the rest wait; `release --now` lets them go at once.
    policies
        .patch(
            "ho-general",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"nodeSelector": {"matchLabels": {"nodemem.io/pool": "ho"}},
                "rollout": {"minReadySeconds": 600, "progressDeadlineSeconds": 1200, "maxUnavailable": 3}}}),
            ),
        )
        .await
        .unwrap();
    eventually(
        "ho-general back on every node",
        Duration::from_secs(60),
        &logs,
        async || all_on("ho-general").await,
    )
    .await;
    policies
        .patch(
            "ho-general",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"rollout": {"maxUnavailable": 1}}})),
        )
        .await
        .unwrap();
    let refused = user(&["nodemem", "release", "ho-general", "--now"]);
    assert_eq!(refused.code, 1, "{}", refused.stdout);
    assert!(
        refused
            .stderr
            .contains("is not being deleted: delete it first"),
        "{}",
        refused.stderr
    );
    let without_now = user(&["nodemem", "release", "ho-general"]);
    assert_eq!(without_now.code, 1);
    assert!(
        without_now.stderr.contains("needs --now"),
        "{}",
        without_now.stderr
    );
    policies
        .delete("ho-general", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "one node released, the rest held",
        Duration::from_secs(30),
        &logs,
        async || {
            let released = files.iter().filter(|(_, file)| high(file) == "max").count();
            (released == 1).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let released = files.iter().filter(|(_, file)| high(file) == "max").count();
    assert_eq!(released, 1, "the next waits minReadySeconds");
    let status = user(&["nodemem", "status"]);
    eprintln!("{}", status.stdout);
    let now = user(&["nodemem", "release", "ho-general", "--now"]);
    assert_eq!(now.code, 0, "{}", now.stderr);
    assert!(
        now.stdout.contains("released now: its 3 remaining node(s)"),
        "{}",
        now.stdout
    );
    eventually(
        "ho-general gone, every node released",
        Duration::from_secs(30),
        &logs,
        async || {
            let gone = status_of("ho-general").await.is_none();
            let all = files.iter().all(|(_, file)| high(file) == "max");
            (gone && all).then_some(())
        },
    )
    .await;

    // 4. A restarted controller keeps the finalizers; one stopped while its Deployment
    //    is at zero replicas lets go of every policy: deleting one then needs nobody.
    create(policy("ho-kept", "ho", 0, 0.9, 0)).await;
    let held = async || {
        let (meta, _) = status_of("ho-kept").await?;
        Some(
            meta.finalizers
                .iter()
                .flatten()
                .any(|f| f == nodemem_api::HANDOFF_FINALIZER),
        )
    };
    eventually("ho-kept held", Duration::from_secs(30), &logs, async || {
        held().await.filter(|h| *h)
    })
    .await;
    assert!(controller.terminate().success());
    assert_eq!(held().await, Some(true), "a restart keeps the finalizer");
    assert!(std::fs::read_to_string(&controller_log)
        .unwrap()
        .contains("another controller follows"));
    controller = start_controller();
    eventually(
        "the restarted controller leads",
        Duration::from_secs(30),
        &logs,
        async || {
            let log = std::fs::read_to_string(&controller_log).unwrap_or_default();
            (log.matches("leading").count() >= 2).then_some(())
        },
    )
    .await;
    eventually(
        "ho-kept on every node",
        Duration::from_secs(60),
        &logs,
        async || all_on("ho-kept").await,
    )
    .await;
    deployments
        .patch(
            "nodemem-controller",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap();
    // It sees the scale through its watch of the Deployment and stops deciding before
    // any SIGTERM (an uninstall's hook removes next what it would put back).
    eventually(
        "stood down before its SIGTERM",
        Duration::from_secs(10),
        &logs,
        async || held().await.filter(|h| !*h),
    )
    .await;
    assert!(logs().contains("stopped deciding"), "{}", logs());
    assert!(controller.terminate().success());
    assert_eq!(held().await, Some(false), "stood down:\n{}", logs());
    let started = Instant::now();
    policies
        .delete("ho-kept", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "ho-kept deleted with no controller",
        Duration::from_secs(30),
        &logs,
        async || status_of("ho-kept").await.is_none().then_some(()),
    )
    .await;
    eprintln!(
        "with the controller scaled to zero a policy deletes in {:.2} s",
        started.elapsed().as_secs_f64()
    );
}
