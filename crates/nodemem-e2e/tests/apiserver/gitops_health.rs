//! What GitOps tools see (issue 41, item 1): every state a policy can be in, created on
//! a control plane of its own with the real controller and real agents, and judged
//! against the live object as the apiserver serves it by each tool's own code: kstatus
//! (sigs.k8s.io/cli-utils) and Flux's fork of it, Flux's evaluator of the shipped
//! Kustomization's `healthCheckExprs` (all built from their modules), `kubectl wait
//! --for=condition=Ready`, and the shipped Argo CD health check run in Lua 5.1. A
//! commit is healthy only when its spec runs on every node the policy governs; what
//! needs a person fails at once; a pause is suspended, not failed. The table in
//! docs/operations.md ("GitOps health") is this test's.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use nodemem_testkit::gitops;
use nodemem_testkit::kubelet::FakeKubelet;
use nodemem_testkit::Identity;
use serde_json::{json, Value};

use crate::agent::spawn_agents;
use crate::common::{condition, eventually, own_control_plane, policies, pool_nodes};

/// What each tool says of a state: kstatus's status (Flux's fork says the same), what
/// Flux's evaluator of the shipped healthCheckExprs says, whether `kubectl wait
/// --for=condition=Ready` passes, Argo CD's health.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Verdict {
    kstatus: String,
    flux_exprs: String,
    wait_passes: bool,
    argocd: String,
}

/// The verdict where Flux's healthCheckExprs agree with kstatus.
fn verdict(kstatus: &str, wait_passes: bool, argocd: &str) -> Verdict {
    Verdict {
        kstatus: kstatus.to_string(),
        flux_exprs: kstatus.to_string(),
        wait_passes,
        argocd: argocd.to_string(),
    }
}

fn spec(pool: &str, factor: f64, rollout: Value) -> Value {
    json!({"nodeSelector": {"matchLabels": {"nodemem.io/pool": pool}},
        "memoryQoS": {"throttlingFactor": factor, "reservationPolicy": "TieredReservation"},
        "rollout": crate::common::no_ready_wait(rollout)})
}

/// Accepted by the schema, refused by nodemem: reservedMemory must add up to
/// kubeReserved + systemReserved + evictionHard (300Mi), as the kubelet requires.
fn unrunnable() -> Value {
    json!({"memoryManager": {"policy": "Static",
            "reservedMemory": [{"numaNode": 0, "limits": {"memory": "200Mi"}}]},
        "nodeReserved": {"kubeReserved": "100Mi", "systemReserved": "100Mi", "evictionHard": "100Mi"}})
}

/// The nodes, by pool; the `dead-*` nodes run no agent, so an update there never
/// reports and fails at its progress deadline.
const NODES: [(&str, &str); 7] = [
    ("gh-ready", "ready"),
    ("gh-paused", "paused"),
    ("gh-prog", "prog"),
    ("gh-invalid", "invalid"),
    ("gh-tie", "tie"),
    ("gh-dead-a", "dead-a"),
    ("gh-dead-b", "dead-b"),
];

struct Judge {
    admin: std::path::PathBuf,
    /// The healthCheckExprs entry of the shipped Flux Kustomization.
    flux_exprs: Value,
    policies: Api<DynamicObject>,
    /// The controller's log, shown when a state is not reached.
    log: std::path::PathBuf,
}

impl Judge {
    fn kubectl(&self, args: &[&str]) -> Result<String, nodemem_testkit::Error> {
        nodemem_testkit::clients::kubectl(&self.admin, args)
    }

    /// The live object as GitOps tools fetch it.
    fn live(&self, name: &str) -> Value {
        let text = self
            .kubectl(&["get", "nmp", name, "-o", "json"])
            .unwrap_or_else(|e| panic!("{e}"));
        serde_json::from_str(&text).unwrap()
    }

    /// The three tools' verdicts on `name` now; `wait` is how long `kubectl wait` may
    /// take (a state that must not pass is given a few seconds to pass anyway).
    fn verdict(&self, name: &str, wait: Duration) -> (Verdict, String) {
        let object = self.live(name);
        let (kstatus, kstatus_message) = gitops::kstatus(&object).unwrap();
        let (flux, flux_message) = gitops::flux_kstatus(&object).unwrap();
        let (flux_exprs, _) = gitops::flux_health_exprs(&object, &self.flux_exprs).unwrap();
        let (argocd, argocd_message) = gitops::argocd_health(&object).unwrap();
        // Flux's fork of kstatus is kstatus for every state here.
        let kstatus = if flux == kstatus {
            kstatus
        } else {
            format!("{kstatus} (Flux's fork: {flux}: {flux_message})")
        };
        let timeout = format!("--timeout={}s", wait.as_secs());
        let waited = self.kubectl(&[
            "wait",
            "--for=condition=Ready",
            &format!("nmp/{name}"),
            &timeout,
        ]);
        let said = format!(
            "kstatus: {kstatus_message}; Argo CD: {argocd_message}; kubectl wait: {}; conditions: {}",
            match &waited {
                Ok(out) => out.trim().to_string(),
                Err(e) => e.to_string(),
            },
            object["status"]["conditions"]
        );
        (
            Verdict {
                kstatus,
                flux_exprs,
                wait_passes: waited.is_ok(),
                argocd,
            },
            said,
        )
    }

    /// Waits until `name`'s status satisfies `settled` (what the controller says of the
    /// state), so that the verdict is on the state and not on the way to it.
    async fn settled(&self, name: &str, what: &str, settled: impl Fn(&Value) -> bool) {
        let policies = self.policies.clone();
        let log = || std::fs::read_to_string(&self.log).unwrap_or_default();
        eventually(what, Duration::from_secs(90), &log, async || {
            let p = policies.get_opt(name).await.ok()??;
            let status = p.data.get("status")?;
            settled(status).then_some(())
        })
        .await;
    }
}

/// Whether `status` has condition `type_` with that status and reason.
fn is(status: &Value, type_: &str, truth: &str, reason: &str) -> bool {
    condition(status, type_).is_some_and(|c| c["status"] == truth && c["reason"] == reason)
}

/// Every policy state (not yet seen, rolling out, complete, paused, rolled back
/// automatically and on request, stopped at maxFailures, an invalid edit held, never
/// accepted, tied, deleted handing off) judged on the live object by kstatus, Flux's
/// fork and healthCheckExprs evaluator (`tests/kstatus`, built from their modules by
/// `tests/scripts/build-kstatus.sh`), `kubectl wait --for=condition=Ready` and the
/// shipped Argo CD health check in Debian's `lua5.1`.
#[tokio::test]
async fn gitops_tools_read_every_policy_state_as_what_its_nodes_run() {
    let cp = own_control_plane().await;
    let client = cp.client(&Identity::Admin).await.unwrap();
    let trees = pool_nodes(&client, &NODES).await;
    let _kubelet = FakeKubelet::start(client.clone(), trees.clone());
    let with_agents: BTreeMap<_, _> = trees
        .iter()
        .filter(|(n, _)| !n.starts_with("gh-dead"))
        .map(|(n, t)| (n.clone(), t.clone()))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let _agents = spawn_agents(&cp, &with_agents, dir.path()).await;
    let kustomization: Value =
        serde_yaml::from_str(&std::fs::read_to_string(gitops::flux_kustomization()).unwrap())
            .unwrap();
    let judge = Judge {
        admin: cp.admin_kubeconfig().to_path_buf(),
        flux_exprs: kustomization["spec"]["healthCheckExprs"][0].clone(),
        policies: policies(client.clone()),
        log: dir.path().join("controller.log"),
    };
    let create = async |name: &str, spec: Value| {
        crate::common::create_policy(&judge.policies, name, spec).await;
    };
    let patch = async |name: &str, patch: Value| {
        judge
            .policies
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    };
    let short = Duration::from_secs(2);
    let mut seen: Vec<(String, Verdict, Verdict, String)> = Vec::new();
    let mut record = |state: &str, name: &str, expected: Verdict, wait: Duration| {
        let (got, said) = judge.verdict(name, wait);
        eprintln!("{state}: {got:?} ({said})");
        seen.push((state.to_string(), expected, got, said));
    };

    // A policy no controller has seen: the apiserver's default observedGeneration 0
    // keeps kstatus from taking it as current before any node ran it.
    create("ready", spec("ready", 0.8, json!({}))).await;
    record(
        "not yet observed",
        "ready",
        verdict("InProgress", false, "Progressing"),
        short,
    );

    create("paused", spec("paused", 0.8, json!({}))).await;
    create(
        "prog",
        spec(
            "prog",
            0.8,
            json!({"minReadySeconds": 3600, "progressDeadlineSeconds": 7200}),
        ),
    )
    .await;
    create("invalid", spec("invalid", 0.8, json!({}))).await;
    create("tie-a", spec("tie", 0.8, json!({}))).await;
    create("tie-b", spec("tie", 0.7, json!({}))).await;
    let mut never = spec("never", 0.8, json!({}));
    never.as_object_mut().unwrap().extend(
        unrunnable()
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    create("never", never).await;
    let failing = |policy: &str| json!({"failurePolicy": policy, "progressDeadlineSeconds": 10});
    create("rollback", spec("dead-a", 0.8, failing("Rollback"))).await;
    create("maxfail", spec("dead-b", 0.8, failing("Pause"))).await;
    let _controller = crate::common::spawn_controller(
        &cp.kubeconfig(&Identity::Controller).await.unwrap(),
        "gitops-health",
        "nodemem:test",
        &judge.log,
    );

    for name in ["ready", "paused", "invalid"] {
        judge
            .settled(name, &format!("{name} Ready"), |s| {
                is(s, "Ready", "True", "AllNodesReady")
            })
            .await;
    }
    record(
        "complete",
        "ready",
        verdict("Current", true, "Healthy"),
        Duration::from_secs(30),
    );
    judge
        .settled("prog", "prog updating", |s| {
            is(s, "Reconciling", "True", "Updating")
        })
        .await;
    record(
        "progressing",
        "prog",
        verdict("InProgress", false, "Progressing"),
        short,
    );

    patch(
        "paused",
        json!({"spec": {"memoryQoS": {"throttlingFactor": 0.7}, "rollout": {"paused": true}}}),
    )
    .await;
    judge
        .settled("paused", "paused", |s| is(s, "Ready", "False", "Paused"))
        .await;
    record(
        "paused by the user",
        "paused",
        verdict("InProgress", false, "Suspended"),
        short,
    );

    patch("invalid", json!({"spec": unrunnable()})).await;
    judge
        .settled("invalid", "held on the last accepted revision", |s| {
            is(s, "Stalled", "True", "InvalidSpec") && is(s, "Progressing", "False", "InvalidSpec")
        })
        .await;
    record(
        "an invalid edit held",
        "invalid",
        verdict("Failed", false, "Degraded"),
        short,
    );
    // Each waits for a person: Stalled with its reason, failed to every tool.
    for (state, name, reason) in [
        ("never accepted", "never", "InvalidSpec"),
        (
            "conflicting with an equal priority",
            "tie-a",
            "EqualPriority",
        ),
        (
            "conflicting with an equal priority",
            "tie-b",
            "EqualPriority",
        ),
        ("rolled back automatically", "rollback", "RolledBack"),
        ("paused by maxFailures", "maxfail", "MaxFailures"),
    ] {
        judge
            .settled(name, state, |s| is(s, "Stalled", "True", reason))
            .await;
        record(state, name, verdict("Failed", false, "Degraded"), short);
    }

    // A requested rollback after a complete rollout: the pool runs the revision
    // before the spec's.
    patch(
        "ready",
        json!({"spec": {"memoryQoS": {"throttlingFactor": 0.7}}}),
    )
    .await;
    let second = judge.live("ready")["metadata"]["generation"].clone();
    judge
        .settled("ready", "the second revision ready", |s| {
            s["observedGeneration"] == second && is(s, "Ready", "True", "AllNodesReady")
        })
        .await;
    let revision = judge.live("ready")["status"]["revision"]
        .as_str()
        .unwrap()
        .to_string();
    patch(
        "ready",
        json!({"metadata": {"annotations": {nodemem_api::ROLLBACK_ANNOTATION: revision}}}),
    )
    .await;
    judge
        .settled("ready", "rolled back on request", |s| {
            is(s, "Stalled", "True", "RolledBack") && is(s, "Progressing", "False", "RolledBack")
        })
        .await;
    record(
        "rolled back on request",
        "ready",
        verdict("Failed", false, "Degraded"),
        short,
    );
    // What a pipeline waits on to fail fast (docs/operations.md).
    judge
        .kubectl(&[
            "wait",
            "--for=condition=Stalled",
            "nmp/ready",
            "--timeout=10s",
        ])
        .unwrap_or_else(|e| panic!("kubectl wait for Stalled: {e}"));

    // A deleted policy hands its node back through its rollout (minReadySeconds 3600:
    // the release stays under way while the tools look).
    judge
        .policies
        .delete("prog", &DeleteParams::default())
        .await
        .unwrap();
    judge
        .settled("prog", "prog releasing its node", |s| {
            is(s, "Reconciling", "True", "Releasing")
        })
        .await;
    // Flux's healthCheckExprs evaluator does not look at deletionTimestamp: it reads
    // Reconciling, as the expressions say.
    record(
        "deleted, handing off",
        "prog",
        Verdict {
            flux_exprs: "InProgress".to_string(),
            ..verdict("Terminating", false, "Progressing")
        },
        short,
    );

    let wrong: Vec<String> = seen
        .iter()
        .filter(|(_, expected, got, _)| expected != got)
        .map(|(state, expected, got, said)| {
            format!("{state}: expected {expected:?}, got {got:?} ({said})")
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{}\ncontroller log:\n{}",
        wrong.join("\n"),
        std::fs::read_to_string(dir.path().join("controller.log")).unwrap_or_default()
    );
    assert_eq!(seen.len(), 12, "every state judged");
}
