//! Phases (systemd driver): the agent as containerd's NRI plugin (issue 31). New
//! containers are created with nodemem's values in their OCI spec: the container's
//! process reads them from its own cgroup at its start. The plugin survives containerd
//! restarts and its own death without holding pods up, and without NRI the node reports
//! the reaction as its path and the reaction holds the values.
//!
//! The config reports `containerValues.path: NRI` with `containerd v2.2.9`; over 6 real
//! pod starts at once (`make bench-node`: 60; 10 until 2026-11-29, each start judged on
//! its own) every container's OCI spec (containerd's bundle) carries nodemem's
//! memory.low and memory.high in `linux.resources.unified` and the container's process
//! (`workload -report-cgroup`) reads exactly those from its own cgroup at its start; no
//! request is answered without values (`unknown_pod` 0) and the runtime never closes
//! the plugin (a miss is explained with the agent's counters and containerd's words); a
//! pod kept past the agent's passes holds its spec's values unchanged;
//! CreateContainer's answer p99 stays under the 2 s budget.

use std::collections::BTreeMap;

use nodemem_api::config::ContainerValuesPath;

use super::reaction::{
    probe_starts, reported, spec_unified, start_line, start_median, starts_to_measure, windows,
    Start,
};
use super::*;

const REGISTERED: &str = "nodemem_agent_nri_registered";
const ADJUSTED: &str = "nodemem_agent_nri_requests_total{result=\"adjusted\"}";
const UNKNOWN_POD: &str = "nodemem_agent_nri_requests_total{result=\"unknown_pod\"}";
const OVERRIDDEN: &str = "nodemem_agent_nri_requests_total{result=\"overridden\"}";
const NOTHING: &str = "nodemem_agent_nri_requests_total{result=\"nothing\"}";
/// The runtime closed the plugin (restarted, or an answer past its 2 s).
const CLOSED: &str = "nodemem_agent_nri_connections_total{result=\"closed\"}";
const CONTAINERD_CONFIG: &str = "/etc/containerd/config.toml";
/// nodemem's files among a spec's unified values (the kubelet puts memory.oom.group and
/// memory.swap.max there too).
const MEMORY_FILES: [&str; 3] = ["memory.min", "memory.low", "memory.high"];

/// The node's config reports this path for new containers; returns what it says.
async fn reported_path(client: &kube::Client, node: &str, path: &str) -> ContainerValuesPath {
    let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
    eventually(
        &format!("{node} reports containerValues.path {path}"),
        Duration::from_secs(90),
        async || {
            let c = configs.get(node).await.ok()?;
            let said = c.status?.node?.container_values?;
            (said.path == path).then_some(said)
        },
    )
    .await
}

/// Whether the values a container started under equal its spec's, and those are
/// nodemem's: memory.low and memory.high set (what the probe waits for). What differs.
fn started_under_its_spec(s: &Start) -> Result<(), String> {
    let at_start = reported(&s.at_start);
    for file in MEMORY_FILES {
        let Some(spec) = s.spec_unified.get(file) else {
            if file == "memory.min" {
                continue;
            }
            return Err(format!(
                "{}: no {file} in the spec's unified values {:?}",
                s.pod, s.spec_unified
            ));
        };
        if at_start.get(file) != Some(spec) {
            return Err(format!(
                "{} (container {}): started under {:?}, spec {:?}",
                s.pod, s.id, s.at_start, s.spec_unified
            ));
        }
    }
    Ok(())
}

/// The agent's NRI counters that explain a container created without nodemem's values.
const EXPLAINING: [(&str, &str); 4] = [
    ("adjusted", ADJUSTED),
    ("unknown pod", UNKNOWN_POD),
    ("nothing to set", NOTHING),
    ("plugin closed by the runtime", CLOSED),
];

fn nri_counters(node: &mut RealNode, agent_ip: &str) -> [f64; 4] {
    let metrics = agent_metrics(node, agent_ip);
    EXPLAINING.map(|(_, series)| series_value(&metrics, series))
}

/// Every start under its spec's values; otherwise which were not, what the agent
/// counted meanwhile and what containerd said of its plugins.
fn all_started_under_their_specs(
    node: &mut RealNode,
    starts: &[Start],
    before: [f64; 4],
    after: [f64; 4],
) {
    let missed: Vec<String> = starts
        .iter()
        .filter_map(|s| started_under_its_spec(s).err())
        .collect();
    if missed.is_empty() {
        return;
    }
    let counted: Vec<String> = EXPLAINING
        .iter()
        .zip(before.iter().zip(after))
        .map(|((what, _), (b, a))| format!("{what}: {}", a - b))
        .collect();
    let (said, _) = node
        .run("journalctl -u containerd --no-pager --since -15min | grep -i 'plugin' | tail -n 20")
        .unwrap_or_default();
    panic!(
        "{} of {} containers not created under nodemem's values:\n{}\nthe agent counted during the starts: {}\ncontainerd on its plugins:\n{said}",
        missed.len(),
        starts.len(),
        missed.join("\n"),
        counted.join(", ")
    );
}

/// A pod of the phase's kind, started, its container's ID.
async fn one_pod(client: &kube::Client, node: &str, name: &str) -> String {
    let pod: core::Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {PHASE_POD: "true"}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "r", "image": "nodemem.local/workload:1",
                "imagePullPolicy": "Never", "args": ["-report-cgroup", "-allocate", "1Mi"],
                "resources": {"requests": {"memory": "16Mi", "cpu": "5m"},
                              "limits": {"memory": "32Mi"}}}]}
    }))
    .unwrap();
    start_pods(client, std::slice::from_ref(&pod)).await;
    let api: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    container_id(&api, name).await
}

/// A container's memory files on the node, once they stop changing (a pass is due).
fn container_files(node: &mut RealNode, id: &str) -> BTreeMap<String, String> {
    let (out, code) = node
        .run(&format!(
            "d=$(find /sys/fs/cgroup/kubepods.slice -type d -name 'cri-containerd-{id}.scope' | head -n1) && for f in memory.min memory.low memory.high; do echo $f=$(cat $d/$f); done"
        ))
        .unwrap();
    assert_eq!(code, 0, "{out}");
    reported(&out)
}

/// The upper bound of a histogram's quantile (one `request` label), from its
/// cumulative buckets (labels in any order).
fn histogram_bound(metrics: &str, name: &str, request: &str, q: f64) -> Option<f64> {
    let wanted = format!("request=\"{request}\"");
    let buckets: Vec<(f64, f64)> = metrics
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&format!("{name}_bucket{{"))?;
            let (labels, count) = rest.split_once("} ")?;
            let labels: Vec<&str> = labels.split(',').collect();
            if !labels.contains(&wanted.as_str()) {
                return None;
            }
            let le = labels
                .iter()
                .find_map(|l| l.strip_prefix("le=\""))?
                .trim_end_matches('"');
            Some((
                le.parse().unwrap_or(f64::INFINITY),
                count.trim().parse().ok()?,
            ))
        })
        .collect();
    let total = buckets.last()?.1;
    buckets
        .iter()
        .find(|(_, c)| *c >= q * total)
        .map(|(le, _)| *le)
}

/// NRI on (containerd 2.2.9's default): the node says so, and over N real starts
/// every container ran its first instructions under nodemem's values, which its OCI
/// spec carried. Prints the window the probe saw, the plugin's answer time and the
/// start latency (compared with the reaction's in the reaction phase).
pub(crate) async fn values_before_the_first_instruction(
    node: &mut RealNode,
    bed: &Bed<'_>,
    agent_ip: &str,
) -> f64 {
    let said = reported_path(&bed.client, &node.name.clone(), "NRI").await;
    assert_eq!(
        said.runtime.as_deref(),
        Some("containerd v2.2.9"),
        "{said:?}"
    );
    let before = nri_counters(node, agent_ip);
    let total = starts_to_measure();
    let starts = probe_starts(node, &bed.client, "nri", total).await;
    let after = nri_counters(node, agent_ip);
    all_started_under_their_specs(node, &starts, before, after);
    let [adjusted, unknown, _, closed] = std::array::from_fn(|i| after[i] - before[i]);
    assert!(
        adjusted >= total as f64,
        "{adjusted} of {total} creations adjusted"
    );
    assert_eq!(unknown, 0.0, "pods unknown at creation");
    // The plugin answers on a thread of its own: the agent's passes never make the
    // runtime give up on it.
    assert_eq!(
        closed, 0.0,
        "the runtime closed the plugin during the starts"
    );
    // Nobody else sets these values here: none is reported as changed after creation
    // (the reaction does not race runc for them).
    assert_eq!(
        agent_metric(node, agent_ip, OVERRIDDEN),
        0.0,
        "values reported overridden"
    );
    // What the agent computes for a container equals what its spec carried: a pod kept
    // running past the agent's passes holds the spec's values, unchanged.
    let id = one_pod(&bed.client, &node.name.clone(), "nri-held").await;
    let spec = spec_unified(node, &id);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let files = container_files(node, &id);
    for (file, value) in spec
        .iter()
        .filter(|(f, _)| MEMORY_FILES.contains(&f.as_str()))
    {
        assert_eq!(
            files.get(file),
            Some(value),
            "nri-held: {file} after the passes {files:?}, spec {spec:?}"
        );
    }
    let metrics = agent_metrics(node, agent_ip);
    let answer = |request: &str, q: f64| {
        histogram_bound(&metrics, "nodemem_agent_nri_answer_seconds", request, q)
            .unwrap_or_else(|| panic!("no {request} answers counted:\n{metrics}"))
    };
    let (create50, create99) = (
        answer("CreateContainer", 0.5),
        answer("CreateContainer", 0.99),
    );
    let (sandbox50, sandbox99) = (answer("RunPodSandbox", 0.5), answer("RunPodSandbox", 0.99));
    // Past the runtime's request timeout containerd fails the request.
    assert!(
        create99 < 2.0 && sandbox99 < 2.0,
        "answers: p99 <= {create99} s, {sandbox99} s"
    );
    let first = starts.iter().filter(|s| s.at_first_sight).count();
    let median = start_median(&starts);
    eprintln!(
        "NRI: {} real container starts, every one started under nodemem's values (its spec's); in place at the probe's first sight: {first} of {}; cgroup created -> values in place: {}; answered CreateContainer in <= {:.2} ms median, <= {:.2} ms p99, RunPodSandbox in <= {:.2} ms median, <= {:.2} ms p99 (of 2000 ms); pod start (pod cgroup -> container cgroup) median {median:.1} ms",
        starts.len(),
        starts.len(),
        windows(&starts),
        create50 * 1e3,
        create99 * 1e3,
        sandbox50 * 1e3,
        sandbox99 * 1e3,
    );
    median
}

/// containerd restarted under the agent: the plugin registers again and the next
/// container is created with nodemem's values. The agent killed: pods keep starting
/// (containerd dropped the plugin that is gone), and the restarted agent registers and
/// repairs the container created meanwhile.
pub(crate) async fn nri_survives_restarts(node: &mut RealNode, bed: &Bed<'_>, agent_ip: &str) {
    let name = node.name.clone();
    let (out, code) = node.run("systemctl restart containerd").unwrap();
    assert_eq!(code, 0, "{out}");
    eventually(
        "the agent registered again after containerd's restart",
        Duration::from_secs(60),
        async || {
            (agent_metric(
                node,
                agent_ip,
                "nodemem_agent_nri_connections_total{result=\"closed\"}",
            ) >= 1.0
                && agent_metric(node, agent_ip, REGISTERED) == 1.0)
                .then_some(())
        },
    )
    .await;
    let id = one_pod(&bed.client, &name, "nri-after-restart").await;
    let spec = spec_unified(node, &id);
    let at_start = reported(&start_line(node, "nri-after-restart"));
    assert!(spec.contains_key("memory.high"), "{spec:?}");
    assert_eq!(
        at_start.get("memory.high"),
        spec.get("memory.high"),
        "after containerd's restart"
    );

    // The agent's process killed: the kubelet restarts its container after a while.
    let (out, code) = node.run("pkill -KILL -f '^/nodemem agent'").unwrap();
    assert_eq!(code, 0, "no agent process to kill: {out}");
    let killed = Instant::now();
    let away = one_pod(&bed.client, &name, "nri-agent-away").await;
    let running = Instant::now();
    eprintln!("NRI: a pod started while the agent was away");
    // Its /metrics refuses connections until the kubelet has restarted it.
    eventually(
        "the restarted agent registered",
        Duration::from_secs(120),
        async || {
            let metrics = super::agent_metrics_if_up(node, agent_ip)?;
            (series_value(&metrics, REGISTERED) == 1.0).then_some(())
        },
    )
    .await;
    // Same resources as nri-after-restart: the same values, repaired.
    let registered = Instant::now();
    let wanted = container_files(node, &id);
    eventually(
        "the container created while the agent was away holds nodemem's values",
        Duration::from_secs(60),
        async || (container_files(node, &away) == wanted).then_some(()),
    )
    .await;
    // The window a pod runs without nodemem's values when it starts before the plugin
    // registers (issue 64): from its container running to the repair, and the part of
    // it after the agent's registration (the rest is the kubelet's restart back-off).
    eprintln!(
        "NRI: the pod started while the agent was away ran {:.1?} without nodemem's values \
         (running {:.1?} after the kill, the agent registered again {:.1?} after that, \
         its values {:.1?} after the registration was seen)",
        running.elapsed(),
        running - killed,
        registered - running,
        registered.elapsed(),
    );
    let api: Api<core::Pod> = Api::namespaced(bed.client.clone(), "default");
    for pod in ["nri-held", "nri-after-restart", "nri-agent-away"] {
        let _ = api.delete(pod, &Default::default()).await;
    }
}

/// containerd with NRI off (its configuration file gets the NRI plugin's `disable`;
/// the rest of it, the node's runtime settings, stays): the agent reports the reaction as the path (and why), and
/// the reaction writes the values; the reaction's figures are measured here.
pub(crate) async fn without_nri_the_reaction_holds(
    node: &mut RealNode,
    bed: &Bed<'_>,
    agent_ip: &str,
    nri_start_median: Option<f64>,
) {
    let (out, code) = node
        .run(&format!(
            "printf '[plugins.\"io.containerd.nri.v1.nri\"]\\n  disable = true\\n' >> {CONTAINERD_CONFIG} && systemctl restart containerd"
        ))
        .unwrap();
    assert_eq!(code, 0, "{out}");
    let said = reported_path(&bed.client, &node.name.clone(), "Reaction").await;
    let reason = said.reason.clone().unwrap_or_default();
    assert!(
        ["NoSocket", "NotListening"].contains(&reason.as_str()),
        "{said:?}"
    );
    eprintln!("NRI off in containerd: the node reports {said:?}");
    super::reaction::reaction_to_real_container_starts(node, &bed.client, agent_ip).await;
    if let Some(with) = nri_start_median {
        eprintln!("pod start median with the NRI plugin {with:.1} ms (the reaction's is above)");
    }
}
