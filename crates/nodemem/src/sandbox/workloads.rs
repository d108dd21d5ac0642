//! The sandbox's workload: pods of every QoS class on every node, shaped for each pool
//! (the NUMA database pool gets Guaranteed pods with hugepages for the Memory Manager
//! to pin), bound to their node as the scheduler would bind them.

use serde_json::{json, Value};

pub const NAMESPACE: &str = "sandbox";

fn container(name: &str, requests: Value, limits: Value) -> Value {
    json!({"name": name, "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": requests, "limits": limits}})
}

fn pod(name: &str, node: &str, containers: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name.split('-').next().unwrap_or(name)}},
        "spec": {"nodeName": node, "containers": containers}})
}

/// The pods for one node of `pool`.
pub fn pods_for(pool: &str, node: &str) -> Vec<Value> {
    let guaranteed = |name: &str, memory: &str| {
        pod(
            &format!("{name}-{node}"),
            node,
            vec![container(
                name,
                json!({"cpu": "500m", "memory": memory}),
                json!({"cpu": "500m", "memory": memory}),
            )],
        )
    };
    let burstable = |name: &str, request: &str, limit: &str| {
        pod(
            &format!("{name}-{node}"),
            node,
            vec![container(
                name,
                json!({"memory": request}),
                json!({"memory": limit}),
            )],
        )
    };
    let best_effort = |name: &str| {
        pod(
            &format!("{name}-{node}"),
            node,
            vec![json!({"name": name, "image": "registry.k8s.io/pause:3.10"})],
        )
    };
    match pool {
        "numa-database" => vec![
            pod(
                &format!("postgres-{node}"),
                node,
                vec![container(
                    "postgres",
                    json!({"cpu": "2", "memory": "6Gi", "hugepages-2Mi": "512Mi"}),
                    json!({"cpu": "2", "memory": "6Gi", "hugepages-2Mi": "512Mi"}),
                )],
            ),
            guaranteed("pgbouncer", "512Mi"),
            burstable("exporter", "64Mi", "256Mi"),
            best_effort("vacuum"),
        ],
        "batch" => vec![
            best_effort("etl"),
            best_effort("crawler"),
            burstable("report", "512Mi", "2Gi"),
        ],
        _ => vec![
            guaranteed("cache", "1Gi"),
            burstable("web", "256Mi", "1Gi"),
            burstable("api", "512Mi", "2Gi"),
            best_effort("cron"),
        ],
    }
}

/// What a container of the observed pool (batch, under `enforcement: Observe` in the
/// sandbox) uses, MiB: its working set and the page cache on top, which counts for
/// nothing. On batch-1 `report` (512Mi request, 2Gi limit) peaks at 1800Mi: the 0.8
/// factor's memory.high (1740Mi) would throttle it; 0.85 gives it 1817Mi, the recommendation.
pub fn usage_mib(node: &str, container: &str) -> Option<(i64, i64)> {
    if !node.starts_with("batch-") {
        return None;
    }
    Some(match (node, container) {
        ("batch-1", "report") => (1800, 200),
        (_, "report") => (1200, 100),
        (_, "etl") => (1500, 0),
        // A crawler fills the page cache: 2Gi of it, beside a 600Mi working set.
        (_, "crawler") => (600, 2048),
        _ => return None,
    })
}
