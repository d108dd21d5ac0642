//! `nodemem simulate --numa` end to end through the real binary: Static-policy pinning
//! on the NUMA database example, the memory map, pod scope, and one-line errors for bad
//! topologies and reservations.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::path::PathBuf;

use serde_json::Value;

const GI: i64 = 1 << 30;
const MI: i64 = 1 << 20;

mod cli_common;

use cli_common::{nodemem, repo};

const EX: &str = "examples/numa-database";

/// simulate on the NUMA example with the given overrides (by flag) and extra flags.
fn run(policy: Option<&str>, topology: Option<&str>, extra: &[&str]) -> (i32, String, String) {
    let policy = policy.map_or(format!("{EX}/policy.yaml"), str::to_string);
    let node = format!("{EX}/node.yaml");
    let pods = format!("{EX}/pods.yaml");
    let mut args = vec![
        "simulate", "--policy", &policy, "--node", &node, "--pods", &pods,
    ];
    let topology = topology.map(str::to_string);
    if let Some(t) = &topology {
        args.extend(["--numa", t.as_str()]);
    }
    args.extend(extra);
    nodemem(&args)
}

fn json(policy: Option<&str>, topology: Option<&str>, extra: &[&str]) -> Value {
    let mut flags = vec!["-o", "json"];
    flags.extend(extra);
    let (code, stdout, stderr) = run(policy, topology, &flags);
    assert_eq!(code, 0, "stderr: {stderr}");
    serde_json::from_str(&stdout).expect("JSON output")
}

fn container<'a>(out: &'a Value, pod: &str, name: &str) -> &'a Value {
    out["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == pod)
        .unwrap_or_else(|| panic!("pod {pod}"))["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("container {name}"))
}

/// A container's `cpuset.mems`, or null when not pinned.
fn mems<'a>(out: &'a Value, pod: &str, name: &str) -> &'a Value {
    &container(out, pod, name)["cgroup"]["cpuset.mems"]
}

fn map<'a>(out: &'a Value, id: i64, kind: &str) -> &'a Value {
    &out["numa"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == id)
        .unwrap()["memoryMap"][kind]
}

#[test]
fn static_policy_pins_in_file_order_and_rejects_pod2() {
    let topo = format!("{EX}/topology.yaml");
    let out = json(None, Some(&topo), &[]);

    // pg-primary (40Gi + 512Mi hugepages) takes NUMA node 0; pg-replica no longer fits
    // there (22428Mi free) and takes node 1.
    assert_eq!(mems(&out, "pg-primary", "postgres"), "0");
    assert_eq!(mems(&out, "pg-replica", "postgres"), "1");
    // analytics (30Gi) fits on one node by capacity, but now only on both together,
    // which are separate groups: the whole pod is refused.
    let analytics = container(&out, "analytics", "duckdb");
    let reason = analytics["numa"]["rejected"].as_str().unwrap();
    assert!(reason.contains("memory=30Gi"), "{reason}");
    assert!(reason.contains("separate groups"), "{reason}");
    assert_eq!(analytics["cgroup"], serde_json::json!({}));
    // Burstable: not managed, may use every NUMA node.
    let web = container(&out, "web", "pgadmin");
    assert!(web["cgroup"].get("cpuset.mems").is_none());
    assert!(web.get("numa").is_none());
    // cache: the init container and the app container share node 0; the app reuses
    // the init container's 1Gi, so the pod holds 2Gi there, not 3Gi.
    assert_eq!(mems(&out, "cache", "warm"), "0");
    assert_eq!(mems(&out, "cache", "redis"), "0");

    // Node 0: 63Gi total, 1124Mi reserved by the policy; 40Gi + 2Gi taken.
    let m0 = map(&out, 0, "memory");
    assert_eq!(m0["total"], 63 * GI);
    assert_eq!(m0["systemReserved"], 1124 * MI);
    assert_eq!(m0["allocatable"], 63 * GI - 1124 * MI);
    assert_eq!(m0["reserved"], 42 * GI);
    assert_eq!(m0["free"], 63 * GI - 1124 * MI - 42 * GI);
    assert_eq!(map(&out, 0, "hugepages-2Mi")["reserved"], 512 * MI);
    let m1 = map(&out, 1, "memory");
    assert_eq!(m1["systemReserved"], GI);
    assert_eq!(m1["reserved"], 40 * GI);
    assert_eq!(m1["free"], 22 * GI);
    assert_eq!(map(&out, 1, "hugepages-2Mi")["free"], GI);
    // Container scope: one request per Guaranteed container that asks for memory
    // (primary, replica, analytics, warm, redis); one error.
    assert_eq!(out["numa"]["pinningRequests"], 5);
    assert_eq!(out["numa"]["pinningErrors"], 1);

    // The refused pod never runs, so hard reservation counts only admitted pods:
    // kubepods memory.min = 40Gi + 40Gi + 2Gi (Guaranteed) + 1Gi (web).
    assert_eq!(out["kubepods"]["memory.min"], 83 * GI);
    assert_eq!(out["qos"]["burstable"]["memory.min"], GI);
    let warnings: Vec<&str> = out["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with("pod db/analytics is rejected by the Memory Manager"));
}

#[test]
fn pod_scope_makes_one_request_per_pod() {
    let topo = format!("{EX}/topology.yaml");
    let out = json(None, Some(&topo), &["--topology-manager-scope", "pod"]);
    // Guaranteed pods: primary, replica, analytics, cache -> four requests; analytics
    // is refused as a whole pod.
    assert_eq!(out["numa"]["pinningRequests"], 4);
    assert_eq!(out["numa"]["pinningErrors"], 1);
    let reason = container(&out, "analytics", "duckdb")["numa"]["rejected"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(reason.starts_with("pod rejected:"), "{reason}");
    // The cache pod's request is max(init 1Gi, app 2Gi) = 2Gi, on one node.
    assert_eq!(mems(&out, "cache", "redis"), "0");
    assert_eq!(map(&out, 0, "memory")["reserved"], 42 * GI);
}

#[test]
fn without_numa_the_output_has_no_numa_keys_and_says_how_to_get_them() {
    let out = json(None, None, &[]);
    assert!(out.get("numa").is_none());
    for p in out["pods"].as_array().unwrap() {
        for c in p["containers"].as_array().unwrap() {
            assert!(c.get("numa").is_none());
            assert!(c["cgroup"].get("cpuset.mems").is_none());
        }
    }
    // No pod is refused without a topology, so all five count.
    assert_eq!(out["kubepods"]["memory.min"], (40 + 40 + 30 + 1 + 2) * GI);
    assert!(out["warnings"][0]
        .as_str()
        .unwrap()
        .contains("pass --numa TOPOLOGY"));
}

#[test]
fn a_policy_without_the_static_policy_pins_nothing() {
    let dir = std::env::temp_dir().join(format!("nodemem-numa-none-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(repo().join(EX).join("policy.yaml")).unwrap();
    let start = text.find("  memoryManager:").unwrap();
    let end = text.find("  nodeReserved:").unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, format!("{}{}", &text[..start], &text[end..])).unwrap();
    let topo = format!("{EX}/topology.yaml");
    let out = json(Some(policy.to_str().unwrap()), Some(&topo), &[]);
    assert!(out.get("numa").is_none());
    assert!(container(&out, "pg-primary", "postgres")["cgroup"]
        .get("cpuset.mems")
        .is_none());
    assert!(out["warnings"][0]
        .as_str()
        .unwrap()
        .contains("memoryManager policy None"));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn table_shows_cpuset_mems_and_the_memory_map() {
    let topo = format!("{EX}/topology.yaml");
    let (code, stdout, stderr) = run(None, Some(&topo), &[]);
    assert_eq!(code, 0, "{stderr}");
    let header = stdout.lines().nth(1).unwrap();
    assert!(header.ends_with("CPUSET.MEMS"), "{header}");
    let row = |prefix: &str, container: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(prefix) && l.split_whitespace().nth(1) == Some(container))
            .unwrap_or_else(|| panic!("row {prefix} {container}"))
            .to_string()
    };
    assert!(row("db/pg-replica", "postgres").ends_with(" 1"));
    assert!(row("db/analytics", "duckdb").ends_with(" rejected"));
    assert!(stdout.contains("NUMA memory map (pinning requests 5, errors 1)"));
    let map_row = stdout
        .lines()
        .find(|l| l.starts_with("0 ") && l.contains(" memory "))
        .unwrap();
    assert_eq!(
        map_row.split_whitespace().collect::<Vec<_>>(),
        ["0", "memory", "63Gi", "1124Mi", "63388Mi", "42Gi", "20380Mi"]
    );
}

fn temp_file(tag: &str, text: &str) -> (PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("nodemem-numa-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("file.yaml");
    std::fs::write(&path, text).unwrap();
    let shown = path.display().to_string();
    (dir, shown)
}

/// Runs with a topology text (and optionally a replacement reservedMemory block) and
/// returns the error lines; asserts a failure with no output and no panic.
fn errors(tag: &str, topology: &str, reserved: Option<&str>) -> (String, Vec<String>) {
    let (tdir, topo) = temp_file(&format!("{tag}-t"), topology);
    let policy_dir = reserved.map(|block| {
        let text = std::fs::read_to_string(repo().join(EX).join("policy.yaml")).unwrap();
        let start = text.find("    reservedMemory:").unwrap();
        let end = text.find("  nodeReserved:").unwrap();
        temp_file(
            &format!("{tag}-p"),
            &format!("{}{block}{}", &text[..start], &text[end..]),
        )
    });
    let (code, stdout, stderr) = run(
        policy_dir.as_ref().map(|(_, p)| p.as_str()),
        Some(&topo),
        &["-o", "json"],
    );
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.is_empty(), "no partial output: {stdout}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    std::fs::remove_dir_all(tdir).ok();
    if let Some((d, _)) = policy_dir {
        std::fs::remove_dir_all(d).ok();
    }
    let lines = stderr
        .lines()
        .map(|l| {
            l.strip_prefix("error: ")
                .expect("every line is an error")
                .to_string()
        })
        .collect();
    (topo, lines)
}

const TWO_NODES: &str = "numaNodes:\n- id: 0\n  memory: {memory: 63Gi, hugepages-2Mi: 1Gi}\n- id: 1\n  memory: {memory: 63Gi}\n";

#[test]
fn reserved_memory_that_does_not_fit_the_topology_fails_with_one_line_each() {
    // The sum rule holds (1124Mi + 1024Mi = 2148Mi), so only topology checks fail.
    let (_, lines) = errors(
        "reserved",
        "numaNodes:\n- id: 0\n  memory: {memory: 1Gi}\n- id: 2\n  memory: {memory: 63Gi}\n",
        None,
    );
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].ends_with(
        "spec.memoryManager.reservedMemory[0].limits.memory: reserves 1124Mi but NUMA node 0 has only 1Gi of memory"
    ), "{}", lines[0]);
    assert!(
        lines[0].contains("file.yaml with policy numa-database: "),
        "{}",
        lines[0]
    );
    assert!(lines[1].ends_with(
        "spec.memoryManager.reservedMemory[1].numaNode: NUMA node 1 does not exist on this node (NUMA nodes: 0, 2)"
    ), "{}", lines[1]);

    // Hugepages reserved on a node that has none. (The kubelet's sum rule only checks
    // the types nodeReserved reserves, so this is the one problem.)
    let (topo, lines) = errors(
        "hugepages",
        TWO_NODES,
        Some("    reservedMemory:\n    - numaNode: 0\n      limits: {memory: 1124Mi}\n    - numaNode: 1\n      limits: {memory: 1Gi, hugepages-2Mi: 2Mi}\n"),
    );
    assert_eq!(
        lines,
        [format!("{topo} with policy numa-database: spec.memoryManager.reservedMemory[1].limits.hugepages-2Mi: NUMA node 1 has no hugepages-2Mi")]
    );
}

#[test]
fn a_bad_topology_file_fails_with_one_line_each() {
    let (topo, lines) = errors(
        "topology",
        "numaNodes:\n- id: 0\n  memory: {memory: 63Gi}\n- id: 0\n  memory: {memory: 1Gi}\n- id: 1\n  memory: {memory: -1}\n",
        None,
    );
    assert_eq!(
        lines,
        [
            format!("{topo}: numaNodes[1].id: duplicate NUMA node 0"),
            format!("{topo}: numaNodes[2].memory.memory: must not be negative"),
        ]
    );
    let (topo, lines) = errors("missing", "numaNodes:\n- {id: 0}\n", None);
    assert_eq!(
        lines,
        [format!("{topo}: numaNodes[0]: missing field `memory`")]
    );
    let (code, _, stderr) = run(None, Some("examples/numa-database/nope.yaml"), &[]);
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with("error: examples/numa-database/nope.yaml: cannot read"),
        "{stderr}"
    );
}
