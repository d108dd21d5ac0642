//! A decoy kubelet on the real node (issue 58): a pod's process named `kubelet`,
//! started after the node's kubelet, whose command line names a configuration of its
//! own (Memory QoS on, another threshold) and a writable drop-in directory. Newest by
//! start time and named like the kubelet, it was what nodemem took for the kubelet
//! before it looked at mount namespaces; under `enforcement: Kubelet` it would have
//! received nodemem's drop-in while the host's kubelet was restarted for it.
//!
//! The kubelet-mode phase it runs in: `enforcement: Kubelet`: the drop-in rendered into
//! the kubelet's own `--config-dir` found from its process, the kubelet restarted, the
//! config's `Applied` says the kubelet enforces the revision (`KubeletConfigured`); on
//! v1.35, from the drop-in's old name `99-nodemem.conf` beside a site's `zz-site.conf`:
//! the new name `~nodemem.conf` written, the old one removed, and the kubelet's
//! `/configz` runs nodemem's factor, not the site's; beside it a decoy (`decoy.rs`): a
//! pod whose process the kernel names `kubelet` (its command a link named `kubelet` to
//! the workload's program), started after the node's kubelet, its command line naming a
//! configuration of its own (Memory QoS on, 1Gi, factor 0.1) and a writable drop-in
//! directory: the revision's drop-in lands in the host kubelet's directory only, the
//! decoy's stays empty, the config reports the host's kubelet (systemd's MainPID) and
//! names the decoy in `status.node.kubelet.ignored` and a `KubeletIgnored` Warning, the
//! kubelet is restarted once for the revision and never for the decoy, and the decoy
//! still runs.

use super::*;

/// The decoy's directory on the node, the pod's `/decoy`: `kubelet`, a link to the
/// workload image's program (so that the kernel names the process `kubelet`, the
/// basename it was executed by), its configuration and its drop-in directory.
const HOST_DIR: &str = "/var/lib/nodemem-decoy";
const POD: &str = "decoy-kubelet";

/// The decoy as the node runs it.
pub(crate) struct Decoy {
    /// Its process on the node.
    pub pid: u32,
}

/// Starts the decoy pod and finds its process; asserts that it is what the issue says:
/// named `kubelet` by the kernel, started after the host's kubelet.
pub(crate) async fn start(node: &mut RealNode, bed: &Bed<'_>) -> Decoy {
    run_ok(
        node,
        &format!(
            "mkdir -p {HOST_DIR}/conf.d && ln -sfn /workload {HOST_DIR}/kubelet && printf 'apiVersion: kubelet.config.k8s.io/v1beta1\\nkind: KubeletConfiguration\\nfeatureGates:\\n  MemoryQoS: true\\nmemoryThrottlingFactor: 0.1\\nevictionHard:\\n  memory.available: 1Gi\\n' > {HOST_DIR}/config.yaml"
        ),
    );
    let pods: Api<core::Pod> = Api::namespaced(bed.client.clone(), "default");
    let pod: core::Pod = serde_json::from_value(json!({
        "metadata": {"name": POD, "labels": {PHASE_POD: "true"}},
        "spec": {"nodeName": node.name, "containers": [{
            "name": "kubelet", "image": "nodemem.local/workload:1", "imagePullPolicy": "Never",
            // The workload's flags end at `--`; what follows is a kubelet's.
            "command": ["/decoy/kubelet"],
            "args": ["-allocate", "1Mi", "--",
                     "--config=/decoy/config.yaml", "--config-dir=/decoy/conf.d"],
            "volumeMounts": [{"name": "decoy", "mountPath": "/decoy"}]}],
            "volumes": [{"name": "decoy",
                         "hostPath": {"path": HOST_DIR, "type": "Directory"}}]}}))
    .unwrap();
    nodemem_testkit::clients::create_pod(&pods, &pod)
        .await
        .unwrap();
    eventually("the decoy running", Duration::from_secs(180), || async {
        Some(container_id(&pods, POD).await).filter(|id| !id.is_empty())
    })
    .await;
    // Processes that end between the glob and the read are no matter (stderr dropped).
    let (found, code) = node
        .run("grep -l -a '^/decoy/kubelet' /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3")
        .unwrap();
    let pids: Vec<u32> = found
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let [pid] = pids[..] else {
        panic!("one decoy process (grep's code {code}): {found:?}");
    };
    let (comm, _) = node.run(&format!("cat /proc/{pid}/comm")).unwrap();
    assert_eq!(comm.trim(), "kubelet", "the kernel's name of the decoy");
    let (started, code) = node
        .run(&format!(
            "k=$(systemctl show kubelet.service -p MainPID --value); echo $(cut -d' ' -f22 /proc/$k/stat) $(cut -d' ' -f22 /proc/{pid}/stat)"
        ))
        .unwrap();
    let ticks: Vec<u64> = started
        .split_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect();
    assert!(
        code == 0 && ticks.len() == 2 && ticks[1] > ticks[0],
        "the decoy starts after the host's kubelet (start ticks: kubelet, decoy): {started}"
    );
    Decoy { pid }
}

/// After a revision the agent wrote as a drop-in and restarted the kubelet for: the
/// host's kubelet is the one reported, the decoy is named among the ignored and in a
/// `KubeletIgnored` Warning, nothing was written into the decoy's drop-in directory,
/// the kubelet was not restarted again, and the decoy still runs untouched.
pub(crate) async fn was_ignored(
    node: &mut RealNode,
    bed: &Bed<'_>,
    decoy: &Decoy,
    invocation: &str,
) {
    let (main_pid, _) = node
        .run("systemctl show kubelet.service -p MainPID --value")
        .unwrap();
    let name = node.name.clone();
    let configs: Api<NodeMemoryConfig> = Api::all(bed.client.clone());
    let named = format!("kubelet (pid {})", decoy.pid);
    let kubelet = eventually(
        "the decoy among the ignored kubelets",
        Duration::from_secs(120),
        || async {
            let k = configs.get(&name).await.ok()?.status?.node?.kubelet?;
            k.ignored.iter().any(|i| i.starts_with(&named)).then_some(k)
        },
    )
    .await;
    assert_eq!(
        kubelet.process.as_deref(),
        Some(format!("kubelet (pid {})", main_pid.trim()).as_str()),
        "the host's kubelet is the one read: {kubelet:?}"
    );
    let why = kubelet
        .ignored
        .iter()
        .find(|i| i.starts_with(&named))
        .unwrap();
    assert!(
        why.contains("runs in another mount namespace"),
        "the decoy's reason: {why}"
    );
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(bed.client.clone(), "default");
    eventually(
        "a KubeletIgnored Warning for the decoy",
        Duration::from_secs(60),
        || async {
            events
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("KubeletIgnored")
                        && e.type_.as_deref() == Some("Warning")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                            == Some(name.as_str())
                        && e.note.as_deref().is_some_and(|n| n.contains(&named))
                })
        },
    )
    .await;
    let (left, code) = node.run(&format!("ls -A {HOST_DIR}/conf.d")).unwrap();
    assert_eq!(
        (code, left.trim()),
        (0, ""),
        "nothing of nodemem's in the decoy's drop-in directory"
    );
    assert_eq!(
        kubelet_invocation(node),
        invocation,
        "the kubelet restarted once for the revision, never for the decoy"
    );
    let (comm, code) = node.run(&format!("cat /proc/{}/comm", decoy.pid)).unwrap();
    assert_eq!((code, comm.trim()), (0, "kubelet"), "the decoy still runs");
    let decoy_pod = ListParams::default().fields(&format!("metadata.name={POD}"));
    super::remove_pods(&bed.client, &decoy_pod)
        .await
        .unwrap_or_else(|left| panic!("the decoy not gone: {left:?}"));
    run_ok(node, &format!("rm -rf {HOST_DIR}"));
}
