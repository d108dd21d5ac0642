//! Write storms (issue 44, item 3), on a control plane of its own with 5,000 nodes:
//! 1. the apiserver's priority and fairness rejects the controller's config writes that
//!    find its one seat taken (429, Retry-After) during the fan-out of a new policy;
//! 2. then, for a minute, an admission webhook that cannot be called fails the writes of
//!    half the nodes (500) while the policy changes.
//!
//! Each fan-out completes; the writes the apiserver refused or failed (its own count),
//! and the log lines the controller wrote about them, stay bounded; the controller's
//! metrics show the writes that waited for their backoff.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::Client;
use nodemem_testkit::Identity;
use serde_json::json;

use crate::common::{
    controller_metrics, metric_in, next_config, own_control_plane, policies, spawn_controller_with,
    watch_configs, ConfigWatch,
};

const NODES: usize = 5000;

/// A priority level of a few seats (about 19 of the test apiserver's 600, see `seats`) that
/// rejects what does not fit at once (no queue, no borrowing), and a flow schema that
/// puts the controller's config writes on it: the apiserver answers 429 with
/// Retry-After to every write that finds the seats taken (the controller writes 64 at
/// a time).
const STORM_APF: &str = "\
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: nodemem-storm}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 8
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse: {type: Reject}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: nodemem-storm}
spec:
  priorityLevelConfiguration: {name: nodemem-storm}
  matchingPrecedence: 500
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects:
    - kind: ServiceAccount
      serviceAccount: {namespace: nodemem-system, name: nodemem-controller}
    resourceRules:
    - verbs: [patch]
      apiGroups: [nodemem.io]
      resources: [nodememoryconfigs]
      clusterScope: true
";

/// NODES Node objects `storm-NNNNN` in pool `storm`, 32 created at a time.
async fn create_nodes(client: &Client) {
    crate::common::create_pool_nodes(client, "storm", 5, "storm", NODES, 32).await;
}

/// The apiserver's applies to configs (spec writes) by response code.
async fn config_applies(client: &Client) -> BTreeMap<String, f64> {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    let mut by_code = BTreeMap::new();
    for l in text.lines().filter(|l| {
        l.starts_with("apiserver_request_total{")
            && l.contains("resource=\"nodememoryconfigs\"")
            && l.contains("subresource=\"\"")
            && l.contains("verb=\"APPLY\"")
    }) {
        let code = l
            .split("code=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or("?")
            .to_string();
        let n: f64 = l.rsplit(' ').next().unwrap().parse().unwrap();
        *by_code.entry(code).or_default() += n;
    }
    by_code
}

/// The seats the apiserver gives the storm level.
async fn seats(client: &Client) -> Option<f64> {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    crate::common::metric_in(
        &text,
        "apiserver_flowcontrol_nominal_limit_seats{priority_level=\"nodemem-storm\"}",
    )
}

/// The apiserver's count of requests the storm level rejected.
async fn rejected(client: &Client) -> f64 {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_flowcontrol_rejected_requests_total{")
                && l.contains("priority_level=\"nodemem-storm\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Half the pool's configs (names ending in an even digit) go through a webhook nobody
/// serves (failurePolicy Fail): the apiserver answers 500 to each of their writes.
const FAILING_WEBHOOK: &str = "\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: nodemem-storm-500}
webhooks:
- name: storm.nodemem.io
  clientConfig: {url: 'https://127.0.0.1:1/storm'}
  rules:
  - apiGroups: [nodemem.io]
    apiVersions: ['*']
    resources: [nodememoryconfigs]
    operations: [CREATE, UPDATE]
  matchConditions:
  - name: half-the-pool
    expression: \"object.metadata.name.matches('[02468]$')\"
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: 1
";

fn revision_of(factor: f64) -> String {
    let p: nodemem_api::NodeMemoryPolicy = serde_json::from_value(json!({
        "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
        "metadata": {"name": "storm"}, "spec": policy_spec(factor)}))
    .unwrap();
    nodemem_api::revision::revision(&p.spec.settings)
}

fn policy_spec(factor: f64) -> serde_json::Value {
    json!({"nodeSelector": {"matchLabels": {"nodemem.io/pool": "storm"}},
        "memoryQoS": {"throttlingFactor": factor, "reservationPolicy": "TieredReservation"},
        "rollout": {"maxUnavailable": "100%", "minReadySeconds": 0}})
}

/// Every node's config revision as the watch last saw it.
#[derive(Default)]
struct Revisions(BTreeMap<String, String>);

impl Revisions {
    fn on(&self, revision: &str) -> usize {
        self.0.values().filter(|r| *r == revision).count()
    }

    /// Reads the watch until `n` configs are on `revision` or `wait` passes.
    async fn until(&mut self, watch: &mut ConfigWatch, revision: &str, n: usize, wait: Duration) {
        let deadline = Instant::now() + wait;
        while self.on(revision) < n && Instant::now() < deadline {
            if let Some(c) = next_config(watch, Duration::from_secs(1)).await {
                let r = c.data["spec"]["revision"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                self.0.insert(c.metadata.name.clone().unwrap(), r);
            }
        }
    }
}

fn kubectl(cp: &nodemem_testkit::ControlPlane, verb: &str, manifest: &std::path::Path) {
    nodemem_testkit::clients::kubectl(
        cp.admin_kubeconfig(),
        &[verb, "-f", manifest.to_str().unwrap()],
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Lines of the controller's log from byte `from` on that speak of failed writes.
fn failure_lines(log: &std::path::Path, from: usize) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap();
    text[from..]
        .lines()
        .filter(|l| l.contains("not written") || l.contains("writes failed"))
        .map(str::to_string)
        .collect()
}

fn diff(after: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>, code: &str) -> f64 {
    after.get(code).unwrap_or(&0.0) - before.get(code).unwrap_or(&0.0)
}

/// The apiserver's priority and fairness refuses config writes (429, Retry-After)
/// during a fan-out, then an admission webhook that cannot be called fails half the
/// nodes' writes (500) for a minute while the policy changes: each fan-out completes,
/// the refused writes and the controller's log lines about them stay bounded, and its
/// metrics show the writes that waited for their backoff.
#[tokio::test]
async fn fan_outs_under_429_and_500_storms_complete_with_bounded_retries_and_log_lines() {
    let cp = own_control_plane().await;
    let client = cp.client(&Identity::Admin).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (apf, webhook) = (dir.path().join("apf.yaml"), dir.path().join("webhook.yaml"));
    std::fs::write(&apf, STORM_APF).unwrap();
    std::fs::write(&webhook, FAILING_WEBHOOK).unwrap();
    kubectl(&cp, "apply", &apf);
    create_nodes(&client).await;
    let (mut watch, _) = watch_configs(&client).await;
    let kubeconfig = cp.kubeconfig(&Identity::Controller).await.unwrap();
    let log = dir.path().join("controller.log");
    let policies = policies(client.clone());
    let mut seen = Revisions::default();

    // 1. A new policy's fan-out through one seat that rejects what does not fit.
    let (r1, r2) = (revision_of(0.9), revision_of(0.8));
    let before = config_applies(&client).await;
    crate::common::create_policy(&policies, "storm", policy_spec(0.9)).await;
    eprintln!("storm level: {:?} seats", seats(&client).await);
    let started = Instant::now();
    let _controller = spawn_controller_with(&kubeconfig, "storm", "nodemem:test", &log, &[]);
    seen.until(&mut watch, &r1, NODES, Duration::from_secs(600))
        .await;
    let took = started.elapsed();
    let after = config_applies(&client).await;
    let rejected = rejected(&client).await;
    let lines = failure_lines(&log, 0);
    eprintln!(
        "429 storm: {} of {NODES} configs in {:.0} s; applies {before:?} -> {after:?}; \
         rejected by the storm level: {rejected}; {} log lines about failed writes",
        seen.on(&r1),
        took.as_secs_f64(),
        lines.len()
    );
    assert_eq!(seen.on(&r1), NODES, "the fan-out did not complete");
    let rejected_applies = diff(&after, &before, "429");
    assert!(
        rejected_applies > 0.0,
        "no write was rejected: the storm did not happen"
    );

    // 2. The storm level goes; half the nodes' writes fail (500) for a minute while the
    // policy changes.
    kubectl(&cp, "delete", &apf);
    kubectl(&cp, "apply", &webhook);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log_from = std::fs::metadata(&log).unwrap().len() as usize;
    let before = config_applies(&client).await;
    policies
        .patch(
            "storm",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"memoryQoS": {"throttlingFactor": 0.8}}})),
        )
        .await
        .unwrap();
    // The nodes the webhook lets through move (a slow machine may take more than the
    // minute); the storm lasts a minute at least.
    let storm_started = Instant::now();
    seen.until(&mut watch, &r2, NODES / 2, Duration::from_secs(240))
        .await;
    let left = Duration::from_secs(60).saturating_sub(storm_started.elapsed());
    seen.until(&mut watch, &r2, NODES, left).await;
    let storm = storm_started.elapsed();
    let during = config_applies(&client).await;
    let half = NODES / 2;
    let failed = diff(&during, &before, "500");
    let storm_lines = failure_lines(&log, log_from);
    eprintln!(
        "500 storm ({}s): {} of {NODES} configs on the new revision; applies {before:?} -> {during:?}; \
         {} log lines about failed writes:\n{}",
        storm.as_secs(),
        seen.on(&r2),
        storm_lines.len(),
        storm_lines.join("\n")
    );
    assert_eq!(
        seen.on(&r2),
        half,
        "the nodes the webhook lets through moved, the others not"
    );
    // Per object, a minute of failures is at most seven writes (the backoff's delays, at
    // the least jitter, are 0.5, 1, 2, 4, 8, 16 and 30 s), eight with a tick's slack;
    // after the minute one more per 30 s at most (the cap of 60 s, at half).
    let extra = storm.as_secs().saturating_sub(60).div_ceil(30);
    let per_object = 8.0 + extra as f64;
    assert!(
        failed <= half as f64 * per_object,
        "{failed} writes failed for {half} nodes in {}s: more than {per_object} each",
        storm.as_secs()
    );
    // One line when the storm began, then at most one per summary interval.
    let most = 2 + storm.as_secs() / nodemem_controller::write::failures::INTERVAL.as_secs();
    assert!(
        storm_lines.len() as u64 <= most,
        "{} lines about failed writes in {}s (at most {most})",
        storm_lines.len(),
        storm.as_secs()
    );
    let metrics = controller_metrics(&log).expect("the controller's metrics");
    let deferred = metric_in(
        &metrics,
        "nodemem_controller_api_writes_deferred_total{kind=\"config\"}",
    )
    .unwrap_or(0.0);
    let waiting = metric_in(
        &metrics,
        "nodemem_controller_api_write_backoff_objects{kind=\"config\"}",
    );
    eprintln!("metrics: {deferred} config writes deferred; {waiting:?} configs backing off");
    assert!(deferred > 0.0, "no write waited for its backoff");
    assert_eq!(waiting, Some(half as f64), "every failing node backs off");

    // 3. The webhook goes: every node reaches the new revision within the longest
    // backoff and the time this machine took to write as many configs in step 1 (the
    // half the nodes, twice over: the tier's other tests share the cores).
    kubectl(&cp, "delete", &webhook);
    let healed = Instant::now();
    let wait = nodemem_controller::write::backoff::CAP + Duration::from_secs(30) + took;
    seen.until(&mut watch, &r2, NODES, wait).await;
    let after = config_applies(&client).await;
    eprintln!(
        "after the storm: {} of {NODES} on the new revision {:.0} s after the webhook went; applies {during:?} -> {after:?}",
        seen.on(&r2),
        healed.elapsed().as_secs_f64()
    );
    assert_eq!(
        seen.on(&r2),
        NODES,
        "not every node caught up within {wait:?} after the storm"
    );
    let all = failure_lines(&log, log_from);
    assert!(
        all.iter().any(|l| l.contains("writes failed in the last")),
        "no summary line: {all:#?}"
    );
    // The failures after the last summary are summed up an interval after it, and the
    // all-clear follows at the next decision (a tick at most) with nothing waiting.
    let all_clear = "no write waits for a retry any more";
    let wait = nodemem_controller::write::failures::INTERVAL + Duration::from_secs(30);
    let deadline = Instant::now() + wait;
    while !std::fs::read_to_string(&log).unwrap().contains(all_clear) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        std::fs::read_to_string(&log).unwrap().contains(all_clear),
        "no all-clear within {wait:?} after every node caught up; the log's failure lines:\n{}",
        failure_lines(&log, log_from).join("\n")
    );
}
