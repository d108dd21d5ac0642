//! Phase: the kubelet's float64 to the page (issue 42, item 3). The kubelet's own
//! Memory QoS at factors 0.7 and 0.35, with pods sized where the KEP's formula in exact
//! arithmetic and the kubelet's float64 expression land on different pages: every
//! container's memory.high the kubelet writes is `nodemem simulate`'s prediction, and
//! not the exact formula's page.

use super::*;
use nodemem_model::values::factor::{KubeletFloat, ThrottlingFactor};

const MI: i64 = 1 << 20;

/// Burstable containers per factor.
const SIZES: usize = 3;

pub(crate) async fn the_kubelet_writes_nodemems_pages(
    node: &mut RealNode,
    bed: &Bed<'_>,
    spec: &mut RealNodeSpec,
) {
    let name = node.name.clone();
    for (factor, tag) in [(0.7, "f70"), (0.35, "f35")] {
        spec.kubelet = json!({
            "featureGates": {"MemoryQoS": true},
            "memoryThrottlingFactor": factor,
            "memoryReservationPolicy": "TieredReservation",
        });
        restart_kubelet_with(node, spec, &bed.client).await;
        let sizes = parting_sizes(factor);
        let pods: Vec<core::Pod> = sizes
            .iter()
            .enumerate()
            .map(|(i, (request, limit))| sized_pod(&name, &format!("{tag}-{i}"), *request, *limit))
            .collect();
        start_pods(&bed.client, &pods).await;
        let work = tempfile::tempdir().unwrap();
        let policy = work.path().join("policy.yaml");
        std::fs::write(
            &policy,
            POLICY.replace(
                "throttlingFactor: 0.9",
                &format!("throttlingFactor: {factor}"),
            ),
        )
        .unwrap();
        let expected = expected_files(
            &bed.client,
            bed.admin(),
            &policy,
            work.path(),
            bed.driver,
            &name,
            "",
        )
        .await;
        let ours: Vec<(&String, &String, &String)> = expected
            .iter()
            .filter(|(path, (owner, _))| {
                owner.starts_with(&format!("default/{tag}-"))
                    && owner.matches('/').count() == 2
                    && path.ends_with("/memory.high")
            })
            .map(|(path, (owner, predicted))| (path, owner, predicted))
            .collect();
        assert_eq!(
            ours.len(),
            SIZES,
            "one container memory.high per pod: {ours:?}"
        );
        let paths: Vec<&str> = ours.iter().map(|(p, _, _)| p.as_str()).collect();
        let read = node_read_all(node, &paths);
        let f = ThrottlingFactor::from_f64(factor).unwrap();
        for (path, owner, predicted) in &ours {
            let kubelet = &read[path.as_str()];
            let i: usize = owner
                .rsplit('/')
                .nth(1)
                .unwrap()
                .rsplit('-')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            let (request, limit) = sizes[i];
            let exact = f.exact_memory_high(request * MI, limit * MI, 4096);
            assert_eq!(kubelet, *predicted, "{owner} ({request}Mi/{limit}Mi at {factor}): the kubelet wrote {kubelet}, nodemem predicts {predicted}");
            assert_ne!(
                kubelet,
                &exact.to_string(),
                "{owner}: the exact formula's page"
            );
            eprintln!(
                "{name}: factor {factor}, request {request}Mi, limit {limit}Mi: the kubelet wrote {kubelet} = nodemem's prediction (the exact formula: {exact})"
            );
        }
        remove_pods_or_say(bed, &ListParams::default().labels(PHASE_POD)).await;
    }
}

/// Mi-aligned (request, limit) pairs, one per limit, where the kubelet's float64 and
/// the exact formula part at `factor`; requests of 8Mi and more, limits of 64Mi and
/// more, so that the workload starts and is not throttled.
fn parting_sizes(factor: f64) -> Vec<(i64, i64)> {
    let f = ThrottlingFactor::from_f64(factor).unwrap();
    let mut out = Vec::new();
    for limit in 64..4096 {
        let parting = (8..limit).find(|request| {
            f.exact_memory_high(request * MI, limit * MI, 4096)
                != f.memory_high(request * MI, limit * MI, 4096, KubeletFloat::Separate)
        });
        if let Some(request) = parting {
            out.push((request, limit));
            if out.len() == SIZES {
                return out;
            }
        }
    }
    panic!("fewer than {SIZES} parting sizes at factor {factor}: {out:?}");
}

/// A Burstable pod with one container of `request` and `limit` (Mi).
fn sized_pod(node: &str, name: &str, request: i64, limit: i64) -> core::Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {PHASE_POD: "true"}},
        "spec": {"nodeName": node, "containers": [{
            "name": "c", "image": "nodemem.local/workload:1", "imagePullPolicy": "Never",
            "args": ["-allocate", "4Mi"],
            "resources": {
                "requests": {"memory": format!("{request}Mi"), "cpu": "10m"},
                "limits": {"memory": format!("{limit}Mi")}
            }
        }]}
    }))
    .unwrap()
}
