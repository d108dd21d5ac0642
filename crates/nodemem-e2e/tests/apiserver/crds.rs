//! The CRDs on a real apiserver: they install and become Established, the examples
//! are accepted, `kubectl get` columns are served, and invalid policies are rejected at
//! admission by the schema and the CEL rules with the expected messages.

use kube::api::PostParams;
use kube::core::DynamicObject;
use serde_json::{json, Value};

use crate::common::{admin, cluster, object, policies, repo};

#[tokio::test]
async fn crds_are_established_and_examples_are_accepted() {
    let cp = cluster();
    // Installing again is idempotent and still reports both Established.
    let names = nodemem_testkit::crds::install_dir(cp, &repo().join("crds"))
        .await
        .expect("install");
    assert_eq!(
        names,
        [
            "nodememoryconfigs.nodemem.io",
            "nodememorypolicies.nodemem.io"
        ]
    );
    let api = policies(admin().await);
    let mut examples = 0;
    for entry in std::fs::read_dir(repo().join("examples")).unwrap() {
        let path = entry.unwrap().path().join("policy.yaml");
        if !path.exists() {
            continue;
        }
        let value: Value = serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let name = value["metadata"]["name"].as_str().unwrap().to_string();
        let created = api
            .create(&PostParams::default(), &object(value.clone()))
            .await
            .unwrap_or_else(|e| panic!("{} rejected: {e}", path.display()));
        // Defaults from the schema are applied by the apiserver.
        let given = &value["spec"]["enforcement"];
        let expected = if given.is_null() {
            &json!("Agent")
        } else {
            given
        };
        assert_eq!(
            &created.data["spec"]["enforcement"],
            expected,
            "{}",
            path.display()
        );
        assert!(created.data["spec"]["memoryQoS"]["enabled"]
            .as_bool()
            .unwrap());
        assert_eq!(created.metadata.name.as_deref(), Some(name.as_str()));
        examples += 1;
    }
    assert_eq!(
        examples, 7,
        "starter, general, database, batch, numa-database, kubelet and classes"
    );
    let mixed = api.get("mixed").await.unwrap();
    assert_eq!(mixed.data["spec"]["classes"][1]["name"], "batch");
    assert_eq!(
        mixed.data["spec"]["classes"][1]["reclaim"]["mode"],
        "Active"
    );
    let starter = api.get("starter").await.unwrap();
    assert_eq!(starter.data["spec"]["enforcement"], "Observe");
    assert_eq!(starter.data["spec"]["rollout"]["canary"], 1);
    let kubelet = api.get("kubelet-managed").await.unwrap();
    assert_eq!(kubelet.data["spec"]["enforcement"], "Kubelet");
    let numa = api.get("numa-database").await.unwrap();
    assert_eq!(numa.data["spec"]["memoryManager"]["policy"], "Static");
    assert_eq!(
        numa.data["spec"]["memoryManager"]["reservedMemory"][0]["limits"]["memory"],
        "1124Mi"
    );
}

/// Workload classes (issue 63) at admission: names, limits and duplicates by the
/// schema, and what a class cannot change (the Memory Manager, the node's
/// reservations, the enforcement, the reservation policy) refused by name, whatever
/// its value; classes under Kubelet enforcement, and a class's Active reclaim without
/// the agent's, refused with why.
#[tokio::test]
async fn workload_classes_are_checked_at_admission() {
    cluster();
    let api = policies(admin().await);
    let sel = json!({"matchLabels": {"pool": "classes"}});
    let classes = |list: Value| json!({"nodeSelector": sel, "classes": list});
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "class-name",
            classes(json!([{"name": "Batch"}])),
            "spec.classes[0].name in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
        ),
        (
            "class-name-long",
            classes(json!([{"name": "a".repeat(64)}])),
            "spec.classes[0].name: Too long: may not be more than 63 bytes",
        ),
        (
            "class-twice",
            classes(json!([{"name": "web"}, {"name": "web", "throttlingFactor": 0.5}])),
            "spec.classes[1]: Duplicate value",
        ),
        (
            "class-too-many",
            classes(Value::Array((0..17).map(|i| json!({"name": format!("c{i}")})).collect())),
            "spec.classes: Too many: 17: must have at most 16 items",
        ),
        (
            "class-factor",
            classes(json!([{"name": "batch", "throttlingFactor": 1.5}])),
            "spec.classes[0].throttlingFactor in body should be less than or equal to 1",
        ),
        (
            "class-factor-unused",
            classes(json!([{"name": "batch", "throttlingFactor": 0.5, "memoryHigh": "None"}])),
            "throttlingFactor is not used with memoryHigh: None",
        ),
        (
            "class-protection",
            classes(json!([{"name": "batch", "protection": "Soft"}])),
            "spec.classes[0].protection: Unsupported value: \"Soft\": supported values: \"Pool\", \"None\"",
        ),
        (
            "class-memory-manager",
            classes(json!([{"name": "db", "memoryManager": {"policy": "Static"}}])),
            "spec.classes[0].memoryManager: Invalid value: a class cannot change the Memory Manager: NUMA pinning and reserved memory are the node's (spec.memoryManager)",
        ),
        (
            "class-enforcement",
            classes(json!([{"name": "db", "enforcement": "Agent"}])),
            "a class cannot change the enforcement",
        ),
        (
            "class-node-reserved",
            classes(json!([{"name": "db", "nodeReserved": {"kubeReserved": "1Gi"}}])),
            "a class cannot change the node's reservations",
        ),
        (
            "class-reservation-policy",
            classes(json!([{"name": "db", "reservationPolicy": "HardReservation"}])),
            "a class cannot change the reservation policy",
        ),
        (
            "classes-under-kubelet",
            json!({"nodeSelector": sel, "enforcement": "Kubelet", "classes": [{"name": "batch"}]}),
            "spec.classes: Invalid value: classes need enforcement: Agent or Observe: under Kubelet the kubelet sets one throttling factor and one reservation policy for every pod",
        ),
        (
            "class-active-under-observe",
            json!({"nodeSelector": sel, "enforcement": "Observe",
                "classes": [{"name": "batch", "reclaim": {"mode": "Active"}}]}),
            "a class's reclaim mode Active writes memory.reclaim, which only enforcement: Agent does",
        ),
        (
            "class-reclaim-mode",
            classes(json!([{"name": "batch", "reclaim": {"mode": "On"}}])),
            "spec.classes[0].reclaim.mode: Unsupported value: \"On\"",
        ),
    ];
    let mut failures = Vec::new();
    for (name, spec, expected) in cases {
        match api
            .create(
                &PostParams::default(),
                &policy(&format!("invalid-{name}"), spec),
            )
            .await
        {
            Ok(_) => failures.push(format!("{name}: accepted, expected {expected:?}")),
            Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains(expected) => {}
            Err(e) => failures.push(format!("{name}: {e}, expected {expected:?}")),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    // Three classes under Observe, each field once: accepted and read back as written.
    let accepted = api
        .create(
            &PostParams::default(),
            &policy(
                "classes-accepted",
                json!({"nodeSelector": sel, "enforcement": "Observe", "classes": [
                    {"name": "service", "memoryHigh": "None"},
                    {"name": "batch", "throttlingFactor": 0.5, "protection": "None",
                     "reclaim": {"mode": "Observe", "maxStepPermille": 20}},
                    {"name": "plain"},
                ]}),
            ),
        )
        .await
        .expect("a valid policy with classes");
    let got = &accepted.data["spec"]["classes"];
    assert_eq!(got[0], json!({"name": "service", "memoryHigh": "None"}));
    assert_eq!(
        got[1]["reclaim"],
        json!({"mode": "Observe", "maxStepPermille": 20})
    );
    assert_eq!(
        got[2],
        json!({"name": "plain"}),
        "no default fills a class in"
    );
    let typed: nodemem_api::NodeMemoryPolicy =
        serde_json::from_value(serde_json::to_value(&accepted).unwrap()).unwrap();
    assert!(nodemem_api::convert::policy_settings(&typed.spec).is_ok());
}

/// GET a list as a server-side Table (what `kubectl get` asks for).
async fn table(path: &str) -> Value {
    let client = admin().await;
    let req = http::Request::get(path)
        .header(
            "Accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .unwrap();
    let text = client.request_text(req).await.expect("table request");
    serde_json::from_str(&text).expect("table JSON")
}

fn columns(t: &Value) -> Vec<String> {
    t["columnDefinitions"]
        .as_array()
        .expect("a Table")
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn kubectl_get_columns_are_served() {
    cluster();
    let api = policies(admin().await);
    api.create(
        &PostParams::default(),
        &object(json!({
            "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
            "metadata": {"name": "table-columns"},
            "spec": {
                "nodeSelector": {"matchLabels": {"pool": "table-columns"}},
                "memoryQoS": {"throttlingFactor": 0.8, "reservationPolicy": "TieredReservation"},
            },
        })),
    )
    .await
    .expect("create");
    // Served columns are "Name" and then exactly the generated printer columns (their
    // names are pinned in nodemem-api's CRD tests).
    for (_, crd) in nodemem_api::crdgen::crds() {
        let plural = &crd.spec.names.plural;
        let t = table(&format!("/apis/nodemem.io/v1alpha1/{plural}")).await;
        assert_eq!(t["kind"], "Table", "{plural}");
        let generated = crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.clone());
        let expected: Vec<String> = std::iter::once("Name".to_string())
            .chain(generated)
            .collect();
        assert_eq!(columns(&t), expected, "{plural}");
    }
    let t = table("/apis/nodemem.io/v1alpha1/nodememorypolicies").await;
    let row = t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cells"][0] == "table-columns")
        .expect("our policy is a row");
    assert_eq!(row["cells"][1], 0.8);
    assert_eq!(row["cells"][2], "TieredReservation");
    assert_eq!(row["cells"][3], "None", "memoryManager defaults to None");
    assert_eq!(row["cells"][4], "Agent");
}

fn policy(name: &str, spec: Value) -> DynamicObject {
    object(json!({
        "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }))
}

#[tokio::test]
async fn invalid_policies_are_rejected_at_admission() {
    cluster();
    let api = policies(admin().await);
    let sel = json!({"matchLabels": {"pool": "invalid"}});
    let reserved = |entries: Value| json!({"nodeSelector": sel, "memoryManager": {"policy": "Static", "reservedMemory": entries}});
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "factor-zero",
            json!({"nodeSelector": sel, "memoryQoS": {"throttlingFactor": 0}}),
            "spec.memoryQoS.throttlingFactor in body should be greater than 0",
        ),
        (
            "factor-high",
            json!({"nodeSelector": sel, "memoryQoS": {"throttlingFactor": 1.5}}),
            "spec.memoryQoS.throttlingFactor in body should be less than or equal to 1",
        ),
        (
            "reservation-enum",
            json!({"nodeSelector": sel, "memoryQoS": {"reservationPolicy": "Soft"}}),
            "spec.memoryQoS.reservationPolicy: Unsupported value: \"Soft\"",
        ),
        (
            "static-without-reservation",
            json!({"nodeSelector": sel, "memoryManager": {"policy": "Static"}}),
            "the Static policy needs reservedMemory with a memory entry on at least one NUMA node",
        ),
        (
            "reservation-without-static",
            json!({"nodeSelector": sel, "memoryManager": {"policy": "None", "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1Gi"}}]}}),
            "reservedMemory is only used by the Static policy",
        ),
        (
            "unknown-memory-type",
            reserved(json!([{"numaNode": 0, "limits": {"memory": "1Gi", "cpu": "1"}}])),
            "memory types must be memory or hugepages-<size>",
        ),
        (
            "unparsable-quantity-string",
            reserved(json!([{"numaNode": 0, "limits": {"memory": "1Gib"}}])),
            "limits.memory in body should match",
        ),
        (
            "quantity-too-long",
            reserved(json!([{"numaNode": 0, "limits": {"memory": "1".repeat(65)}}])),
            "limits.memory: Too long: may not be more than 64 bytes",
        ),
        (
            "negative-quantity-int",
            reserved(json!([{"numaNode": 0, "limits": {"memory": -5}}])),
            "must not be negative",
        ),
        (
            "zero-reservation",
            reserved(json!([{"numaNode": 0, "limits": {"memory": "1Gi"}}, {"numaNode": 1, "limits": {"memory": "0"}}])),
            "spec.memoryManager.reservedMemory[1]: Invalid value: reserved memory may not be zero (the kubelet refuses to start with a zero reservation)",
        ),
        (
            "zero-reservation-int",
            reserved(json!([{"numaNode": 0, "limits": {"memory": "1Gi", "hugepages-2Mi": 0}}])),
            "spec.memoryManager.reservedMemory[0]: Invalid value: reserved memory may not be zero",
        ),
        (
            "zero-reservation-suffix",
            reserved(json!([{"numaNode": 0, "limits": {"memory": "0Gi"}}])),
            "spec.memoryManager.reservedMemory[0]: Invalid value: reserved memory may not be zero",
        ),
        (
            "duplicate-numa-node",
            reserved(
                json!([{"numaNode": 0, "limits": {"memory": "1Gi"}}, {"numaNode": 0, "limits": {"memory": "1Gi"}}]),
            ),
            "spec.memoryManager.reservedMemory[1]: Duplicate value: {\"numaNode\":0}",
        ),
        (
            "negative-numa-node",
            reserved(json!([{"numaNode": -1, "limits": {"memory": "1Gi"}}])),
            "numaNode in body should be greater than or equal to 0",
        ),
        (
            "too-many-numa-nodes",
            reserved(json!((0..9)
                .map(|i| json!({"numaNode": i, "limits": {"memory": "1Gi"}}))
                .collect::<Vec<_>>())),
            "must have at most 8 items",
        ),
        (
            "selector-values",
            json!({"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "Exists", "values": ["x"]}]}}),
            "values must be non-empty for In and NotIn and empty for Exists and DoesNotExist",
        ),
        (
            "selector-operator",
            json!({"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "Like", "values": ["x"]}]}}),
            "Unsupported value: \"Like\"",
        ),
        (
            "relief-observe",
            json!({"nodeSelector": sel, "enforcement": "Observe", "memoryQoS": {"relief": {}}}),
            "memoryQoS.relief raises memory.high that the agent set: it needs enforcement: Agent",
        ),
        (
            "relief-kubelet",
            json!({"nodeSelector": sel, "enforcement": "Kubelet", "memoryQoS": {"relief": {"reliefSeconds": 60}}}),
            "memoryQoS.relief raises memory.high that the agent set: it needs enforcement: Agent",
        ),
        (
            "relief-pressure",
            json!({"nodeSelector": sel, "memoryQoS": {"relief": {"fullPressurePercent": 0}}}),
            "spec.memoryQoS.relief.fullPressurePercent: Invalid value: 0: spec.memoryQoS.relief.fullPressurePercent in body should be greater than or equal to 1",
        ),
        (
            "relief-sustained",
            json!({"nodeSelector": sel, "memoryQoS": {"relief": {"sustainedSeconds": 5}}}),
            "should be greater than or equal to 10",
        ),
        (
            "reclaim-on-kubelet",
            json!({"nodeSelector": sel, "enforcement": "Kubelet", "reclaim": {"mode": "Active"}}),
            "spec.reclaim.mode: Invalid value: reclaim mode Active writes memory.reclaim, which only enforcement: Agent does",
        ),
        (
            "reclaim-on-observe",
            json!({"nodeSelector": sel, "enforcement": "Observe", "reclaim": {"mode": "Active"}}),
            "reclaim mode Active writes memory.reclaim, which only enforcement: Agent does",
        ),
        (
            "reclaim-mode",
            json!({"nodeSelector": sel, "reclaim": {"mode": "Aggressive"}}),
            "spec.reclaim.mode: Unsupported value: \"Aggressive\": supported values: \"Disabled\", \"Observe\", \"Active\"",
        ),
        (
            "reclaim-stall",
            json!({"nodeSelector": sel, "reclaim": {"targetStallMicrosecondsPerSecond": 0}}),
            "spec.reclaim.targetStallMicrosecondsPerSecond in body should be greater than or equal to 1",
        ),
        (
            "reclaim-step",
            json!({"nodeSelector": sel, "reclaim": {"maxStepPermille": 500}}),
            "spec.reclaim.maxStepPermille in body should be less than or equal to 100",
        ),
        (
            "refault-gate",
            json!({"nodeSelector": sel, "rollout": {"health": {"maxRefaultsPerSecond": 0}}}),
            "spec.rollout.health.maxRefaultsPerSecond in body should be greater than or equal to 1",
        ),
        (
            "reclaim-interval",
            json!({"nodeSelector": sel, "reclaim": {"intervalSeconds": 1}}),
            "spec.reclaim.intervalSeconds in body should be greater than or equal to 2",
        ),
        (
            "reclaim-classes",
            json!({"nodeSelector": sel, "reclaim": {"qosClasses": []}}),
            "spec.reclaim.qosClasses: Invalid value: 0: spec.reclaim.qosClasses in body should have at least 1 items",
        ),
        (
            "reclaim-class",
            json!({"nodeSelector": sel, "reclaim": {"qosClasses": ["Burstable", "Burstable"]}}),
            "spec.reclaim.qosClasses[1]: Duplicate value: \"Burstable\"",
        ),
        (
            "recommendation-target",
            json!({"nodeSelector": sel, "recommendation": {"targetPercent": 40}}),
            "spec.recommendation.targetPercent in body should be greater than or equal to 50",
        ),
        (
            "recommendation-containers",
            json!({"nodeSelector": sel, "recommendation": {"minContainers": 0}}),
            "spec.recommendation.minContainers in body should be greater than or equal to 1",
        ),
        (
            "enforcement-unknown",
            json!({"nodeSelector": sel, "enforcement": "Shadow"}),
            "Unsupported value: \"Shadow\": supported values: \"Agent\", \"Kubelet\", \"Observe\"",
        ),
        (
            "max-unavailable",
            json!({"nodeSelector": sel, "rollout": {"maxUnavailable": "150%"}}),
            "must be a non-negative integer or a percentage from 0% to 100%",
        ),
        (
            "failure-policy",
            json!({"nodeSelector": sel, "rollout": {"failurePolicy": "Explode"}}),
            "spec.rollout.failurePolicy: Unsupported value: \"Explode\"",
        ),
        (
            "max-failures",
            json!({"nodeSelector": sel, "rollout": {"maxFailures": 0}}),
            "spec.rollout.maxFailures in body should be greater than or equal to 1",
        ),
        (
            "priority",
            json!({"nodeSelector": sel, "priority": 2000000}),
            "spec.priority in body should be less than or equal to 1000000",
        ),
        (
            "priority-low",
            json!({"nodeSelector": sel, "priority": -2000000}),
            "spec.priority in body should be greater than or equal to -1000000",
        ),
        (
            "enforcement-enum",
            json!({"nodeSelector": sel, "enforcement": "Sometimes"}),
            "spec.enforcement: Unsupported value: \"Sometimes\"",
        ),
        (
            "memory-manager-policy-enum",
            json!({"nodeSelector": sel, "memoryManager": {"policy": "Dynamic"}}),
            "spec.memoryManager.policy: Unsupported value: \"Dynamic\"",
        ),
        (
            "factor-negative",
            json!({"nodeSelector": sel, "memoryQoS": {"throttlingFactor": -0.5}}),
            "spec.memoryQoS.throttlingFactor in body should be greater than 0",
        ),
        (
            "factor-string",
            json!({"nodeSelector": sel, "memoryQoS": {"throttlingFactor": "high"}}),
            "spec.memoryQoS.throttlingFactor in body must be of type number",
        ),
        (
            "enabled-string",
            json!({"nodeSelector": sel, "memoryQoS": {"enabled": "yes"}}),
            "spec.memoryQoS.enabled in body must be of type boolean",
        ),
        (
            "hugepages-unit",
            reserved(json!([{"numaNode": 0, "limits": {"memory": "1Gi", "hugepages-2MB": "2Mi"}}])),
            "memory types must be memory or hugepages-<size>",
        ),
        (
            "static-with-hugepages-only",
            reserved(json!([{"numaNode": 0, "limits": {"hugepages-2Mi": "2Mi"}}])),
            "the Static policy needs reservedMemory with a memory entry on at least one NUMA node",
        ),
        (
            "numa-node-too-high",
            reserved(json!([{"numaNode": 1024, "limits": {"memory": "1Gi"}}])),
            "numaNode in body should be less than or equal to 1023",
        ),
        (
            "kube-reserved-negative",
            json!({"nodeSelector": sel, "nodeReserved": {"kubeReserved": -1}}),
            "must not be negative",
        ),
        (
            "system-reserved-words",
            json!({"nodeSelector": sel, "nodeReserved": {"systemReserved": "lots"}}),
            "spec.nodeReserved.systemReserved in body should match",
        ),
        (
            "eviction-hard-too-long",
            json!({"nodeSelector": sel, "nodeReserved": {"evictionHard": "1".repeat(65)}}),
            "spec.nodeReserved.evictionHard: Too long: may not be more than 64 bytes",
        ),
        (
            "canary-percent",
            json!({"nodeSelector": sel, "rollout": {"canary": "101%"}}),
            "must be a non-negative integer or a percentage from 0% to 100%",
        ),
        (
            "canary-negative",
            json!({"nodeSelector": sel, "rollout": {"canary": -1}}),
            "must be a non-negative integer or a percentage from 0% to 100%",
        ),
        (
            "max-unavailable-negative",
            json!({"nodeSelector": sel, "rollout": {"maxUnavailable": -2}}),
            "must be a non-negative integer or a percentage from 0% to 100%",
        ),
        (
            "max-unavailable-words",
            json!({"nodeSelector": sel, "rollout": {"maxUnavailable": "half"}}),
            "must be a non-negative integer or a percentage from 0% to 100%",
        ),
        (
            "min-ready-negative",
            json!({"nodeSelector": sel, "rollout": {"minReadySeconds": -1}}),
            "spec.rollout.minReadySeconds in body should be greater than or equal to 0",
        ),
        (
            "min-ready-over-a-day",
            json!({"nodeSelector": sel, "rollout": {"minReadySeconds": 90000}}),
            "spec.rollout.minReadySeconds in body should be less than or equal to 86400",
        ),
        (
            "progress-deadline-short",
            json!({"nodeSelector": sel, "rollout": {"progressDeadlineSeconds": 5}}),
            "spec.rollout.progressDeadlineSeconds in body should be greater than or equal to 10",
        ),
        (
            "max-failures-high",
            json!({"nodeSelector": sel, "rollout": {"maxFailures": 10001}}),
            "spec.rollout.maxFailures in body should be less than or equal to 10000",
        ),
        (
            "paused-string",
            json!({"nodeSelector": sel, "rollout": {"paused": "yes"}}),
            "spec.rollout.paused in body must be of type boolean",
        ),
        (
            "pressure-zero",
            json!({"nodeSelector": sel, "rollout": {"health": {"maxFullMemoryPressurePercent": 0}}}),
            "spec.rollout.health.maxFullMemoryPressurePercent in body should be greater than or equal to 1",
        ),
        (
            "pressure-over-100",
            json!({"nodeSelector": sel, "rollout": {"health": {"maxFullMemoryPressurePercent": 101}}}),
            "spec.rollout.health.maxFullMemoryPressurePercent in body should be less than or equal to 100",
        ),
        (
            "oom-kills-negative",
            json!({"nodeSelector": sel, "rollout": {"health": {"maxOOMKills": -1}}}),
            "spec.rollout.health.maxOOMKills in body should be greater than or equal to 0",
        ),
        (
            "selector-in-without-values",
            json!({"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "In"}]}}),
            "values must be non-empty for In and NotIn and empty for Exists and DoesNotExist",
        ),
        (
            "selector-too-many-expressions",
            json!({"nodeSelector": {"matchExpressions": (0..33)
                .map(|i| json!({"key": format!("k{i}"), "operator": "Exists"}))
                .collect::<Vec<_>>()}}),
            "spec.nodeSelector.matchExpressions: Too many: 33: must have at most 32 items",
        ),
        (
            "selector-too-many-values",
            json!({"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "In",
                "values": (0..65).map(|i| format!("v{i}")).collect::<Vec<_>>()}]}}),
            "must have at most 64 items",
        ),
        (
            "selector-key-too-long",
            json!({"nodeSelector": {"matchExpressions": [{"key": "k".repeat(318), "operator": "Exists"}]}}),
            "spec.nodeSelector.matchExpressions[0].key: Too long: may not be more than 317 bytes",
        ),
        (
            "selector-value-too-long",
            json!({"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["v".repeat(64)]}]}}),
            "Too long: may not be more than 63 bytes",
        ),
    ];
    assert!(cases.len() >= 40, "{} invalid policies", cases.len());
    let mut failures = Vec::new();
    for (name, spec, expected) in cases {
        match api
            .create(
                &PostParams::default(),
                &policy(&format!("invalid-{name}"), spec),
            )
            .await
        {
            Ok(_) => failures.push(format!(
                "{name}: accepted, expected rejection with {expected:?}"
            )),
            Err(kube::Error::Api(s)) => {
                if s.code != 422 || !s.message.contains(expected) {
                    failures.push(format!(
                        "{name}: HTTP {} {:?}, expected 422 containing {expected:?}",
                        s.code, s.message
                    ));
                }
            }
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    // What can never be right gets one clear message and nothing else: the whole
    // answer is pinned. A value of the wrong type is the one exception: the apiserver
    // adds its own "some validation rules were not checked" to every type error of a
    // CRD with validation rules (apiextensions-apiserver, hasBlockingErr).
    let exact: Vec<(&str, Value, &str)> = vec![
        (
            "label-value",
            json!({"nodeSelector": {"matchLabels": {"pool": "not a valid label value!"}}}),
            "NodeMemoryPolicy.nodemem.io \"invalid-label-value\" is invalid: spec.nodeSelector.matchLabels: Invalid value: a label value is empty or at most 63 characters of alphanumerics, '-', '_' and '.', starting and ending with an alphanumeric (no node can carry any other)",
        ),
        (
            "label-value-expression",
            json!({"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["ok", "not ok!"]}]}}),
            "NodeMemoryPolicy.nodemem.io \"invalid-label-value-expression\" is invalid: spec.nodeSelector.matchExpressions[0]: Invalid value: a label value is empty or at most 63 characters of alphanumerics, '-', '_' and '.', starting and ending with an alphanumeric (no node can carry any other)",
        ),
        // A key no node can carry: it would select every node under DoesNotExist, and
        // the agents' DaemonSet affinity built from it would be refused.
        (
            "label-key-expression",
            json!({"nodeSelector": {"matchExpressions": [{"key": "bad key!", "operator": "DoesNotExist"}]}}),
            "NodeMemoryPolicy.nodemem.io \"invalid-label-key-expression\" is invalid: spec.nodeSelector.matchExpressions[0].key: Invalid value: a label key is a name of at most 63 characters (alphanumerics, '-', '_' and '.', starting and ending with an alphanumeric), optionally after a DNS subdomain of at most 253 characters and '/' (no node can carry any other)",
        ),
        (
            "label-key",
            json!({"nodeSelector": {"matchLabels": {"Bad.io/pool": "a"}}}),
            "NodeMemoryPolicy.nodemem.io \"invalid-label-key\" is invalid: spec.nodeSelector.matchLabels: Invalid value: a label key is a name of at most 63 characters (alphanumerics, '-', '_' and '.', starting and ending with an alphanumeric), optionally after a DNS subdomain of at most 253 characters and '/' (no node can carry any other)",
        ),
        // As Deployment validation: every healthy node would fail at the deadline.
        // The default minReadySeconds (60) counts: a short deadline alone is refused
        // with the reason named.
        (
            "deadline-below-default-min-ready",
            json!({"nodeSelector": sel, "rollout": {"progressDeadlineSeconds": 30}}),
            "NodeMemoryPolicy.nodemem.io \"invalid-deadline-below-default-min-ready\" is invalid: spec.rollout.minReadySeconds: Invalid value: minReadySeconds (60 unless given) must be less than progressDeadlineSeconds: a node must be ready that long, and fails at the deadline first",
        ),
        (
            "min-ready-at-deadline",
            json!({"nodeSelector": sel, "rollout": {"minReadySeconds": 600, "progressDeadlineSeconds": 600}}),
            "NodeMemoryPolicy.nodemem.io \"invalid-min-ready-at-deadline\" is invalid: spec.rollout.minReadySeconds: Invalid value: minReadySeconds (60 unless given) must be less than progressDeadlineSeconds: a node must be ready that long, and fails at the deadline first",
        ),
        (
            "max-unavailable-zero",
            json!({"nodeSelector": sel, "rollout": {"maxUnavailable": 0, "canary": 0}}),
            "NodeMemoryPolicy.nodemem.io \"invalid-max-unavailable-zero\" is invalid: spec.rollout.maxUnavailable: Invalid value: maxUnavailable 0 with no canary would never move a node: set maxUnavailable to at least 1 (or 1%)",
        ),
        (
            "max-unavailable-zero-percent",
            json!({"nodeSelector": sel, "rollout": {"maxUnavailable": "0%"}}),
            "NodeMemoryPolicy.nodemem.io \"invalid-max-unavailable-zero-percent\" is invalid: spec.rollout.maxUnavailable: Invalid value: maxUnavailable 0 with no canary would never move a node: set maxUnavailable to at least 1 (or 1%)",
        ),
        (
            "negative-reservation-string",
            reserved(json!([{"numaNode": 0, "limits": {"memory": "-1Gi"}}])),
            "NodeMemoryPolicy.nodemem.io \"invalid-negative-reservation-string\" is invalid: spec.memoryManager.reservedMemory[0].limits[memory]: Invalid value: \"-1Gi\": must not be negative",
        ),
        (
            "negative-kube-reserved-string",
            json!({"nodeSelector": sel, "nodeReserved": {"kubeReserved": "-1Gi"}}),
            "NodeMemoryPolicy.nodemem.io \"invalid-negative-kube-reserved-string\" is invalid: spec.nodeReserved.kubeReserved: Invalid value: \"-1Gi\": must not be negative",
        ),
        (
            "factor-abc",
            json!({"nodeSelector": sel, "memoryQoS": {"throttlingFactor": "abc"}}),
            "NodeMemoryPolicy.nodemem.io \"invalid-factor-abc\" is invalid: [spec.memoryQoS.throttlingFactor: Invalid value: \"string\": spec.memoryQoS.throttlingFactor in body must be of type number: \"string\", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]",
        ),
    ];
    for (name, spec, expected) in exact {
        match api
            .create(
                &PostParams::default(),
                &policy(&format!("invalid-{name}"), spec),
            )
            .await
        {
            Ok(_) => failures.push(format!("{name}: accepted, expected {expected:?}")),
            Err(kube::Error::Api(s)) if s.code == 422 && s.message == expected => {}
            Err(kube::Error::Api(s)) => failures.push(format!(
                "{name}: HTTP {} {:?}, expected 422 with exactly {expected:?}",
                s.code, s.message
            )),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    // A canary with maxUnavailable 0 is a valid rollout (the canary moves first).
    api.create(
        &PostParams::default(),
        &policy(
            "valid-canary-only",
            json!({"nodeSelector": sel, "rollout": {"maxUnavailable": 0, "canary": 1}}),
        ),
    )
    .await
    .expect("maxUnavailable 0 with a canary is accepted");
    api.delete("valid-canary-only", &Default::default())
        .await
        .unwrap();
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    // Nothing was stored.
    let list = api.list(&Default::default()).await.unwrap();
    assert!(list.items.iter().all(|p| !p
        .metadata
        .name
        .as_deref()
        .unwrap_or("")
        .starts_with("invalid-")));
}

/// `kubectl explain` is documentation too: user-facing descriptions, no
/// implementation notes. (kubectl v1.36 prints `<IntOrString>` only for fields that
/// reference the built-in IntOrString type; a CRD's int-or-string field prints as
/// `<Object>` even with the typed `anyOf` the CRDs now carry, as upstream ones do.)
#[tokio::test]
async fn kubectl_explain_reads_as_user_documentation() {
    let cp = cluster();
    for (field, says) in [
        (
            "nmp.spec.rollout.maxUnavailable",
            "Nodes updated at the same time",
        ),
        (
            "nmp.spec.memoryManager.reservedMemory",
            "the topology manager supports at most 8 NUMA nodes",
        ),
    ] {
        let text = nodemem_testkit::clients::kubectl(cp.admin_kubeconfig(), &["explain", field])
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(text.contains(says), "{field}:\n{text}");
        assert!(
            !text.contains("CEL"),
            "no implementation notes for users:\n{text}"
        );
    }
}

/// The clients users type are the pinned versions, built from their Go modules.
#[test]
fn the_clients_in_the_test_bed_are_the_pinned_versions() {
    let bin = nodemem_testkit::binaries::control_plane_binaries().unwrap();
    let run = |path: &std::path::Path, args: &[&str]| {
        let out = std::process::Command::new(path)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(run(&bin.kubectl, &["version", "--client"]).contains("Client Version: v1.37.2"));
    assert!(run(&bin.helm, &["version", "--short"]).starts_with("v4.3.1"));
}
