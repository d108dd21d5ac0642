//! Phase: an uninstall gives the node back to its kubelet (issue 41, item 2). The
//! chart's pre-delete hook command (`nodemem stand-down --give-back`, as the hook pod
//! runs it, with the controller's identity) after the controller has stopped: the
//! agent's pod releases what nodemem set on the real kernel and in systemd's units and
//! reports it, then the config, the Lease and the agent DaemonSet go. Afterwards no
//! nodemem pod is left on the node and every memory.min, memory.low and memory.high
//! under kubepods reads what this kubelet (Memory QoS off) leaves there: 0, 0, max.
//!
//! The chart's pre-delete hook command (`nodemem stand-down --give-back`, with the
//! controller's identity) after the controller has stopped: the agent's pod releases
//! what nodemem set on the real kernel and in systemd's units and reports it, then the
//! config, the Lease and the agent DaemonSet go; every memory.min, memory.low and
//! memory.high under kubepods reads what this kubelet leaves there: 0, 0, max.

use super::*;

pub(crate) async fn an_uninstall_gives_the_node_back(
    node: &mut RealNode,
    bed: &Bed<'_>,
    installed: &mut Installed,
) {
    // A workload, so that pod and container cgroups are checked too.
    let name = node.name.clone();
    a_workload_runs(node, bed, &name).await;
    // Something to give back: nodemem's values on the node (the workload's included).
    let deadline = Instant::now() + paced(Duration::from_secs(60));
    let governed = loop {
        let (_, set) = nodemem_values(node);
        if set.len() >= 3 || Instant::now() > deadline {
            break set;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert!(
        governed.len() >= 3,
        "nodemem set no values to give back: {governed:?}"
    );
    installed.controller.stop(Duration::from_secs(10));
    let hook = std::process::Command::new(nodemem_e2e::nodemem())
        .args([
            "stand-down",
            "--namespace=nodemem-system",
            "--deployment=nodemem-controller",
            "--give-back",
            "--give-back-seconds=120",
        ])
        .env(
            "KUBECONFIG",
            bed.cp.kubeconfig(&Identity::Controller).await.unwrap(),
        )
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&hook.stdout),
        String::from_utf8_lossy(&hook.stderr)
    );
    assert!(
        hook.status.success(),
        "nodemem stand-down --give-back: {said}"
    );
    assert!(
        said.contains("1 node(s) gave back what nodemem set;") && !said.contains("did not report"),
        "{said}"
    );
    let pods: Api<core::Pod> = Api::namespaced(bed.client.clone(), "nodemem-system");
    let agents = ListParams::default().labels("app.kubernetes.io/name=nodemem-agent");
    let gone = within(Duration::from_secs(120), || async {
        pods.list(&agents)
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    assert!(gone.is_some(), "the agent's pod is still there");
    let configs: Api<NodeMemoryConfig> = Api::all(bed.client.clone());
    assert!(configs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty());
    let files = all_given_back(node, "the give-back");
    eprintln!(
        "{}: the uninstall's give-back: {} memory files read what the kubelet leaves",
        node.name, files
    );
}

/// Every memory file under kubepods reads what this kubelet leaves there after `when`;
/// how many were read (at least 12, or the check would say little).
pub(crate) fn all_given_back(node: &mut RealNode, when: &str) -> usize {
    let (files, kept) = nodemem_values(node);
    assert!(files >= 12, "only {files} memory files read");
    assert!(
        kept.is_empty(),
        "values nodemem set are still there after {when}:\n{}",
        kept.join("\n")
    );
    files
}

/// How many memory.min, memory.low and memory.high files there are under kubepods, and
/// those that do not read what this kubelet (Memory QoS off) leaves there (0, 0, max),
/// as `path: value`.
pub(crate) fn nodemem_values(node: &mut RealNode) -> (usize, Vec<String>) {
    let (listing, _) = node
        .run("find /sys/fs/cgroup/kubepods* -name memory.min -o -name memory.low -o -name memory.high | while read f; do echo \"$f=$(cat $f)\"; done")
        .unwrap();
    let files: Vec<(&str, &str)> = listing.lines().filter_map(|l| l.split_once('=')).collect();
    let kept = files
        .iter()
        .filter(|(path, value)| {
            let kubelets = if path.ends_with("memory.high") {
                "max"
            } else {
                "0"
            };
            *value != kubelets
        })
        .map(|(path, value)| format!("{path}: {value}"))
        .collect();
    (files.len(), kept)
}
