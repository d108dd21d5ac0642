//! Phases of nodemem installed as users install it (`install_nodemem`): the agent runs
//! as a real pod from the project's image, reports through its NodeMemoryConfig,
//! serves /metrics, writes what `nodemem simulate` predicts, and stays confined to its
//! node.

use super::*;

/// The agent's pod runs the project's image and reports through its NodeMemoryConfig:
/// the revision applied, healthy, and the facts of the real node; it serves /metrics.
pub(crate) async fn it_reports_through_its_config(
    node: &mut RealNode,
    bed: &Bed<'_>,
    installed: &Installed,
) {
    let pods: Api<core::Pod> = Api::namespaced(bed.client.clone(), "nodemem-system");
    let spec = pods.get(&installed.agent_pod).await.unwrap().spec.unwrap();
    assert_eq!(
        spec.containers[0].image.as_deref(),
        Some(installed.image.as_str())
    );
    let name = node.name.clone();
    let reported = config_applied(
        &bed.client,
        bed.admin(),
        &name,
        None,
        Duration::from_secs(120),
    )
    .await;
    let facts = reported.node.expect("node facts");
    let driver_name = match bed.driver {
        Driver::Systemd => "systemd",
        Driver::Cgroupfs => "cgroupfs",
    };
    assert_eq!(
        facts.cgroup_driver.as_deref(),
        Some(driver_name),
        "{facts:?}"
    );
    assert_eq!(facts.cgroup_version, Some(2));
    assert_eq!(
        facts.numa_nodes.len(),
        2,
        "the VM's two NUMA nodes: {facts:?}"
    );
    let (uname, _) = node.run("uname -r").unwrap();
    assert_eq!(facts.kernel_version.as_deref(), Some(uname.trim()));

    // /metrics, from the node (the pod network is the node's).
    let metrics = agent_metrics(node, &installed.agent_ip);
    assert!(metrics.contains("nodemem_agent_passes_total"), "{metrics}");
    the_agent_runs_confined(node, "enforcement: Agent");
    sys_ptrace_is_needed_to_read_the_kubelet(node, bed, installed).await;
}

/// The agent's processes as the node sees them (issue 59), in the mode the node's
/// policy runs (`mode`, for messages): the agent and its kubelet reader, each in
/// seccomp's filter mode with two filters (the runtime's default profile,
/// `seccompProfile: RuntimeDefault`, and the agent's own) and `no_new_privs`; the
/// agent holding no capability, the reader (its child) `SYS_PTRACE` (bit 19) alone.
/// Then the escape attempts the agent made from inside itself at start-up
/// (`NODEMEM_CONFINEMENT_PROBE=1`, `nodemem_agent::confine_probe`): attaching to
/// systemd and the kubelet, opening their memory for writing (through the pod's own
/// procfs, which is read-write, and the host's), reading systemd's memory, creating a file in the host's /tmp, writing on each writable mount outside
/// its trees: every one refused, as its log says.
pub(crate) fn the_agent_runs_confined(node: &mut RealNode, mode: &str) {
    let (pids, code) = node
        .run("r=$(pgrep -n -f '^/nodemem agent --kubelet-reader'); echo $r $(awk '{print $4}' /proc/$r/stat)")
        .unwrap();
    assert_eq!(code, 0, "{pids}");
    let pids: Vec<u32> = pids
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    let [reader, agent] = pids[..] else {
        panic!("{mode}: no kubelet reader and agent found: {pids:?}");
    };
    let status = |pid: u32, node: &mut RealNode| {
        let (text, code) = node
            .run(&format!(
                "grep -E '^(Seccomp|Seccomp_filters|NoNewPrivs|CapEff|CapPrm):' /proc/{pid}/status; tr '\\0' ' ' < /proc/{pid}/cmdline"
            ))
            .unwrap();
        assert_eq!(code, 0, "{text}");
        text
    };
    let field = |text: &str, name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
            .unwrap_or_default()
            .to_string()
    };
    for (pid, who, caps) in [
        (agent, "the agent", 0u64),
        (reader, "its kubelet reader", 1u64 << 19),
    ] {
        let text = status(pid, node);
        assert!(text.contains("/nodemem agent"), "{mode}: {who}: {text}");
        assert_eq!(field(&text, "Seccomp"), "2", "{mode}: {who}: {text}");
        assert_eq!(
            field(&text, "Seccomp_filters"),
            "2",
            "{mode}: {who}: the runtime's filter and the agent's own: {text}"
        );
        assert_eq!(field(&text, "NoNewPrivs"), "1", "{mode}: {who}: {text}");
        for set in ["CapEff", "CapPrm"] {
            assert_eq!(
                field(&text, set),
                format!("{caps:016x}"),
                "{mode}: {who}: {set}: {text}"
            );
        }
    }
    let (log, _) = node
        .run(&format!(
            "cat /var/log/pods/nodemem-system_nodemem-agent-*/agent/*.log | grep 'confinement probe' | grep '\"pid\":{agent}[,}}]'"
        ))
        .unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| l.split_once(" F ").map(|(_, json)| json))
        .filter_map(|json| serde_json::from_str(json).ok())
        .collect();
    let message = |v: &serde_json::Value| v["fields"]["message"].as_str().unwrap_or("").to_string();
    let done = lines
        .iter()
        .find(|v| message(v) == "confinement probe: done")
        .unwrap_or_else(|| panic!("{mode}: the agent {agent} logged no probe: {log}"));
    let allowed: Vec<_> = lines
        .iter()
        .filter(|v| message(v) == "confinement probe: ALLOWED")
        .map(|v| v["fields"]["attempt"].clone())
        .collect();
    assert!(
        allowed.is_empty(),
        "{mode}: escapes allowed: {allowed:?}\n{log}"
    );
    let attempts = done["fields"]["attempts"].as_u64().unwrap_or(0);
    assert_eq!(
        done["fields"]["refused"].as_u64(),
        Some(attempts),
        "{mode}: {log}"
    );
    let refused: Vec<String> = lines
        .iter()
        .filter(|v| message(v) == "confinement probe: refused")
        .map(|v| v["fields"]["attempt"].as_str().unwrap_or("").to_string())
        .collect();
    for wanted in [
        "ptrace(PTRACE_ATTACH, 1)",
        "open /proc/1/mem for writing",
        "open /host/proc/1/mem for writing",
        "process_vm_readv(1)",
        "create /host/proc/1/root/tmp/nodemem-confinement-probe",
    ] {
        assert!(
            refused.iter().any(|r| r == wanted),
            "{mode}: {wanted} not attempted: {refused:?}"
        );
    }
    // A writable mount of the pod's beside the agent's trees (/dev, /etc/hosts, ...).
    assert!(
        refused.iter().any(|r| r.starts_with("write to /")),
        "{mode}: no writable mount tried: {refused:?}"
    );
    // The kubelet too: attached to and its memory opened.
    assert!(
        refused
            .iter()
            .filter(|r| r.starts_with("ptrace(PTRACE_ATTACH, "))
            .count()
            == 2,
        "{mode}: {refused:?}"
    );
    let (gone, _) = node.run("ls /tmp/nodemem-confinement-probe 2>&1").unwrap();
    assert!(gone.contains("No such file"), "{mode}: {gone}");
}

/// Pods of every QoS class (init containers, a restartable sidecar, pod-level
/// resources, one opted out) started by the real kubelet while nodemem runs: what the
/// agent wrote is what `nodemem simulate` predicts for the same Node, pods and policy,
/// at the QoS levels, pod slices and container scopes (memory.max is the kubelet's),
/// each where the kubelet put it. Returns those files and values.
pub(crate) async fn it_writes_what_simulate_predicts(
    node: &mut RealNode,
    bed: &Bed<'_>,
    installed: &Installed,
) -> std::collections::BTreeMap<String, (String, String)> {
    let name = node.name.clone();
    start_pods(&bed.client, &qos_pods(&name, "n", true)).await;
    let expected = expected_files(
        &bed.client,
        bed.admin(),
        &installed.policy,
        installed.work.path(),
        bed.driver,
        &name,
        &installed.agent_container(),
    )
    .await;
    let wanted: Vec<(&String, &String)> = expected.iter().map(|(p, (_, v))| (p, v)).collect();
    node_values_become(
        node,
        &wanted,
        "files that do not read what nodemem simulate predicts",
    );
    assert!(
        expected.len() >= 60,
        "only {} files checked",
        expected.len()
    );
    expected
}

/// The controller ran the whole time; stopped now (it would delete a config of a node
/// that does not exist, which this check needs). The admission policy still confines
/// the real pod: its own token (the kubelet's projected service-account token, bound
/// to the pod and so to the node) may patch this node's config status and no other
/// node's.
pub(crate) async fn its_token_reaches_only_its_own_config(
    node: &mut RealNode,
    bed: &Bed<'_>,
    installed: &mut Installed,
) {
    assert!(
        installed.controller.exited().is_none(),
        "the controller exited: {}",
        installed.controller.log_tail(20)
    );
    installed.controller.stop(Duration::from_secs(5));

    let name = node.name.clone();
    let pods: Api<core::Pod> = Api::namespaced(bed.client.clone(), "nodemem-system");
    let configs: Api<NodeMemoryConfig> = Api::all(bed.client.clone());
    let agent_uid = pods
        .get(&installed.agent_pod)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let (token, code) = node
        .run(&format!(
            "cat /var/lib/kubelet/pods/{agent_uid}/volumes/kubernetes.io~projected/kube-api-access-*/token"
        ))
        .unwrap();
    assert_eq!(code, 0, "{token}");
    let other: NodeMemoryConfig = serde_json::from_value(json!({
        "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
        "metadata": {"name": "another-node"},
        "spec": {"policy": "real", "revision": "r1"}
    }))
    .unwrap();
    configs.create(&Default::default(), &other).await.unwrap();
    let agent_kubeconfig = installed.work.path().join("agent.kubeconfig");
    std::fs::write(
        &agent_kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: agent\n  user:\n    token: {}\ncontexts:\n- name: c\n  context: {{cluster: c, user: agent}}\ncurrent-context: c\n",
            bed.cp.server,
            bed.cp.dir().join("ca.crt").display(),
            token.trim()
        ),
    )
    .unwrap();
    let patch = |config: &str| {
        kubectl(
            &agent_kubeconfig,
            &[
                "patch",
                "nodememoryconfig",
                config,
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"lastError":"from the test"}}"#,
            ],
        )
    };
    patch(&name).expect("the agent's token patches its own node's config status");
    let denied = patch("another-node").expect_err("another node's config is not the agent's");
    assert!(
        denied.to_string().contains(&format!(
            "the nodemem agent may only change the NodeMemoryConfig of its own node ({name}), not another-node"
        )),
        "{denied}"
    );
    // The test's own config for a node that does not exist goes with the phase (the
    // controller would delete it as a gone node's; the give-back would wait for its
    // agent).
    kubectl(
        bed.admin(),
        &[
            "delete",
            "nodememoryconfig",
            "another-node",
            "--ignore-not-found",
        ],
    )
    .unwrap();
}

/// The one capability the agent's DaemonSet asks for is needed, and only by the
/// kubelet reader (issue 59): `nodemem agent --print-kubelet` (which reads the kubelet
/// as the reader does) in a pod with the agent's image, `hostPID` and `/proc`, every
/// capability dropped, fails naming `CAP_SYS_PTRACE` (the host's mount namespace
/// cannot be read, so no process is known to be the host's kubelet); the same pod with
/// `SYS_PTRACE` added reads the node's kubelet. The agent itself runs with none
/// ([`the_agent_runs_confined`]).
pub(crate) async fn sys_ptrace_is_needed_to_read_the_kubelet(
    node: &mut RealNode,
    bed: &Bed<'_>,
    installed: &Installed,
) {
    let pods: Api<core::Pod> = Api::namespaced(bed.client.clone(), "nodemem-system");
    let mut ended = Vec::new();
    for (name, add) in [
        ("nodemem-caps-none", json!([])),
        ("nodemem-caps-sys-ptrace", json!(["SYS_PTRACE"])),
    ] {
        let pod: core::Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node.name, "hostPID": true, "restartPolicy": "Never",
                "containers": [{"name": "print", "image": installed.image,
                    "imagePullPolicy": "Never", "command": ["/nodemem"],
                    "args": ["agent", "--print-kubelet", "--proc-root=/host/proc", "-o", "json"],
                    "securityContext": {"runAsUser": 0, "allowPrivilegeEscalation": false,
                        "capabilities": {"drop": ["ALL"], "add": add},
                        "seccompProfile": {"type": "RuntimeDefault"},
                        "appArmorProfile": {"type": "Unconfined"}},
                    "volumeMounts": [{"name": "proc", "mountPath": "/host/proc", "readOnly": true}]}],
                "volumes": [{"name": "proc", "hostPath": {"path": "/proc", "type": "Directory"}}]}}))
        .unwrap();
        nodemem_testkit::clients::create_pod(&pods, &pod)
            .await
            .unwrap();
        let phase = eventually(
            &format!("{name} ended"),
            Duration::from_secs(180),
            || async {
                let phase = pods.get(name).await.ok()?.status?.phase?;
                matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase)
            },
        )
        .await;
        let (log, _) = node
            .run(&format!(
                "cat /var/log/pods/nodemem-system_{name}_*/print/*.log"
            ))
            .unwrap();
        ended.push((name, phase, log));
        let _ = pods.delete(name, &Default::default()).await;
    }
    let (_, phase, log) = &ended[0];
    assert_eq!(phase, "Failed", "without any capability: {log}");
    assert!(
        log.contains("NoKubeletProcess") && log.contains("CAP_SYS_PTRACE"),
        "without any capability the error names the capability: {log}"
    );
    let (_, phase, log) = &ended[1];
    assert_eq!(phase, "Succeeded", "with SYS_PTRACE: {log}");
    assert!(log.contains("\"kubelet\""), "with SYS_PTRACE: {log}");
}
