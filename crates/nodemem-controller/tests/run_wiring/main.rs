//! `Controller::run`'s wiring without a control plane (issue 45, item 4): the real loop
//! (its watches, queue, decisions and writes) against a scripted API (`nodemem_testkit::scripted_api`), on
//! tokio's paused clock, so its ticks and the CRD readings pass in no real time. What
//! the loop decides is tested apart in `src/tests.rs`; here, that it is carried out:
//! which requests, to which object, with which field manager and owner, and when not.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::time::Duration;

use hyper::Method;
use nodemem_controller::run::{Controller, FIELD_MANAGER, FINALIZER_MANAGER};
use nodemem_testkit::scripted_api::{Api, Recorded, CONFIGS, NODES, POLICIES};
use serde_json::{json, Value};

/// A policy for the nodes labelled `pool: <pool>`.
fn policy(name: &str, pool: &str) -> Value {
    json!({"apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
        "metadata": {"name": name, "generation": 1},
        "spec": {"nodeSelector": {"matchLabels": {"pool": pool}},
            "memoryQoS": {"throttlingFactor": 0.9, "reservationPolicy": "TieredReservation"},
            "enforcement": "Agent", "rollout": {"minReadySeconds": 0}}})
}

fn node(name: &str, pool: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"pool": pool}}})
}

/// The controller as its binary builds it, ticking every second, not deploying agents.
fn controller() -> Controller {
    Controller {
        metrics: Default::default(),
        draining: Default::default(),
        tick: Duration::from_secs(1),
        agents: None,
        deployment: None,
        write_concurrency: 4,
        event_queue: 1_000,
        enforcement: Default::default(),
    }
}

/// Runs the controller against `api` while `script` runs (in the same task: the
/// loop's future is not `Send` for every lifetime, which `tokio::spawn` asks).
async fn with_controller(api: &Api, script: impl std::future::Future<Output = ()>) {
    let controller = controller();
    tokio::select! {
        ended = controller.run(api.client()) => panic!("the controller's loop ended: {ended:?}"),
        () = script => {}
    }
}

/// Waits (on the paused clock: no real time) until `check` holds; fails after `at_most`
/// of the controller's time with what the API was asked.
async fn until(api: &Api, what: &str, at_most: Duration, check: impl Fn(&Api) -> bool) {
    let deadline = tokio::time::Instant::now() + at_most;
    while !check(api) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {at_most:?}; requests: {:#?}",
            summary(&api.requests())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `node`'s config is in the store.
async fn config_written(api: &Api, node: &str, what: &str) {
    until(api, what, Duration::from_secs(30), |a| {
        a.object(CONFIGS, node).is_some()
    })
    .await;
}

/// Method and path of each request, for failure messages.
fn summary(requests: &[Recorded]) -> Vec<String> {
    requests
        .iter()
        .map(|r| format!("{} {} {:?}", r.method, r.path, r.query))
        .collect()
}

/// `node`'s agent reports its config's current spec applied and healthy, as the real
/// agent's status patch would.
fn agent_reports_good(api: &Api, node: &str) {
    let mut config = api.object(CONFIGS, node).unwrap();
    let generation = config["metadata"]["generation"].clone();
    let condition = |type_: &str| {
        json!({"type": type_, "status": "True", "reason": type_, "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": generation})
    };
    config["status"] = json!({"observedRevision": config["spec"]["revision"],
        "conditions": [condition("Applied"), condition("Healthy")]});
    api.put(CONFIGS, config);
}

/// The writes (anything but GET) so far.
fn writes(api: &Api) -> Vec<Recorded> {
    api.requests()
        .into_iter()
        .filter(|r| r.method != Method::GET)
        .collect()
}

fn config_path(node: &str) -> String {
    format!("/apis/nodemem.io/v1alpha1/{CONFIGS}/{node}")
}

/// The applies of `node`'s config.
fn config_applies(api: &Api, node: &str) -> Vec<Recorded> {
    writes(api)
        .into_iter()
        .filter(|r| r.method == Method::PATCH && r.path == config_path(node))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn no_write_before_every_list_is_whole_then_each_selected_node_gets_its_config_by_apply() {
    let api = Api::new(
        vec![
            (POLICIES, policy("web", "a")),
            (NODES, node("n1", "a")),
            (NODES, node("n2", "b")),
        ],
        &[CONFIGS],
        &[NODES],
    );
    with_controller(&api, lists_then_applies(&api)).await;
}

async fn lists_then_applies(api: &Api) {
    // The policies and nodes listed, the configs not yet: a minute of ticks and CRD
    // readings decides nothing (a decision on a partial world would write n1's config
    // as new, over whatever the cluster holds).
    until(
        api,
        "policies and nodes watched",
        Duration::from_secs(10),
        |a| a.watching(POLICIES) && a.watching(NODES),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(
        api.requests()
            .iter()
            .any(|r| r.path.ends_with(CONFIGS) && r.method == Method::GET),
        "the configs were never asked for: the test holds nothing back"
    );
    assert_eq!(
        summary(&writes(api)),
        Vec::<String>::new(),
        "written before the configs were listed"
    );

    api.release(CONFIGS);
    config_written(api, "n1", "n1's config written").await;
    let applies = config_applies(api, "n1");
    assert_eq!(applies.len(), 1, "{:#?}", summary(&writes(api)));
    let apply = &applies[0];
    assert_eq!(apply.content_type, "application/apply-patch+yaml");
    assert_eq!(apply.query["fieldManager"], FIELD_MANAGER);
    assert_eq!(apply.query["force"], "true");
    assert_eq!(apply.body["kind"], "NodeMemoryConfig");
    assert_eq!(apply.body["spec"]["policy"], "web");
    let web = api.object(POLICIES, "web").unwrap();
    assert_eq!(
        apply.body["metadata"]["ownerReferences"],
        json!([{"apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
            "name": "web", "uid": web["metadata"]["uid"], "controller": true,
            "blockOwnerDeletion": false}])
    );
    // n2 is in no policy's pool: nothing is written for it.
    assert!(api.object(CONFIGS, "n2").is_none());
    assert!(writes(api).iter().all(|r| !r.path.ends_with("/n2")));

    // The policy: the handoff finalizer by its own field manager, and a status by the
    // controller's, which says the pool's one node is being updated.
    until(
        api,
        "the policy's status and finalizer",
        Duration::from_secs(30),
        |a| {
            let p = a.object(POLICIES, "web").unwrap();
            !p["status"].is_null()
                && p["metadata"]["finalizers"] == json!([nodemem_api::HANDOFF_FINALIZER])
        },
    )
    .await;
    let policy_writes: Vec<Recorded> = writes(api)
        .into_iter()
        .filter(|r| r.path.contains(POLICIES))
        .collect();
    assert!(policy_writes
        .iter()
        .any(|r| r.path.ends_with("/web") && r.query["fieldManager"] == FINALIZER_MANAGER));
    assert!(policy_writes
        .iter()
        .any(|r| r.path.ends_with("/web/status") && r.query["fieldManager"] == FIELD_MANAGER));
    let status = &api.object(POLICIES, "web").unwrap()["status"];
    assert_eq!(status["matchedNodes"], 1, "{status:#}");
}

#[tokio::test(start_paused = true)]
async fn watch_events_move_a_node_into_the_pool_and_bring_back_a_config_deleted_by_someone_else() {
    let api = Api::new(
        vec![
            (POLICIES, policy("web", "a")),
            (NODES, node("n1", "a")),
            (NODES, node("n2", "b")),
        ],
        &[],
        &[NODES],
    );
    with_controller(&api, relabel_and_delete(&api)).await;
}

async fn relabel_and_delete(api: &Api) {
    config_written(api, "n1", "n1's config written").await;

    // n2 relabelled into the pool: the node watch's event brings its config (once n1's
    // agent reported the pool's revision good: the rollout waits for it).
    agent_reports_good(api, "n1");
    api.put(NODES, node("n2", "a"));
    config_written(api, "n2", "n2's config written").await;
    assert_eq!(api.object(CONFIGS, "n2").unwrap()["spec"]["policy"], "web");

    // n1's config deleted by someone else (the config watch's DELETED): written again
    // at the spec its node ran, by the controller's own apply.
    let before = api.object(CONFIGS, "n1").unwrap();
    let applied = config_applies(api, "n1").len();
    let deleted = api.requests().len();
    api.delete(CONFIGS, "n1");
    config_written(api, "n1", "n1's config back").await;
    assert_eq!(config_applies(api, "n1").len(), applied + 1);
    assert_eq!(
        api.object(CONFIGS, "n1").unwrap()["spec"],
        before["spec"],
        "written back at another spec"
    );
    // Not by a DELETE of its own or anything else touching n1 meanwhile.
    let since: Vec<Recorded> = api.requests()[deleted..].to_vec();
    assert!(
        since
            .iter()
            .filter(|r| r.path == config_path("n1") && r.method != Method::GET)
            .all(|r| r.method == Method::PATCH),
        "{:#?}",
        summary(&since)
    );
}

#[tokio::test(start_paused = true)]
async fn a_deleted_policy_lets_its_nodes_go_then_its_finalizer() {
    let api = Api::new(
        vec![(POLICIES, policy("web", "a")), (NODES, node("n1", "a"))],
        &[],
        &[NODES],
    );
    with_controller(&api, delete_the_policy(&api)).await;
}

async fn delete_the_policy(api: &Api) {
    until(
        api,
        "n1's config and the finalizer",
        Duration::from_secs(30),
        |a| {
            a.object(CONFIGS, "n1").is_some()
                && a.object(POLICIES, "web").unwrap()["metadata"]["finalizers"]
                    == json!([nodemem_api::HANDOFF_FINALIZER])
        },
    )
    .await;
    agent_reports_good(api, "n1");
    // `kubectl delete nmp web`: the apiserver marks it, the finalizer holds it.
    let mut web = api.object(POLICIES, "web").unwrap();
    web["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    api.put(POLICIES, web);
    until(api, "n1's config rewritten", Duration::from_secs(30), |a| {
        a.object(CONFIGS, "n1").unwrap()["metadata"]["generation"] == 2
    })
    .await;
    // The node leaves the policy by giving its values back first: its config says so
    // (Memory QoS off, the same policy) and nothing goes while its agent has not
    // reported that spec.
    let leaving = api.object(CONFIGS, "n1").unwrap()["spec"].clone();
    assert_eq!(leaving["policy"], "web");
    assert_eq!(leaving["memoryQoS"]["enabled"], false, "{leaving:#}");
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        api.object(CONFIGS, "n1").is_some(),
        "deleted before its node gave back"
    );
    assert_eq!(
        api.object(POLICIES, "web")
            .map(|p| p["metadata"]["finalizers"].clone()),
        Some(json!([nodemem_api::HANDOFF_FINALIZER])),
        "let go before its node gave back"
    );
    let reported = api.requests().len();
    agent_reports_good(api, "n1");
    until(api, "the policy gone", Duration::from_secs(60), |a| {
        a.object(POLICIES, "web").is_none()
    })
    .await;
    // Its config deleted by the controller first, then its finalizer let go by the
    // finalizer's own field manager.
    let since = &api.requests()[reported..];
    let deleted = since
        .iter()
        .position(|r| r.method == Method::DELETE && r.path == config_path("n1"));
    let released = since.iter().position(|r| {
        r.method == Method::PATCH
            && r.path.ends_with("/nodememorypolicies/web")
            && r.query["fieldManager"] == FINALIZER_MANAGER
            && r.body["metadata"]["finalizers"] == json!([])
    });
    assert!(
        matches!((deleted, released), (Some(d), Some(r)) if d < r),
        "{:#?}",
        summary(since)
    );
    assert!(api.object(CONFIGS, "n1").is_none());
}
