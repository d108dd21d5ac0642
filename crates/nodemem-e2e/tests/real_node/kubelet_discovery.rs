//! The kubelet read where it really is: the agent (the DaemonSet's pod) finds the real
//! kubelet's process and reads what it runs through its root. The kubelet is started
//! once with its configuration at a path nodemem never assumed and a drop-in directory
//! of its own, and once with Memory QoS and its eviction threshold given only as
//! flags; each time the agent says where it read from, and what it computes from it
//! is what the kubelet itself runs with (its allocatable, the memory.high it writes).

use super::*;
use nodemem_api::config::NodeMemoryConfigStatus;
use nodemem_model::values::factor::ThrottlingFactor;
use nodemem_model::values::memory_qos::{container_memory_high, NodeMemoryFacts};

/// Where this phase moves the kubelet's configuration.
const ELSEWHERE: &str = "/etc/kubelet-elsewhere";
const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

pub(crate) async fn the_kubelet_is_read_where_it_runs_from(node: &mut RealNode, bed: &Bed<'_>) {
    use futures::FutureExt;
    let original = node_file(node, "/etc/default/kubelet");
    let outcome = std::panic::AssertUnwindSafe(read_where_it_runs_from(node, bed, &original))
        .catch_unwind()
        .await;
    // Back as it was, whatever happened: the later phases need the kubelet as installed.
    run_ok(
        node,
        &format!("if [ -f {ELSEWHERE}/config.yaml ]; then mv {ELSEWHERE}/config.yaml /var/lib/kubelet/config.yaml; fi; rm -rf {ELSEWHERE}"),
    );
    restart_with_args(node, bed, &original).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    let s = kubelet_read(bed, &node.name, "the kubelet restored", |k| {
        k.config.as_deref() == Some("/var/lib/kubelet/config.yaml") && k.flags.is_empty()
    })
    .await;
    let conflict = condition(&s, "KubeletConflict");
    assert_eq!(conflict.reason, "NoConflict", "{conflict:?}");
}

async fn read_where_it_runs_from(node: &mut RealNode, bed: &Bed<'_>, original: &str) {
    let name = node.name.clone();
    // As installed: the kubelet's own process and file.
    let s = kubelet_read(bed, &name, "the kubelet as the node starts it", |k| {
        k.config.as_deref() == Some("/var/lib/kubelet/config.yaml")
    })
    .await;
    let k = s.node.as_ref().and_then(|n| n.kubelet.clone()).unwrap();
    assert!(
        k.process
            .as_deref()
            .is_some_and(|p| p.starts_with("kubelet (pid ")),
        "{k:?}"
    );
    assert_eq!(k.version.as_deref(), Some(KUBELET_V136));
    assert_eq!(condition(&s, "KubeletSupported").reason, "Tested");

    // Elsewhere, with a drop-in directory of its own that sets the eviction threshold;
    // the default path is gone, so nothing can be read from there by assumption.
    let args = original.replace(
        "--config=/var/lib/kubelet/config.yaml --config-dir=/etc/kubernetes/kubelet.conf.d",
        &format!("--config={ELSEWHERE}/config.yaml --config-dir={ELSEWHERE}/conf.d"),
    );
    assert_ne!(args, original, "the node's kubelet arguments: {original}");
    run_ok(
        node,
        &format!(
            "mkdir -p {ELSEWHERE}/conf.d && mv /var/lib/kubelet/config.yaml {ELSEWHERE}/config.yaml && printf '{}evictionHard:\\n  memory.available: 300Mi\\n' > {ELSEWHERE}/conf.d/10-site.conf",
            HEADER.replace('\n', "\\n")
        ),
    );
    restart_with_args(node, bed, &args).await;
    let s = kubelet_read(bed, &name, "the configuration elsewhere", |k| {
        k.config.as_deref() == Some(&format!("{ELSEWHERE}/config.yaml"))
    })
    .await;
    let k = s.node.as_ref().and_then(|n| n.kubelet.clone()).unwrap();
    assert_eq!(k.drop_ins, [format!("{ELSEWHERE}/conf.d/10-site.conf")]);
    assert!(k.flags.is_empty(), "{k:?}");
    threshold_is_the_kubelets(bed, &name, &s, 300 << 20).await;

    // Memory QoS and the threshold only as flags: the kubelet writes memory.high
    // itself, nodemem says so (KubeletConflict names the flag) and leaves it; the
    // ceiling nodemem computes for a container without a limit is the kubelet's.
    let flags = "--feature-gates=MemoryQoS=true --eviction-hard=memory.available<200Mi";
    restart_with_args(
        node,
        bed,
        &args.replace("--config=", &format!("{flags} --config=")),
    )
    .await;
    let s = kubelet_read(bed, &name, "the flags", |k| k.flags.len() == 2).await;
    let k = s.node.as_ref().and_then(|n| n.kubelet.clone()).unwrap();
    assert_eq!(
        k.flags,
        [
            "--feature-gates=MemoryQoS=true",
            "--eviction-hard=memory.available<200Mi"
        ]
    );
    threshold_is_the_kubelets(bed, &name, &s, 200 << 20).await;
    let conflict = condition(&s, "KubeletConflict");
    assert_eq!(
        (conflict.status.as_str(), conflict.reason.as_str()),
        ("True", "KubeletMemoryQoS"),
        "{conflict:?}"
    );
    assert!(
        conflict.message.contains("--feature-gates=MemoryQoS=true"),
        "{conflict:?}"
    );
    the_kubelets_memory_high_is_nodemems(node, bed, &s).await;
}

/// The config's status once the agent read the kubelet and `read` holds; its
/// `KubeletConfigRead` condition True.
async fn kubelet_read(
    bed: &Bed<'_>,
    name: &str,
    what: &str,
    read: impl Fn(&nodemem_api::config::KubeletFacts) -> bool,
) -> NodeMemoryConfigStatus {
    let configs: Api<NodeMemoryConfig> = Api::all(bed.client.clone());
    let mut last = None;
    let found = within(Duration::from_secs(180), async || {
        let status = configs.get_opt(name).await.ok().flatten()?.status?;
        last = Some(status.clone());
        let k = status.node.as_ref()?.kubelet.as_ref()?;
        let ok = status
            .conditions
            .iter()
            .any(|c| c.type_ == "KubeletConfigRead" && c.status == "True");
        (ok && read(k)).then_some(status)
    })
    .await;
    found.unwrap_or_else(|| {
        panic!(
            "{what}: not reported within {:?}; last status: {}",
            paced(Duration::from_secs(180)),
            serde_json::to_string_pretty(&last).unwrap_or_default()
        )
    })
}

fn condition(
    s: &NodeMemoryConfigStatus,
    type_: &str,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    s.conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition: {:?}", s.conditions))
        .clone()
}

/// The threshold the agent reports is the one the kubelet runs with: the Node's
/// capacity less its allocatable (the test node reserves nothing else).
async fn threshold_is_the_kubelets(
    bed: &Bed<'_>,
    name: &str,
    s: &NodeMemoryConfigStatus,
    want: i64,
) {
    let reported = s.node.as_ref().and_then(|n| n.hard_eviction_memory);
    assert_eq!(reported, Some(want), "status.node.hardEvictionMemory");
    let nodes: Api<core::Node> = Api::all(bed.client.clone());
    let gap = within(Duration::from_secs(60), || async {
        let n = nodes.get(name).await.ok()?;
        let facts = nodemem_api::k8s::node_status_facts(&n);
        let gap = facts.capacity_memory? - facts.allocatable_memory?;
        (gap == want).then_some(gap)
    })
    .await;
    assert_eq!(gap, Some(want), "the Node's capacity - allocatable");
}

/// A container with a request and no limit: memory.high is the kubelet's (nodemem
/// leaves it), from its allocatable ceiling; nodemem's own computation from what it
/// read (the Node's allocatable and the threshold it reports) gives the same bytes.
async fn the_kubelets_memory_high_is_nodemems(
    node: &mut RealNode,
    bed: &Bed<'_>,
    s: &NodeMemoryConfigStatus,
) {
    let name = node.name.clone();
    let pods: Api<core::Pod> = Api::namespaced(bed.client.clone(), "default");
    let pod: core::Pod = serde_json::from_value(json!({
        "metadata": {"name": "no-limit", "labels": {PHASE_POD: "true"}},
        "spec": {"nodeName": name, "containers": [{
            "name": "w", "image": "nodemem.local/workload:1", "imagePullPolicy": "Never",
            "args": ["-allocate", "16Mi"],
            "resources": {"requests": {"memory": "96Mi"}}}]}}))
    .unwrap();
    nodemem_testkit::clients::create_pod(&pods, &pod)
        .await
        .unwrap();
    let id = eventually("pod no-limit running", Duration::from_secs(180), || async {
        Some(container_id(&pods, "no-limit").await).filter(|id| !id.is_empty())
    })
    .await;
    let uid = pods.get("no-limit").await.unwrap().metadata.uid.unwrap();
    let dir = container_dir(bed.driver, &pod_dir(bed.driver, "Burstable", &uid), &id);
    let n = Api::<core::Node>::all(bed.client.clone())
        .get(&name)
        .await
        .unwrap();
    let status = nodemem_api::k8s::node_status_facts(&n);
    let facts = NodeMemoryFacts {
        allocatable_memory: status.allocatable_memory,
        capacity_memory: status.capacity_memory,
        hard_eviction_memory: s.node.as_ref().and_then(|n| n.hard_eviction_memory),
        page_size: s.node.as_ref().and_then(|n| n.page_size).unwrap_or(4096),
        kernel_version: None,
        kubelet_version: status.kubelet_version(),
        kubelet_float: status.kubelet_float(),
    };
    // The node's configuration names memoryThrottlingFactor 0.9.
    let factor = ThrottlingFactor::from_f64(0.9).unwrap();
    let want = container_memory_high(factor, &facts, 96 << 20, 0)
        .expect("a container with a request below its ceiling gets memory.high");
    let read = within(Duration::from_secs(60), async || {
        let v = node_file(node, &format!("{dir}/memory.high"));
        (v.trim() == want.to_string()).then_some(())
    })
    .await;
    assert!(
        read.is_some(),
        "{dir}/memory.high reads {} (the kubelet's); nodemem computes {want}",
        node_file(node, &format!("{dir}/memory.high")).trim()
    );
}

fn node_file(node: &mut RealNode, path: &str) -> String {
    let (out, code) = node.run(&format!("cat {path}")).unwrap();
    assert_eq!(code, 0, "{path}: {out}");
    out
}

/// Rewrites /etc/default/kubelet (the unit's KUBELET_ARGS) and restarts the kubelet;
/// waits for the Node to be Ready after it.
async fn restart_with_args(node: &mut RealNode, bed: &Bed<'_>, default_kubelet: &str) {
    std::fs::write(node.share().join("kubelet.default"), default_kubelet).unwrap();
    let before = node_clock(node);
    let (out, code) = node
        .run_within(
            "cp /mnt/nodemem/kubelet.default /etc/default/kubelet && systemctl restart kubelet && until systemctl is-active -q kubelet; do sleep 1; done",
            Duration::from_secs(120),
        )
        .unwrap();
    assert_eq!(code, 0, "{out}");
    node_ready_after_restart(node, &bed.client, before).await;
}
