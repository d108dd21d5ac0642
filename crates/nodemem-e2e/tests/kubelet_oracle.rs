//! nodemem's pod cgroup values against the kubelet's own code, version by version
//! (issue 60): `tests/kubelet-oracle`, built from each Kubernetes version's modules
//! (`tests/scripts/build-kubelet-oracle.sh`), defaults each generated pod as the
//! apiserver does and answers what that version's kubelet writes to the pod's cgroup
//! (`ResourceConfigForPod`, then the pod-level memory.high where the version has it).
//! nodemem reads the defaulted pod as the agent reads pods from the apiserver
//! (`pod_from_k8s`) and plans it for a node of that kubelet version. Every value must be
//! the same: memory.max, memory.min, memory.low and memory.high, present or absent.
//!
//! The cases: one to three app containers and up to two init containers or sidecars,
//! each without resources, with requests, with limits (the apiserver's defaulting makes
//! them requests), with both, or Guaranteed; pod-level resources; a RuntimeClass
//! overhead; quantities written every way the API takes them (zero, fractions of a
//! byte, milli-units, exponents, decimal and binary suffixes); Memory QoS on and off,
//! each reservation policy, factors with and without a value. Only valid pods: a
//! request never above its limit, pod-level resources never below what the containers
//! add up to.
//!
//! Where the kubelet's code is not reachable as a library (the containers'
//! memory.high, computed by an unexported method of the runtime manager; the QoS
//! classes' memory.min/low, by the QoS container manager's), the real node judges
//! (TESTING.md, "The kubelet's own code as the oracle").

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use k8s_openapi::api::core::v1 as core;
use nodemem_model::kubelet::version::KubeletVersion;
use nodemem_model::pod::profile::PodMemoryProfile;
use nodemem_model::values::cgroup::{CgroupValue, MEMORY_HIGH, MEMORY_LOW, MEMORY_MAX, MEMORY_MIN};
use nodemem_model::values::factor::{KubeletFloat, ThrottlingFactor};
use nodemem_model::values::memory_qos::{
    plan_node, unprotected_pod_cgroup, MemoryQosSettings, NodeMemoryFacts, ReservationPolicy,
};
use serde_json::{json, Value};

/// Cases per version (`NODEMEM_ORACLE_CASES` for more or fewer).
const CASES: usize = 100_000;

/// splitmix64: the same cases on every run, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A memory amount in bytes and how a pod spec may write it: the text's value is
/// never below the bytes and at most one byte above (a fraction rounds up).
fn memory(rng: &mut Rng, bytes: u64) -> String {
    match rng.below(9) {
        0 => format!("{bytes}"),
        1 if bytes.is_multiple_of(1 << 20) => format!("{}Mi", bytes >> 20),
        2 if bytes.is_multiple_of(1024) => format!("{}Ki", bytes >> 10),
        3 if bytes.is_multiple_of(1_000_000) => format!("{}M", bytes / 1_000_000),
        4 if bytes.is_multiple_of(1000) => format!("{}k", bytes / 1000),
        5 if bytes.is_multiple_of(1000) => format!("{}e3", bytes / 1000),
        6 if bytes.is_multiple_of(1 << 30) => format!("{}Gi", bytes >> 30),
        // Milli-bytes: the kubelet's Value() rounds up to the byte.
        7 => format!("{}m", bytes * 1000),
        8 if bytes > 0 && bytes.is_multiple_of(2) => format!("{}.5", bytes - 1),
        _ => format!("{bytes}"),
    }
}

/// A memory amount in bytes: zero now and then, round sizes, odd ones.
fn amount(rng: &mut Rng) -> u64 {
    match rng.below(10) {
        0 => 0,
        1..=4 => (1 + rng.below(2048)) << 20,
        5 | 6 => (1 + rng.below(4_000_000)) * 1000,
        7 => 1 + rng.below(1 << 34),
        8 => (1 + rng.below(16)) << 30,
        _ => 4096 * (1 + rng.below(1 << 20)),
    }
}

fn cpu(rng: &mut Rng) -> String {
    match rng.below(3) {
        0 => format!("{}m", 1 + rng.below(4000)),
        1 => format!("{}", 1 + rng.below(8)),
        _ => "0".into(),
    }
}

/// One container's resources and the bytes it adds to the pod's requests and limits
/// (None for a missing memory limit); `guaranteed`: CPU and memory limits equal to
/// requests.
fn resources(rng: &mut Rng, guaranteed: bool) -> (Value, u64, Option<u64>) {
    if guaranteed {
        let bytes = amount(rng).max(1 << 20);
        let (m, c) = (memory(rng, bytes), format!("{}m", 1 + rng.below(4000)));
        let r = json!({"cpu": c, "memory": m});
        return (json!({"requests": r, "limits": r}), bytes, Some(bytes));
    }
    let mut requests = serde_json::Map::new();
    let mut limits = serde_json::Map::new();
    let (mut req, mut lim) = (0u64, None);
    match rng.below(5) {
        0 => {}
        1 => {
            req = amount(rng);
            requests.insert("memory".into(), memory(rng, req).into());
        }
        2 => {
            // Limits only: the apiserver makes them the requests.
            let l = amount(rng);
            limits.insert("memory".into(), memory(rng, l).into());
            req = l;
            lim = Some(l);
        }
        _ => {
            let l = amount(rng);
            req = if l == 0 { 0 } else { rng.below(l + 1) };
            requests.insert("memory".into(), memory(rng, req).into());
            limits.insert("memory".into(), memory(rng, l).into());
            lim = Some(l);
        }
    }
    if rng.chance(50) {
        requests.insert("cpu".into(), cpu(rng).into());
    }
    if rng.chance(25) {
        limits.insert("cpu".into(), format!("{}", 8 + rng.below(8)).into());
    }
    let mut r = serde_json::Map::new();
    if !requests.is_empty() {
        r.insert("requests".into(), requests.into());
    }
    if !limits.is_empty() {
        r.insert("limits".into(), limits.into());
    }
    // A zero limit is "no limit" to the kubelet (IsZero), as a missing one.
    (Value::Object(r), req, lim.filter(|l| *l > 0))
}

/// One generated pod (valid as the apiserver validates it) and its case.
fn case(rng: &mut Rng, i: usize) -> Value {
    let guaranteed = rng.chance(15);
    let mut sum_req = 0u64;
    let mut sum_lim: Option<u64> = Some(0);
    let mut containers = Vec::new();
    for n in 0..1 + rng.below(3) {
        let (res, req, lim) = resources(rng, guaranteed);
        sum_req += req;
        sum_lim = sum_lim.zip(lim).map(|(a, b)| a + b);
        containers.push(json!({"name": format!("c{n}"), "image": "w", "resources": res}));
    }
    let mut inits = Vec::new();
    for n in 0..rng.below(3) {
        let (res, _, _) = resources(rng, guaranteed);
        let mut c = json!({"name": format!("i{n}"), "image": "w", "resources": res});
        if rng.chance(50) {
            c["restartPolicy"] = "Always".into();
        }
        inits.push(c);
    }
    let mut spec = json!({"containers": containers});
    if !inits.is_empty() {
        spec["initContainers"] = inits.into();
    }
    if rng.chance(25) {
        // Pod-level resources, never below what the containers add up to.
        let mut pod = serde_json::Map::new();
        let request = sum_req + amount(rng) / 4;
        let mut requests = serde_json::Map::new();
        let mut limits = serde_json::Map::new();
        if rng.chance(70) {
            requests.insert("memory".into(), memory(rng, request).into());
        }
        if rng.chance(70) {
            let limit = request.max(sum_lim.unwrap_or(0)) + amount(rng) / 2;
            if limit > 0 {
                limits.insert("memory".into(), memory(rng, limit).into());
            }
        }
        if rng.chance(40) {
            requests.insert("cpu".into(), format!("{}", 8 + rng.below(8)).into());
        }
        if !requests.is_empty() {
            pod.insert("requests".into(), requests.into());
        }
        if !limits.is_empty() {
            pod.insert("limits".into(), limits.into());
        }
        if !pod.is_empty() {
            spec["resources"] = pod.into();
        }
    }
    if rng.chance(15) {
        let overhead = amount(rng);
        spec["overhead"] = json!({"memory": memory(rng, overhead)});
        spec["runtimeClassName"] = "with-overhead".into();
    }
    let factor = match rng.below(8) {
        0 => Value::Null,
        1 => json!(0.9),
        2 => json!(0.8),
        3 => json!(0.1),
        4 => json!(1.0),
        _ => json!((1 + rng.below(1000)) as f64 / 1000.0),
    };
    json!({
        "pod": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("p{i}"), "namespace": "default", "uid": format!("u{i}")},
                "spec": spec},
        "memoryQoS": rng.chance(80),
        "policy": if rng.chance(50) { "TieredReservation" } else { "None" },
        "factor": factor,
    })
}

/// What one side says of a pod cgroup: memory.max, .min, .low, .high.
type Values = [Option<i64>; 4];

/// The oracle's answer: the defaulted pod and what the kubelet writes.
#[derive(serde::Deserialize)]
struct Answer {
    pod: core::Pod,
    max: Option<i64>,
    min: Option<String>,
    low: Option<String>,
    high: Option<String>,
}

impl Answer {
    fn values(&self) -> Values {
        let bytes = |v: &Option<String>| v.as_deref().map(|s| s.parse::<i64>().expect("bytes"));
        [
            self.max,
            bytes(&self.min),
            bytes(&self.low),
            bytes(&self.high),
        ]
    }
}

/// nodemem's values for the defaulted pod on a node of `version`'s kubelet.
fn nodemems(version: &str, case: &Value, pod: &core::Pod) -> Values {
    let pod = nodemem_api::k8s::pod::pod_from_k8s(pod).expect("a pod nodemem reads");
    let kubelet = KubeletVersion::parse(version).unwrap();
    let node = NodeMemoryFacts {
        allocatable_memory: Some(64 << 30),
        capacity_memory: Some(64 << 30),
        hard_eviction_memory: Some(100 << 20),
        page_size: 4096,
        kernel_version: Some("6.1.0".into()),
        kubelet_version: Some(kubelet),
        kubelet_float: KubeletFloat::Separate,
    };
    let bytes = |v: Option<&CgroupValue>| match v {
        Some(CgroupValue::Bytes(b)) => Some(*b),
        _ => None,
    };
    let values = if case["memoryQoS"] == true {
        // v1.35's Memory QoS gives every pod with a request memory.min: nodemem's
        // HardReservation; later kubelets have the policy.
        let reservation_policy = if kubelet.minor < 36 {
            ReservationPolicy::HardReservation
        } else if case["policy"] == "TieredReservation" {
            ReservationPolicy::TieredReservation
        } else {
            ReservationPolicy::None
        };
        let settings = MemoryQosSettings {
            enabled: true,
            throttling_factor: case["factor"]
                .as_f64()
                .map(|f| ThrottlingFactor::from_f64(f).unwrap()),
            reservation_policy,
        };
        plan_node(&settings, &node, std::slice::from_ref(&pod)).pods[0]
            .cgroup
            .clone()
    } else {
        unprotected_pod_cgroup(&PodMemoryProfile::of(&pod.spec), node.rules())
    };
    [MEMORY_MAX, MEMORY_MIN, MEMORY_LOW, MEMORY_HIGH].map(|f| bytes(values.get(f)))
}

fn oracle_dir() -> PathBuf {
    PathBuf::from(std::env::var("NODEMEM_KUBELET_ORACLE").expect(
        "NODEMEM_KUBELET_ORACLE: the directory tests/scripts/build-kubelet-oracle.sh prints (make kubelet-oracle)",
    ))
}

/// Runs every case through `version`'s oracle and nodemem; the differences, each with
/// its case, and how many cases the kubelet set each value in (memory.max, .min, .low,
/// .high).
fn differences(version: &str, cases: &[Value]) -> (Vec<String>, [usize; 4]) {
    let binary = oracle_dir().join(format!("kubelet-oracle-{version}"));
    let mut child = Command::new(&binary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
    let mut input = child.stdin.take().unwrap();
    let lines: Vec<String> = cases.iter().map(|c| format!("{c}\n")).collect();
    let writer = std::thread::spawn(move || {
        for l in lines {
            input.write_all(l.as_bytes()).unwrap();
        }
    });
    let mut found = Vec::new();
    let mut set = [0usize; 4];
    let answers = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut n = 0;
    for (case, line) in cases.iter().zip(answers) {
        let line = line.unwrap();
        let answer: Answer =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{version}: {e}: {line}"));
        let (theirs, ours) = (answer.values(), nodemems(version, case, &answer.pod));
        for (count, value) in set.iter_mut().zip(theirs) {
            *count += usize::from(value.is_some());
        }
        if theirs != ours {
            found.push(format!(
                "{version}: [max, min, low, high] kubelet {theirs:?} nodemem {ours:?}\n  case {case}"
            ));
        }
        n += 1;
    }
    writer.join().unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(
        n,
        cases.len(),
        "{version}: the oracle answered {n} of {} cases",
        cases.len()
    );
    (found, set)
}

#[test]
fn nodemems_pod_values_are_the_kubelets_own_for_every_version() {
    let count = std::env::var("NODEMEM_ORACLE_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(CASES);
    let versions = std::env::var("NODEMEM_ORACLE_VERSIONS")
        .unwrap_or_else(|_| "v1.35.4 v1.36.3 v1.37.2 v1.38.0-beta.0".into());
    let mut rng = Rng(0x6e6f_6465_6d65_6d60);
    let cases: Vec<Value> = (0..count).map(|i| case(&mut rng, i)).collect();
    let mut all = Vec::new();
    for version in versions.split_whitespace() {
        let started = std::time::Instant::now();
        let (found, set) = differences(version, &cases);
        eprintln!(
            "{version}: {} cases, {} differences ({:.1} s); the kubelet set memory.max in {}, memory.min in {}, memory.low in {}, memory.high in {}",
            cases.len(),
            found.len(),
            started.elapsed().as_secs_f64(),
            set[0], set[1], set[2], set[3]
        );
        // Each value the version's kubelet writes is met often enough to be judged: a
        // comparison over cases that never set it could not fail.
        let minor = KubeletVersion::parse(version).unwrap().minor;
        let written: &[usize] = match minor {
            35 => &[0, 1],
            36 => &[0, 1, 2],
            _ => &[0, 1, 2, 3],
        };
        for &i in written {
            assert!(
                set[i] * 50 >= cases.len(),
                "{version}: only {} of {} cases set {}",
                set[i],
                cases.len(),
                ["memory.max", "memory.min", "memory.low", "memory.high"][i]
            );
        }
        all.extend(found);
    }
    let shown: Vec<&String> = all.iter().take(20).collect();
    assert!(
        all.is_empty(),
        "{} differences from the kubelet's own code; the first:\n{}",
        all.len(),
        shown
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}
