//! `enforcement: Kubelet`: the real agent renders the kubelet drop-in, which the real
//! kubelet's own configuration validation accepts; the restart command and the
//! `KubeletRestartRequired` paths; a kubelet version that cannot express the settings;
//! leaving Kubelet mode. The drop-ins of the example policies are checked with the
//! kubelet too.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use kube::api::{Patch, PatchParams};
use kube::Client;
use nodemem_api::NodeMemoryPolicy;
use nodemem_e2e::repo_root;
use nodemem_model::cluster::policy::Enforcement;
use nodemem_model::node::kubelet_dropin::{render, DropInOwner, KubeletRefusal, KubeletReserved};
use nodemem_testkit::binaries::control_plane_binaries;
use nodemem_testkit::cgroup_tree::CgroupTree;
use nodemem_testkit::nodes::SimNode;
use nodemem_testkit::Identity;
use serde_json::{json, Value};

use crate::agent::{configs, spawn_agent_with, wait_for, AgentProcess};
use crate::authority::apply_manifest;
use crate::common::{admin, cluster};

/// What the kubelet's own validation says about a drop-in directory: Ok when it gets
/// past configuration validation (it then stops at the missing kubeconfig), the
/// validation error otherwise. The control plane's kubelet.
fn kubelet_validates(config_dir: &Path) -> Result<(), String> {
    kubelet_of_version_validates(&control_plane_binaries().unwrap().kubelet, config_dir)
}

/// [`kubelet_validates`] with the kubelet binary `kubelet`.
fn kubelet_of_version_validates(kubelet: &Path, config_dir: &Path) -> Result<(), String> {
    let base = config_dir.parent().unwrap().join("kubelet-base.yaml");
    // These hosts run cgroup v1; the base config says that is fine for a validation run.
    std::fs::write(
        &base,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfailCgroupV1: false\n",
    )
    .unwrap();
    let out = Command::new(kubelet)
        .arg(format!("--config={}", base.display()))
        .arg(format!("--config-dir={}", config_dir.display()))
        .arg("--kubeconfig=/nonexistent")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    if log.contains("invalid kubeconfig") {
        return Ok(());
    }
    let line = log
        .lines()
        .find(|l| l.contains("command failed"))
        .unwrap_or("the kubelet stopped without saying why");
    Err(line.to_string())
}

fn example_policy(name: &str) -> NodeMemoryPolicy {
    let path = repo_root().join(format!("examples/{name}/policy.yaml"));
    serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every example policy's drop-in, rendered for each supported kubelet version, is
/// accepted by that version's own kubelet (each built from its own module).
#[test]
fn the_example_policies_drop_ins_pass_each_kubelets_own_validation() {
    let bin = control_plane_binaries().unwrap();
    let versions: Vec<&str> = bin.kubelets.iter().map(|(v, _)| v.as_str()).collect();
    assert!(
        versions.contains(&"v1.37.2") && versions.contains(&"v1.36.3"),
        "{versions:?}"
    );
    let owner = DropInOwner {
        node: "n1",
        revision: "r1",
    };
    for (version, kubelet) in &bin.kubelets {
        let dir = tempfile::tempdir().unwrap();
        let conf_d = dir.path().join("conf.d");
        std::fs::create_dir_all(&conf_d).unwrap();
        let mut checked = Vec::new();
        // Before v1.36 the MemoryQoS gate is HardReservation and has no policy field.
        let v135 = version.as_str() < "v1.36";
        let parsed = nodemem_model::kubelet::version::KubeletVersion::parse(version).unwrap();
        for example in ["general", "batch", "database", "numa-database", "kubelet"] {
            let policy = example_policy(example);
            let mut settings = nodemem_api::convert::node_settings(&policy.spec.settings).unwrap();
            settings.enforcement = Enforcement::Kubelet;
            match render(&settings, version, &KubeletReserved::default(), owner) {
                Ok(dropin) => {
                    std::fs::write(conf_d.join("~nodemem.conf"), &dropin.text).unwrap();
                    assert_eq!(
                        kubelet_of_version_validates(kubelet, &conf_d),
                        Ok(()),
                        "{example} for {version}: the kubelet refuses\n{}",
                        dropin.text
                    );
                    checked.push(example);
                }
                Err(refusals) => {
                    let reservation = settings.memory_qos.reservation_policy;
                    let want = if v135 {
                        KubeletRefusal::NoReservationPolicy(parsed, reservation)
                    } else {
                        KubeletRefusal::HardReservation(parsed)
                    };
                    assert_eq!(refusals, vec![want], "{example} for {version}");
                }
            }
        }
        let expressible: &[&str] = if v135 {
            &["database", "numa-database"]
        } else {
            &["general", "batch", "kubelet"]
        };
        assert_eq!(checked, expressible, "{version}");

        // No memory.high: a null factor for v1.37, which its kubelet takes; refused
        // before (an older kubelet's unset factor means 0.9).
        let mut none =
            nodemem_api::convert::node_settings(&example_policy("kubelet").spec.settings).unwrap();
        none.memory_qos.throttling_factor = None;
        match render(&none, version, &KubeletReserved::default(), owner) {
            Ok(dropin) => {
                assert!(version.as_str() >= "v1.37", "{version}");
                assert!(dropin.text.contains("memoryThrottlingFactor: null\n"));
                std::fs::write(conf_d.join("~nodemem.conf"), &dropin.text).unwrap();
                assert_eq!(
                    kubelet_of_version_validates(kubelet, &conf_d),
                    Ok(()),
                    "{version}: the kubelet refuses\n{}",
                    dropin.text
                );
            }
            Err(refusals) => {
                assert!(version.as_str() < "v1.37", "{version}");
                assert_eq!(refusals[0].reason(), "KubeletCannotExpress", "{refusals:?}");
            }
        }

        // The check can fail: the value nodemem refuses to render, written by hand.
        std::fs::write(
            conf_d.join("~nodemem.conf"),
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmemoryReservationPolicy: HardReservation\n",
        )
        .unwrap();
        if v135 {
            // No such field before v1.36: dropped, as any unknown field (below).
            assert_eq!(
                kubelet_of_version_validates(kubelet, &conf_d),
                Ok(()),
                "{version}"
            );
        } else {
            let refused = kubelet_of_version_validates(kubelet, &conf_d).unwrap_err();
            assert!(
                refused.contains("failed to validate kubelet configuration")
                    && refused.contains(
                        "option \\\"HardReservation\\\" specified for memoryReservationPolicy"
                    ),
                "{version}: {refused}"
            );
        }
        // A field the kubelet does not know is not refused in a drop-in: it is decoded
        // leniently and dropped (cmd/kubelet/app/server.go mergeKubeletConfigurations).
        // A setting a version cannot express would be silently lost, which is why
        // nodemem refuses to render it (KubeletCannotExpress) rather than trust the
        // kubelet to refuse it.
        std::fs::write(
            conf_d.join("~nodemem.conf"),
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmemoryNotAField: 1\n",
        )
        .unwrap();
        assert_eq!(
            kubelet_of_version_validates(kubelet, &conf_d),
            Ok(()),
            "{version}: an unknown field in a drop-in is ignored"
        );
    }
}

/// A stand-in for the kubelet's healthz: answers 200, counting requests.
fn healthz_server() -> (String, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/healthz", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf);
            counted.fetch_add(1, Ordering::SeqCst);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        }
    });
    (url, hits)
}

/// A kubelet process that started `secs_from_now` seconds from now, in the agent's
/// procfs root.
fn kubelet_started(proc: &Path, secs_from_now: i64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as i64;
    std::fs::write(proc.join("stat"), format!("btime {}\n", now - 1000)).unwrap();
    std::fs::create_dir_all(proc.join("4242")).unwrap();
    std::fs::write(proc.join("4242/comm"), "kubelet\n").unwrap();
    std::fs::write(
        proc.join("4242/stat"),
        format!(
            "4242 (kubelet) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {} 0 0\n",
            (1000 + secs_from_now) * ticks
        ),
    )
    .unwrap();
    std::fs::write(
        proc.join("4242/cgroup"),
        "0::/system.slice/kubelet.service\n",
    )
    .unwrap();
    // The host's mount namespace, PID 1's and the kubelet's.
    for pid in ["1", "4242"] {
        let ns = proc.join(pid).join("ns");
        std::fs::create_dir_all(&ns).unwrap();
        if std::fs::symlink_metadata(ns.join("mnt")).is_err() {
            std::os::unix::fs::symlink("mnt:[4026531841]", ns.join("mnt")).unwrap();
        }
    }
}

const NODE: &str = "kubelet-node-1";

fn spec(revision: &str, enforcement: &str, factor: f64) -> Value {
    json!({
        "policy": "kubelet-test", "revision": revision, "enforcement": enforcement,
        "memoryQoS": {"throttlingFactor": factor, "reservationPolicy": "TieredReservation"},
        "memoryManager": {"policy": "Static", "reservedMemory": [
            {"numaNode": 0, "limits": {"memory": "1124Mi"}},
            {"numaNode": 1, "limits": {"memory": "1Gi"}}]},
        "nodeReserved": {"kubeReserved": "1Gi", "systemReserved": "1Gi", "evictionHard": "100Mi"},
    })
}

async fn set_spec(client: &Client, spec: Value) {
    configs(client.clone())
        .patch(
            NODE,
            &PatchParams::apply("nodemem-controller-test").force(),
            &Patch::Apply(json!({
                "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
                "metadata": {"name": NODE}, "spec": spec,
            })),
        )
        .await
        .unwrap();
}

/// The Applied condition once it has this reason (and the status it came with).
async fn applied_with(client: &Client, agent: &AgentProcess, reason: &str) -> (Value, Value) {
    wait_for(
        &format!("Applied with reason {reason}"),
        agent,
        async || {
            let c = configs(client.clone()).get_status(NODE).await.ok()?;
            let status = c.data.get("status")?.clone();
            let applied = status["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Applied" && c["reason"] == reason)?
                .clone();
            Some((applied, status))
        },
    )
    .await
}

struct Paths {
    conf_d: PathBuf,
    dropin: PathBuf,
    mm_state: PathBuf,
    restarts: PathBuf,
}

fn restarts(p: &Paths) -> usize {
    std::fs::read_to_string(&p.restarts).map_or(0, |s| s.lines().count())
}

/// `enforcement: Kubelet` with the real agent: the drop-in passes the real kubelet's
/// configuration validation; the Memory Manager state is removed when its policy
/// changes; `KubeletRestartRequired` until a kubelet start shows in procfs; a restart
/// command and a healthz wait; a kubelet version that cannot express the settings is
/// refused and nothing is written; leaving Kubelet mode removes the drop-in.
#[tokio::test]
async fn kubelet_mode_renders_a_valid_drop_in_and_restarts_the_kubelet() {
    let cp = cluster();
    let client = admin().await;
    apply_manifest(&client, "deploy/namespace.yaml").await;
    apply_manifest(&client, "deploy/agent/rbac.yaml").await;
    apply_manifest(&client, "deploy/agent/admission-policy.yaml").await;
    SimNode::new(NODE).register(&client).await.unwrap();
    let tree = CgroupTree::new(
        nodemem_model::values::cgroup_layout::CgroupDriver::Systemd,
        2,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for n in 0..2 {
        let node_dir = dir.path().join(format!("sys/devices/system/node/node{n}"));
        std::fs::create_dir_all(&node_dir).unwrap();
        std::fs::write(
            node_dir.join("meminfo"),
            format!("Node {n} MemTotal:       8388608 kB\n"),
        )
        .unwrap();
    }
    let p = Paths {
        conf_d: dir.path().join("kubelet/conf.d"),
        dropin: dir.path().join("kubelet/conf.d/~nodemem.conf"),
        mm_state: dir.path().join("kubelet/memory_manager_state"),
        restarts: dir.path().join("restarts"),
    };
    std::fs::create_dir_all(&p.conf_d).unwrap();
    std::fs::write(
        dir.path().join("kubelet/config.yaml"),
        "kind: KubeletConfiguration\n",
    )
    .unwrap();
    std::fs::write(&p.mm_state, "{\"policyName\":\"None\"}").unwrap();
    let kubeconfig = cp.kubeconfig(&Identity::Agent(NODE.into())).await.unwrap();
    let kubelet_args = |more: &[String]| -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "--kubelet-config".into(),
            dir.path().join("kubelet/config.yaml").into(),
            "--kubelet-config-dir".into(),
            p.conf_d.clone().into(),
            "--kubelet-memory-manager-state".into(),
            p.mm_state.clone().into(),
        ];
        args.extend(more.iter().map(OsString::from));
        args
    };

    // 1. No restart command: the drop-in is written, the Memory Manager state removed
    //    (None -> Static), and the config says a restart is owed.
    set_spec(&client, spec("rev-1", "Kubelet", 0.8)).await;
    let agent = spawn_agent_with(
        NODE,
        tree.root(),
        dir.path(),
        &kubeconfig,
        "agent-1.log",
        &kubelet_args(&[]),
    );
    let (owed, status) = applied_with(&client, &agent, "KubeletRestartRequired").await;
    assert_eq!(owed["status"], "False");
    assert!(
        owed["message"]
            .as_str()
            .unwrap()
            .contains("restart the kubelet to apply it, after making sure"),
        "{owed}"
    );
    assert_ne!(
        status["observedRevision"], "rev-1",
        "not applied until the kubelet restarts"
    );
    let text = std::fs::read_to_string(&p.dropin).unwrap();
    assert!(
        text.contains("revision rev-1 (kubelet v1.36.3)")
            && text.contains("memoryThrottlingFactor: 0.8"),
        "{text}"
    );
    assert!(
        !p.mm_state.exists(),
        "memoryManagerPolicy changes: its state goes first"
    );
    assert_eq!(
        kubelet_validates(&p.conf_d),
        Ok(()),
        "the real kubelet accepts\n{text}"
    );
    let untouched = tree.read("kubepods.slice", "memory.min").ok();

    // 2. The kubelet is seen to restart (procfs): Applied, with what it enforces.
    kubelet_started(&dir.path().join("proc"), 2);
    let (done, status) = applied_with(&client, &agent, "KubeletConfigured").await;
    assert_eq!(done["status"], "True", "{done}");
    assert_eq!(status["observedRevision"], "rev-1");
    assert_eq!(
        tree.read("kubepods.slice", "memory.min").ok(),
        untouched,
        "the agent writes no cgroup values itself"
    );
    drop(agent);

    // 3. A restart command and healthz: a new revision is written, the kubelet
    //    restarted once and seen back; the Memory Manager is unchanged so its state stays.
    std::fs::write(&p.mm_state, "{\"policyName\":\"Static\"}").unwrap();
    let (healthz, hits) = healthz_server();
    let command = format!("echo restarted >> {}", p.restarts.display());
    let agent = spawn_agent_with(
        NODE,
        tree.root(),
        dir.path(),
        &kubeconfig,
        "agent-2.log",
        &kubelet_args(&[
            "--kubelet-restart-command".into(),
            command,
            "--kubelet-healthz-url".into(),
            healthz,
        ]),
    );
    set_spec(&client, spec("rev-2", "Kubelet", 0.7)).await;
    let (done, status) = wait_for("rev-2 configured", &agent, async || {
        let (c, s) = applied_with(&client, &agent, "KubeletConfigured").await;
        (s["observedRevision"] == "rev-2").then_some((c, s))
    })
    .await;
    // The pass that restarted says so; a pass right after it (the status writer keeps
    // the newest) says the drop-in is in effect, which is as true: seen under load,
    // 2026-11-28. The restart itself is counted below and in the agent's log.
    let message = done["message"].as_str().unwrap();
    assert!(
        message.ends_with("the kubelet was restarted") || message.ends_with("is in effect"),
        "{done}"
    );
    assert!(
        agent.log().contains("restarted the kubelet"),
        "{}",
        agent.log()
    );
    // Status reports what the kubelet is asked to do: node 0 holds 1124Mi back.
    assert_eq!(
        status["node"]["numaNodes"][0]["memory"]["memory"]["reserved"],
        1124i64 << 20,
        "{status:#}"
    );
    assert_eq!(restarts(&p), 1, "{}", agent.log());
    assert!(hits.load(Ordering::SeqCst) >= 1, "healthz was asked");
    assert!(
        p.mm_state.exists(),
        "same Memory Manager settings: the state stays"
    );
    assert!(std::fs::read_to_string(&p.dropin)
        .unwrap()
        .contains("memoryThrottlingFactor: 0.7"));
    assert_eq!(kubelet_validates(&p.conf_d), Ok(()));

    // 4. The node's kubelet is downgraded to one that cannot express the settings:
    //    refused with the reason, the drop-in left as it was, no restart.
    let before = std::fs::read_to_string(&p.dropin).unwrap();
    SimNode::new(NODE)
        .kubelet_version("v1.35.2")
        .register(&client)
        .await
        .unwrap();
    let (refused, _) = applied_with(&client, &agent, "KubeletCannotExpress").await;
    assert!(
        refused["message"].as_str().unwrap().contains(
            "kubelet v1.35.2 cannot express memoryQoS with reservationPolicy TieredReservation"
        ),
        "{refused}"
    );
    assert_eq!(std::fs::read_to_string(&p.dropin).unwrap(), before);
    assert_eq!(restarts(&p), 1);
    SimNode::new(NODE).register(&client).await.unwrap();

    // 5. Back to enforcement: Agent: the drop-in goes, the kubelet restarts once more,
    //    and the agent writes the cgroups itself.
    set_spec(&client, spec("rev-3", "Agent", 0.7)).await;
    wait_for("rev-3 applied by the agent", &agent, async || {
        let (_, s) = applied_with(&client, &agent, "Applied").await;
        (s["observedRevision"] == "rev-3").then_some(())
    })
    .await;
    assert!(!p.dropin.exists(), "the drop-in is removed");
    assert_eq!(restarts(&p), 2);
    assert!(
        !p.mm_state.exists(),
        "the kubelet's Memory Manager changes back to its own"
    );
}
