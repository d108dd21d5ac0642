//! `nodemem agent --once` end to end: the real binary on temp-dir cgroup, sys and proc
//! roots (the VM tier runs it on a real kernel). Values are checked against what
//! `nodemem simulate` predicts for the same settings and pods.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

mod cli_common;

use std::path::{Path, PathBuf};

use cli_common::{nodemem, nodemem_env, repo};
use nodemem_model::pod::qos::QosClass;
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_testkit::cgroup_tree::CgroupTree;
use serde_json::Value;

const EX: &str = "examples/agent-once";

struct Node {
    tree: CgroupTree,
    dir: tempfile::TempDir,
}

impl Node {
    /// A node with the example's running pods' cgroups (not the finished one, not the
    /// one still starting), two NUMA nodes, kernel 6.1.
    fn new(driver: CgroupDriver) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("cgroup")).unwrap();
        let tree = CgroupTree::at(&dir.path().join("cgroup"), driver, 2).unwrap();
        tree.add_pod(
            QosClass::Guaranteed,
            "6a4f2e3b-1c9d-4a5e-8f7b-2d3e4f5a6b7c",
            &["a1".repeat(32)],
        )
        .unwrap();
        tree.add_pod(
            QosClass::Burstable,
            "8b3c7d2e-4f5a-6b7c-9d1e-3f4a5b6c7d8e",
            &["b2".repeat(32), "c3".repeat(32)],
        )
        .unwrap();
        tree.add_pod(
            QosClass::BestEffort,
            "0c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f",
            &["d4".repeat(32)],
        )
        .unwrap();
        tree.add_pod(
            QosClass::Burstable,
            "1d2e3f4a-5b6c-7d8e-9f0a-1b2c3d4e5f6a",
            &["e5".repeat(32)],
        )
        .unwrap();
        let write = |p: PathBuf, text: &str| {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write(
            dir.path().join("proc/sys/kernel/osrelease"),
            "6.1.0-56-amd64\n",
        );
        for (n, kb) in [(0, 262_144), (1, 262_144)] {
            write(
                dir.path()
                    .join(format!("sys/devices/system/node/node{n}/meminfo")),
                &format!("Node {n} MemTotal:       {kb} kB\n"),
            );
            write(
                dir.path().join(format!(
                    "sys/devices/system/node/node{n}/hugepages/hugepages-2048kB/nr_hugepages"
                )),
                "0\n",
            );
        }
        Node { tree, dir }
    }

    fn path(&self, p: &str) -> String {
        self.dir.path().join(p).display().to_string()
    }

    fn run(&self, config: &str, extra: &[&str]) -> (i32, String, String) {
        let (status, out, err) = self.run_env(config, extra, &[]);
        (status.code().unwrap_or(-1), out, err)
    }

    fn run_env(
        &self,
        config: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> (std::process::ExitStatus, String, String) {
        let (cgroup, sys, proc, state) = (
            self.path("cgroup"),
            self.path("sys"),
            self.path("proc"),
            self.path("state"),
        );
        let mut args = vec![
            "agent",
            "--once",
            "--config",
            config,
            "--node",
            "examples/agent-once/node.yaml",
            "--pods",
            "examples/agent-once/pods.yaml",
            "--cgroup-root",
            &cgroup,
            "--sys-root",
            &sys,
            "--proc-root",
            &proc,
            "--state-dir",
            &state,
        ];
        args.extend_from_slice(extra);
        nodemem_env(&args, env)
    }

    fn json(&self, config: &str, extra: &[&str]) -> Value {
        let mut args = vec!["-o", "json"];
        args.extend_from_slice(extra);
        let (code, out, err) = self.run(config, &args);
        assert_eq!(code, 0, "{err}\n{out}");
        serde_json::from_str(&out).unwrap()
    }

    fn read(&self, cgroup: &str, file: &str) -> String {
        self.tree.read(cgroup, file).unwrap()
    }
}

fn config() -> String {
    format!("{EX}/config.yaml")
}

/// A copy of the example config with `edit` applied to its YAML text.
fn edited_config(dir: &Path, name: &str, edit: impl Fn(&str) -> String) -> String {
    let text = std::fs::read_to_string(repo().join(EX).join("config.yaml")).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, edit(&text)).unwrap();
    path.display().to_string()
}

/// `simulate -o json` for the example pods that run (the finished pod has no cgroups
/// and the kubelet does not count it), with a policy carrying the config's settings.
fn simulate_prediction(dir: &Path) -> Value {
    let pods: Value =
        serde_yaml::from_str(&std::fs::read_to_string(repo().join(EX).join("pods.yaml")).unwrap())
            .unwrap();
    let running: Vec<Value> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["status"]["phase"] != "Succeeded")
        .cloned()
        .collect();
    let pods_path = dir.join("running.yaml");
    std::fs::write(
        &pods_path,
        serde_yaml::to_string(
            &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": running}),
        )
        .unwrap(),
    )
    .unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: nodemem.io/v1alpha1\nkind: NodeMemoryPolicy\nmetadata: {name: general}\nspec:\n  nodeSelector: {matchLabels: {nodemem.io/pool: general}}\n  memoryQoS: {throttlingFactor: 0.9, reservationPolicy: TieredReservation}\n",
    )
    .unwrap();
    let (code, out, err) = nodemem(&[
        "simulate",
        "--policy",
        policy.to_str().unwrap(),
        "--node",
        "examples/agent-once/node.yaml",
        "--pods",
        pods_path.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn applies_what_simulate_predicts_then_writes_nothing_the_second_time() {
    let node = Node::new(CgroupDriver::Systemd);
    let out = node.json(&config(), &[]);
    assert!(out["failed"].as_array().unwrap().is_empty(), "{out:#}");
    assert_eq!(
        out["managedPods"], 4,
        "api, web, debug, starting; legacy opted out, report finished"
    );
    assert_eq!(
        out["missing"].as_array().unwrap().len(),
        1,
        "the starting pod's cgroup: {out:#}"
    );

    let predicted = simulate_prediction(node.dir.path());
    let kp = "kubepods.slice";
    for file in ["memory.min", "memory.low"] {
        assert_eq!(
            node.read(kp, file),
            predicted["kubepods"][file].to_string(),
            "kubepods {file}"
        );
    }
    assert_eq!(
        node.read("kubepods.slice/kubepods-burstable.slice", "memory.low"),
        predicted["qos"]["burstable"]["memory.low"].to_string()
    );
    let pod_dirs = [
        ("api", "kubepods.slice/kubepods-pod6a4f2e3b_1c9d_4a5e_8f7b_2d3e4f5a6b7c.slice", vec![("api", "a1")]),
        (
            "web",
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8b3c7d2e_4f5a_6b7c_9d1e_3f4a5b6c7d8e.slice",
            vec![("migrate", "b2"), ("web", "c3")],
        ),
        ("debug", "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0c1d2e3f_4a5b_6c7d_8e9f_0a1b2c3d4e5f.slice", vec![("shell", "d4")]),
    ];
    let mut compared = 0;
    for (name, dir, containers) in pod_dirs {
        let pod = predicted["pods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap();
        for file in ["memory.min", "memory.low", "memory.high"] {
            let want = pod["cgroup"].get(file).map_or_else(
                || {
                    if file == "memory.high" {
                        "max".into()
                    } else {
                        "0".into()
                    }
                },
                |v| v.as_i64().map_or("max".to_string(), |b| b.to_string()),
            );
            assert_eq!(node.read(dir, file), want, "{name} {file}");
            compared += 1;
            for (c, id) in &containers {
                let cdir = format!("{dir}/cri-containerd-{}.scope", id.repeat(32));
                let cp = pod["containers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|x| x["name"] == *c)
                    .unwrap();
                let want = cp["cgroup"].get(file).map_or_else(
                    || {
                        if file == "memory.high" {
                            "max".into()
                        } else {
                            "0".into()
                        }
                    },
                    |v| v.as_i64().map_or("max".to_string(), |b| b.to_string()),
                );
                assert_eq!(node.read(&cdir, file), want, "{name}/{c} {file}");
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 21);
    // The opted-out pod was not touched.
    let legacy = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1d2e3f4a_5b6c_7d8e_9f0a_1b2c3d4e5f6a.slice";
    assert_eq!(node.read(legacy, "memory.low"), "0");
    assert_eq!(
        node.read(
            &format!("{legacy}/cri-containerd-{}.scope", "e5".repeat(32)),
            "memory.high"
        ),
        "max"
    );

    let again = node.json(&config(), &[]);
    assert_eq!(again["writes"], serde_json::json!([]), "{again:#}");
}

#[test]
fn the_table_lists_cgroup_file_old_and_new_and_dry_run_writes_nothing() {
    let node = Node::new(CgroupDriver::Cgroupfs);
    let (code, out, err) = node.run(&config(), &["--dry-run"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("node agent-1: config agent-1 revision f46c4865d690dda5: would write "),
        "{out}"
    );
    let header = out.lines().nth(1).unwrap();
    for col in ["CGROUP", "FILE", "OLD", "NEW", "RESULT"] {
        assert!(header.contains(col), "{header}");
    }
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("kubepods ")
            && l.contains("memory.min")
            && l.contains("planned")),
        "{out}"
    );
    assert_eq!(node.read("kubepods", "memory.min"), "0", "dry run");
    assert!(!node.dir.path().join("state/ownership.json").exists());
    let (code, out, _) = node.run(&config(), &[]);
    assert_eq!(code, 0);
    assert!(out.contains(" wrote "), "{out}");
    assert_ne!(node.read("kubepods", "memory.min"), "0");
}

/// `agent --once` follows the config's `enforcement` as the in-cluster agent does
/// (issue 58): Observe writes nothing and says so (the table shows what Agent would
/// write); Kubelet is refused with a message, nothing written, no state recorded.
#[test]
fn the_configs_enforcement_decides_what_a_run_writes() {
    let node = Node::new(CgroupDriver::Systemd);
    let observe = edited_config(node.dir.path(), "observe.yaml", |t| {
        t.replace("spec:\n", "spec:\n  enforcement: Observe\n")
    });
    let (code, out, err) = node.run(&observe, &[]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(out.contains(" would write "), "{out}");
    assert!(
        out.contains("enforcement: Observe: nothing is written"),
        "{out}"
    );
    assert_eq!(node.read("kubepods.slice", "memory.min"), "0", "Observe");
    let kubelet = edited_config(node.dir.path(), "kubelet.yaml", |t| {
        t.replace("spec:\n", "spec:\n  enforcement: Kubelet\n")
    });
    let (code, out, err) = node.run(&kubelet, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        err.contains("agent-1: enforcement: Kubelet: the kubelet enforces these values through nodemem's drop-in"),
        "{err}"
    );
    assert_eq!(node.read("kubepods.slice", "memory.min"), "0", "Kubelet");
    assert!(!node.dir.path().join("state/ownership.json").exists());
    // Agent writes.
    let (code, out, err) = node.run(&config(), &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(" wrote "), "{out}");
    assert_ne!(node.read("kubepods.slice", "memory.min"), "0");
}

#[test]
fn disabling_memory_qos_restores_what_the_first_run_set() {
    let node = Node::new(CgroupDriver::Systemd);
    let first = node.json(&config(), &[]);
    let written = first["writes"].as_array().unwrap().clone();
    assert_eq!(written.len(), 10, "{first:#}");
    let off = edited_config(node.dir.path(), "off.yaml", |t| {
        t.replace("enabled: true", "enabled: false")
    });
    let out = node.json(&off, &[]);
    let restored = out["writes"].as_array().unwrap();
    assert_eq!(restored.len(), written.len(), "{out:#}");
    assert!(restored.iter().all(|w| w["kind"] == "restore"));
    for w in &written {
        let want = if w["file"] == "memory.high" {
            "max"
        } else {
            "0"
        };
        assert_eq!(
            node.read(w["cgroup"].as_str().unwrap(), w["file"].as_str().unwrap()),
            want
        );
    }
    assert_eq!(node.json(&off, &[])["writes"], serde_json::json!([]));
}

#[test]
fn exit_codes_tell_bad_input_from_partial_failure() {
    let node = Node::new(CgroupDriver::Systemd);
    // Bad input: one error line per problem, exit 1, nothing written.
    let bad = edited_config(node.dir.path(), "bad.yaml", |t| {
        t.replace("throttlingFactor: 0.9", "throttlingFactor: 1.5")
            .replace("TieredReservation", "Soft")
    });
    let (code, out, err) = node.run(&bad, &[]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(
        err.contains("spec.memoryQoS.reservationPolicy: unknown variant `Soft`"),
        "{err}"
    );
    assert_eq!(node.read("kubepods.slice", "memory.min"), "0");

    // A write the kernel refuses: the rest is applied, exit 3, the failure named.
    let kp = node.dir.path().join("cgroup/kubepods.slice/memory.low");
    std::fs::remove_file(&kp).unwrap();
    std::fs::create_dir(&kp).unwrap();
    let (code, out, err) = node.run(&config(), &[]);
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(
        err.lines().any(|l| l.starts_with("error: write \"")
            && l.ends_with("kubepods.slice/memory.low: Is a directory (os error 21) (errno 21)")),
        "{err}"
    );
    assert!(out.contains("failed (errno 21)"), "{out}");
    assert_ne!(
        node.read("kubepods.slice", "memory.min"),
        "0",
        "the rest of the plan ran"
    );
}

#[test]
fn a_corrupt_state_record_is_set_aside_reported_and_rederived() {
    let node = Node::new(CgroupDriver::Systemd);
    let first = node.json(&config(), &[]);
    let record = node.dir.path().join("state/ownership.json");
    let text = std::fs::read_to_string(&record).unwrap();
    std::fs::write(&record, &text[..text.len() / 3]).unwrap();
    // The next run does not stop: it says what was wrong and what it did, and applies.
    let (code, out, err) = node.run(&config(), &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    let warning = out
        .lines()
        .find(|l| l.starts_with("warning: StateRederived: "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        warning.contains("ownership.json: corrupt state record (not a state envelope: ")
            && warning.contains("; set aside as ")
            && warning.contains("what nodemem owns is re-derived from the current settings"),
        "{warning}"
    );
    let aside: Vec<_> = std::fs::read_dir(node.dir.path().join("state"))
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("ownership.json.unusable-")
        })
        .collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(
        std::fs::read_to_string(aside[0].path()).unwrap(),
        &text[..text.len() / 3]
    );
    // The re-derived record covers what the settings manage: a config that turns
    // Memory QoS off gives every value back, as after the first run.
    let written: Vec<String> = first["writes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            format!(
                "{}/{}",
                w["cgroup"].as_str().unwrap(),
                w["file"].as_str().unwrap()
            )
        })
        .collect();
    assert!(!written.is_empty());
    let off = edited_config(node.dir.path(), "off.yaml", |t| {
        t.replace("enabled: true", "enabled: false")
    });
    let back = node.json(&off, &[]);
    let restored: Vec<String> = back["writes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            format!(
                "{}/{}",
                w["cgroup"].as_str().unwrap(),
                w["file"].as_str().unwrap()
            )
        })
        .collect();
    for file in &written {
        assert!(restored.contains(file), "{file} not given back: {back:#}");
    }
}

#[test]
fn a_static_policy_checks_its_saved_numa_state_against_the_node() {
    let node = Node::new(CgroupDriver::Systemd);
    let static_config = edited_config(node.dir.path(), "static.yaml", |t| {
        format!("{t}  memoryManager:\n    policy: Static\n    reservedMemory:\n    - numaNode: 0\n      limits: {{memory: 32Mi}}\n    - numaNode: 1\n      limits: {{memory: 32Mi}}\n")
    });
    let out = node.json(&static_config, &[]);
    assert_eq!(out["pinnedPods"], 1, "{out:#}");
    let api = format!("kubepods.slice/kubepods-pod6a4f2e3b_1c9d_4a5e_8f7b_2d3e4f5a6b7c.slice/cri-containerd-{}.scope", "a1".repeat(32));
    assert_eq!(node.read(&api, "cpuset.mems"), "0");
    assert!(node.dir.path().join("state/memory-manager.json").exists());
    // Same node, same pods: nothing to do, the pin is kept.
    assert_eq!(
        node.json(&static_config, &[])["writes"],
        serde_json::json!([])
    );

    // The reservation changed under the saved state: reported with what differs.
    let changed = edited_config(node.dir.path(), "changed.yaml", |_| {
        std::fs::read_to_string(&static_config)
            .unwrap()
            .replacen("memory: 32Mi", "memory: 48Mi", 1)
    });
    let (code, _, err) = node.run(&changed, &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("memory-manager.json: the saved Memory Manager state does not match this node: NUMA node 0 memory: reserved memory changed from 33554432 to 50331648"), "{err}");
    assert!(
        err.contains("remove the file to admit every pod again"),
        "{err}"
    );

    // Unsatisfiable on this node: reserved memory on a NUMA node it lacks.
    let missing = edited_config(node.dir.path(), "missing.yaml", |_| {
        std::fs::read_to_string(&static_config)
            .unwrap()
            .replace("numaNode: 1", "numaNode: 3")
    });
    std::fs::remove_file(node.dir.path().join("state/memory-manager.json")).unwrap();
    let (code, _, err) = node.run(&missing, &[]);
    assert_eq!(code, 1);
    assert!(err.contains("this node cannot satisfy it: spec.memoryManager.reservedMemory[1].numaNode: NUMA node 3 does not exist on this node (NUMA nodes: 0, 1)"), "{err}");
}

/// Kills a child that is still running after `secs`, so a test that waits for its
/// output fails (at EOF) rather than hangs.
fn watchdog(child: &std::process::Child, secs: u64) {
    let pid = child.id();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(secs));
        // SAFETY: kill(2) on a pid; harmless if the child has already been reaped.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    });
}

/// `--follow`: a container cgroup that appears after the first pass gets its values at
/// once (inotify), without another run.
#[test]
fn follow_covers_a_cgroup_the_moment_it_appears() {
    use std::io::BufRead;
    let node = Node::new(CgroupDriver::Systemd);
    // The web container's cgroup is not there yet: moved aside, as if not created.
    let pod = node.dir.path().join("cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8b3c7d2e_4f5a_6b7c_9d1e_3f4a5b6c7d8e.slice");
    let web = pod.join(format!("cri-containerd-{}.scope", "c3".repeat(32)));
    let aside = node.dir.path().join("web-aside");
    std::fs::rename(&web, &aside).unwrap();
    let (cgroup, sys, proc, state) = (
        node.path("cgroup"),
        node.path("sys"),
        node.path("proc"),
        node.path("state"),
    );
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nodemem"))
        .args([
            "agent",
            "--once",
            "--follow",
            "--config",
            "examples/agent-once/config.yaml",
            "--node",
            "examples/agent-once/node.yaml",
            "--pods",
            "examples/agent-once/pods.yaml",
            "--cgroup-root",
            &cgroup,
            "--sys-root",
            &sys,
            "--proc-root",
            &proc,
            "--state-dir",
            &state,
        ])
        .current_dir(repo())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    watchdog(&child, 60);
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    // The first pass prints its report, then that it follows the tree.
    let mut first = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let done = line.starts_with("following ");
        first.push(line);
        if done {
            break;
        }
    }
    assert!(
        first[0].starts_with("node agent-1: config agent-1 revision"),
        "{first:?}"
    );
    assert!(
        first
            .last()
            .unwrap()
            .ends_with("/kubepods.slice for new cgroups"),
        "{first:?}"
    );
    assert_eq!(
        std::fs::read_to_string(aside.join("memory.high")).unwrap(),
        "max"
    );
    // The container appears, atomically as a mkdir on cgroupfs (a rename of a prepared
    // directory on this tree of plain files).
    std::fs::rename(&aside, &web).unwrap();
    let reaction = lines.next().unwrap().unwrap();
    child.kill().ok();
    child.wait().ok();
    assert!(
        reaction.starts_with("reacted to kubepods.slice/kubepods-burstable.slice/"),
        "{reaction}"
    );
    assert!(
        reaction.ends_with(": wrote 2 file(s), 0 failed"),
        "memory.low and memory.high: {reaction}"
    );
    // web: request 32Mi, limit 128Mi, factor 0.9 -> memory.high 118.4Mi, page-aligned.
    let high: i64 = std::fs::read_to_string(web.join("memory.high"))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(high, ((32 << 20) + (96 << 20) * 9 / 10) / 4096 * 4096);
    assert_eq!(
        std::fs::read_to_string(web.join("memory.low")).unwrap(),
        (32 << 20).to_string()
    );
}

/// The in-cluster agent logs one JSON object per line with --log-format json, and
/// says what is wrong while the apiserver is unreachable (it keeps trying).
#[test]
fn the_agent_logs_json_and_keeps_trying_an_unreachable_apiserver() {
    use std::io::BufRead;
    let node = Node::new(CgroupDriver::Systemd);
    let kubeconfig = node.dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:9', insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n",
    )
    .unwrap();
    let (cgroup, sys, proc, state) = (
        node.path("cgroup"),
        node.path("sys"),
        node.path("proc"),
        node.path("state"),
    );
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nodemem"))
        .args([
            "agent",
            "--node-name",
            "agent-1",
            "--log-format",
            "json",
            "--metrics-addr",
            "off",
            "--cgroup-root",
            &cgroup,
            "--sys-root",
            &sys,
            "--proc-root",
            &proc,
            "--state-dir",
            &state,
        ])
        .env("KUBECONFIG", &kubeconfig)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    watchdog(&child, 60);
    let lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut logs = Vec::new();
    for line in lines {
        let line = line.unwrap();
        let value: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let retrying = value["fields"]["message"] == "watch failed; retrying with backoff";
        logs.push(value);
        if retrying {
            break;
        }
    }
    child.kill().ok();
    child.wait().ok();
    // The NRI plugin logs from a thread of its own: its lines may come first.
    assert!(
        logs.iter()
            .any(|l| l["fields"]["message"]
                == "watching this node's NodeMemoryConfig, Node and pods"),
        "{logs:?}"
    );
    let failed = logs.last().unwrap();
    assert_eq!(failed["level"], "WARN");
    assert!(
        failed["fields"]["error"].as_str().unwrap().len() > 10,
        "{failed}"
    );
}

/// A kubelet that enforces Memory QoS itself keeps those files: nodemem leaves them
/// alone (and says so) instead of fighting over them. The example Node reports
/// v1.36.0, whose gate (named on) brings the default factor 0.9.
#[test]
fn files_the_kubelet_enforces_are_left_to_it() {
    let node = Node::new(CgroupDriver::Systemd);
    let kubelet = node.dir.path().join("kubelet-config.yaml");
    std::fs::write(
        &kubelet,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates:\n  MemoryQoS: true\n",
    )
    .unwrap();
    let kubelet_arg = kubelet.display().to_string();
    let out = node.json(&config(), &["--kubelet-config", &kubelet_arg]);
    assert_eq!(out["writes"], serde_json::json!([]), "{out:#}");
    let warning = out["warnings"][0].as_str().unwrap();
    assert!(
        warning.starts_with("the kubelet (v1.36.0) enforces this itself (it writes memory.high (memoryThrottlingFactor 0.9); ")
            && warning.contains("nodemem leaves memory.min, memory.low, memory.high to it"),
        "{warning}"
    );
    assert_eq!(node.read("kubepods.slice", "memory.min"), "0");
    // Without the gate, nodemem writes them.
    std::fs::write(
        &kubelet,
        "kind: KubeletConfiguration\nfeatureGates: {MemoryQoS: false}\n",
    )
    .unwrap();
    let out = node.json(&config(), &["--kubelet-config", &kubelet_arg]);
    assert_eq!(out["writes"].as_array().unwrap().len(), 10, "{out:#}");
}

/// The files that differ between two reads of a tree.
fn changed(
    before: &std::collections::BTreeMap<PathBuf, String>,
    after: &std::collections::BTreeMap<PathBuf, String>,
) -> Vec<String> {
    after
        .iter()
        .filter(|(p, v)| before.get(*p) != Some(*v))
        .map(|(p, v)| format!("{} = {}", p.display(), v.trim()))
        .collect()
}

#[test]
fn an_agent_killed_after_any_write_of_a_pass_leaves_nothing_behind() {
    // The pass's length, from a dry run on a node like the ones killed below.
    let planned = Node::new(CgroupDriver::Systemd).json(&config(), &["--dry-run"])["writes"]
        .as_array()
        .unwrap()
        .len();
    assert!(planned >= 10, "{planned}");
    let scratch = tempfile::tempdir().unwrap();
    let off = edited_config(scratch.path(), "off.yaml", |t| {
        t.replace("enabled: true", "enabled: false")
    });
    // Killed right after write k (the fault the test arms), then either the policy is
    // gone (the next run gives back), or the agent first runs again on the same
    // settings (finding its own values in place) and then gives back. Both must leave
    // every file as the kubelet left it: parents are written first, so what an agent
    // whose record missed them leaves behind is kubepods' memory.min.
    for again_first in [false, true] {
        for k in 1..=planned {
            let node = Node::new(CgroupDriver::Systemd);
            let kubelet_left = node.tree.files().unwrap();
            let kill = k.to_string();
            let (status, _, err) =
                node.run_env(&config(), &[], &[("NODEMEM_TEST_KILL_AFTER_WRITES", &kill)]);
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                status.signal(),
                Some(9),
                "killed after write {k}: {status:?} {err}"
            );
            assert!(
                err.contains(&format!("right after its cgroup write number {k} ")),
                "{err}"
            );
            let at_kill = changed(&kubelet_left, &node.tree.files().unwrap());
            assert_eq!(
                at_kill.len(),
                k,
                "the kill came right after write {k}: {at_kill:#?}"
            );
            if again_first {
                let (code, out, err) = node.run(&config(), &[]);
                assert_eq!(code, 0, "{err}\n{out}");
            }
            let (code, out, err) = node.run(&off, &[]);
            assert_eq!(code, 0, "{err}\n{out}");
            let left = changed(&kubelet_left, &node.tree.files().unwrap());
            assert!(
                left.is_empty(),
                "killed after write {k} of {planned} (run again first: {again_first}), then given back; left behind: {left:#?}"
            );
        }
    }
}

#[test]
fn a_record_that_cannot_be_saved_stops_the_pass_before_any_write_and_stays_whole() {
    let node = Node::new(CgroupDriver::Systemd);
    let first = node.json(&config(), &[]);
    assert!(!first["writes"].as_array().unwrap().is_empty());
    let record = node.dir.path().join("state/ownership.json");
    let saved = std::fs::read_to_string(&record).unwrap();
    let applied = node.tree.files().unwrap();
    // A lower factor changes values and adds none, so the record does not change...
    let lower = edited_config(node.dir.path(), "lower.yaml", |t| {
        t.replace("throttlingFactor: 0.9", "throttlingFactor: 0.6")
    });
    // ...but the off settings' record would, and a Static policy's claims would: make
    // the record unwritable (a directory where its temporary file goes: the save's
    // open fails as a full or read-only file system's would).
    std::fs::create_dir(node.dir.path().join("state/.ownership.json.tmp")).unwrap();
    let claims = edited_config(node.dir.path(), "more.yaml", |t| {
        format!("{t}  memoryManager:\n    policy: Static\n    reservedMemory:\n    - numaNode: 0\n      limits: {{memory: 32Mi}}\n    - numaNode: 1\n      limits: {{memory: 32Mi}}\n")
    });
    let (code, out, err) = node.run(&claims, &[]);
    assert_eq!(code, 1, "{err}\n{out}");
    assert!(
        err.contains("ownership.json") && err.contains("nothing was written"),
        "{err}"
    );
    assert_eq!(
        changed(&applied, &node.tree.files().unwrap()),
        Vec::<String>::new()
    );
    assert_eq!(
        std::fs::read_to_string(&record).unwrap(),
        saved,
        "the record is whole"
    );
    // What adds nothing to the record still applies.
    let (code, out, err) = node.run(&lower, &[]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(!changed(&applied, &node.tree.files().unwrap()).is_empty());
}
