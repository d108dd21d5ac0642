//! Phase (systemd driver): the reaction to real container starts, from a container's cgroup appearing to nodemem's values in it.

use super::*;

/// Item 6 of issue 17 (a benchmark; nothing here is timed against a goal): from the
/// moment containerd's cgroup for a new container appears to nodemem's values in it,
/// over NODEMEM_REACTION_PODS real pod starts (10 in `make node`; `make bench-node`
/// takes 60 for BENCHMARKS.md), in batches of 10 started together. The probe on the
/// node (tests/node/probe) is told of each cgroup by inotify and of each value by the
/// write's own IN_MODIFY; every container must get its values (a container it never
/// saw done fails the test). Prints median, p90, p99 and max.
pub(crate) async fn reaction_to_real_container_starts(
    node: &mut RealNode,
    client: &kube::Client,
    agent_ip: &str,
) {
    let total: usize = std::env::var("NODEMEM_REACTION_PODS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10);
    const NAMED: &str = "nodemem_agent_runtime_records_total{result=\"named\"}";
    let named_before = agent_metric(node, agent_ip, NAMED);
    let root = qos_level_dir(Driver::Systemd, "kubepods");
    let (out, code) = node
        .run(&format!(
            "systemd-run --unit=nodemem-probe --property=StandardOutput=file:/run/nodemem-probe.log /mnt/nodemem/tools/reaction-probe -root {root} -prefix cri-containerd- && sleep 2"
        ))
        .unwrap();
    assert_eq!(code, 0, "{out}");
    let api: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    let mut containers: Vec<(String, String)> = Vec::new();
    let mut started = 0;
    while started < total {
        let batch: Vec<core::Pod> = (started..total.min(started + 10))
            .map(|i| {
                serde_json::from_value(json!({
                    "metadata": {"name": format!("reaction-{i}")},
                    "spec": {"nodeName": node.name, "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "r", "image": "nodemem.local/workload:1",
                            "imagePullPolicy": "Never", "args": ["-allocate", "1Mi"],
                            "resources": {"requests": {"memory": "16Mi", "cpu": "5m"},
                                          "limits": {"memory": "32Mi"}}}]}
                }))
                .unwrap()
            })
            .collect();
        started += batch.len();
        start_pods(client, &batch).await;
        for p in &batch {
            let name = p.metadata.name.clone().unwrap();
            containers.push((name.clone(), container_id(&api, &name).await));
            api.delete(&name, &Default::default()).await.unwrap();
        }
        for p in &batch {
            let name = p.metadata.name.clone().unwrap();
            eventually(
                &format!("{name} gone"),
                Duration::from_secs(120),
                || async { api.get_opt(&name).await.ok()?.is_none().then_some(()) },
            )
            .await;
        }
    }
    let (log, code) = node
        .run("systemctl stop nodemem-probe; cat /run/nodemem-probe.log")
        .unwrap();
    assert_eq!(code, 0, "{log}");
    let seen: std::collections::BTreeMap<String, f64> = log
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (dir, appeared, done) = (f.next()?, f.next()?, f.next()?);
            let id = dir
                .rsplit("cri-containerd-")
                .next()?
                .trim_end_matches(".scope");
            let ms = (done.parse::<i64>().ok()? - appeared.parse::<i64>().ok()?) as f64 / 1e6;
            Some((id.to_string(), ms))
        })
        .collect();
    let mut reactions = Vec::new();
    for (pod, id) in &containers {
        let ms = seen.get(id).unwrap_or_else(|| {
            panic!("{pod}'s container {id} never held nodemem's values (memory.low, memory.high) in the probe's record:\n{log}")
        });
        reactions.push(*ms);
    }
    // Every container was named from containerd's bundle the moment its cgroup
    // appeared, not later from the pod status (sandboxes are not counted).
    let named = agent_metric(node, agent_ip, NAMED) - named_before;
    assert!(
        named >= total as f64,
        "{named} of {total} new containers named from containerd's record (nodemem_agent_runtime_records_total)"
    );
    let unusable = agent_metric(
        node,
        agent_ip,
        "nodemem_agent_runtime_records_total{result=\"unusable\"}",
    );
    assert_eq!(unusable, 0.0, "records the agent could not use");
    reactions.sort_by(f64::total_cmp);
    let at = |q: f64| nodemem_testkit::stats::percentile(&reactions, q);
    eprintln!(
        "reaction to {} real container starts (cgroup created -> nodemem's memory.low and memory.high in it): median {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        reactions.len(),
        at(0.5),
        at(0.9),
        at(0.99),
        reactions[reactions.len() - 1]
    );
}
