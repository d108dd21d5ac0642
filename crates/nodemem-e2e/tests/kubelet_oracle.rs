//! nodemem's cgroup values against the kubelet's own code, version by version (issue
//! 60): `tests/kubelet-oracle`, built from each Kubernetes version's modules
//! (`tests/scripts/build-kubelet-oracle.sh`), defaults each generated pod as the
//! apiserver does and answers what that version's kubelet writes: to the pod's cgroup
//! (`ResourceConfigForPod`, then the pod-level memory.high where the version has it), to
//! each container's (the runtime manager's own method, on a manager its own constructor
//! built from the case's kubelet configuration after the kubelet's defaulting), and to
//! the QoS classes' (kubepods, burstable, besteffort: the QoS container manager, started
//! and updated with the case's pod and the node's other pods active). nodemem reads the
//! defaulted pods as the agent reads pods from the apiserver (`pod_from_k8s`) and plans
//! them for a node of that kubelet version. Every value must be the same: memory.max,
//! memory.min, memory.low and memory.high, present or absent.
//!
//! The cases: one to three app containers and up to two init containers or sidecars,
//! each without resources, with requests, with limits (the apiserver's defaulting makes
//! them requests), with both, or Guaranteed; pod-level resources; a RuntimeClass
//! overhead; quantities written every way the API takes them (zero, fractions of a
//! byte, milli-units, exponents, decimal and binary suffixes); up to three other pods on
//! the node; Memory QoS on and off, each reservation policy, factors with and without a
//! value. Only valid pods: a request never above its limit, pod-level resources never
//! below what the containers add up to.
//!
//! With Memory QoS off the pod's values are compared; the containers' and the QoS
//! classes' are the kubelet's resets then (memory.high "max", memory.min/low "0"), which
//! nodemem, with Memory QoS off on a node, leaves to the kubelet.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use k8s_openapi::api::core::v1 as core;
use nodemem_model::kubelet::version::KubeletVersion;
use nodemem_model::pod::profile::PodMemoryProfile;
use nodemem_model::values::cgroup::{
    CgroupValue, CgroupValues, MEMORY_HIGH, MEMORY_LOW, MEMORY_MAX, MEMORY_MIN,
};
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

/// One generated pod (valid as the apiserver validates it) and its case: the node's
/// other pods, the kubelet's configuration.
fn case(rng: &mut Rng, i: usize) -> Value {
    let first = pod(rng, &format!("p{i}"));
    let others: Vec<Value> = (0..rng.below(4))
        .map(|n| pod(rng, &format!("p{i}-{n}")))
        .collect();
    let factor = match rng.below(8) {
        0 => Value::Null,
        1 => json!(0.9),
        2 => json!(0.8),
        3 => json!(0.1),
        4 => json!(1.0),
        _ => json!((1 + rng.below(1000)) as f64 / 1000.0),
    };
    json!({
        "pod": first,
        "others": others,
        "memoryQoS": rng.chance(80),
        "policy": if rng.chance(50) { "TieredReservation" } else { "None" },
        "factor": factor,
    })
}

/// One generated pod.
fn pod(rng: &mut Rng, name: &str) -> Value {
    let guaranteed = rng.chance(15);
    let (mut app_req, mut app_lim) = (0u64, 0u64);
    let mut containers = Vec::new();
    for n in 0..1 + rng.below(3) {
        let (res, req, lim) = resources(rng, guaranteed);
        app_req += req;
        app_lim += lim.unwrap_or(0);
        containers.push(json!({"name": format!("c{n}"), "image": "w", "resources": res}));
    }
    // What the containers add up to as the apiserver's validation aggregates them
    // (resourcehelper.AggregateContainerRequests/Limits): the app containers and every
    // sidecar, or an init container with the sidecars started before it, the larger;
    // limits that are missing add nothing.
    let (mut sidecar_req, mut sidecar_lim, mut init_req, mut init_lim) = (0u64, 0u64, 0u64, 0u64);
    let mut inits = Vec::new();
    for n in 0..rng.below(3) {
        let (res, req, lim) = resources(rng, guaranteed);
        let lim = lim.unwrap_or(0);
        let mut c = json!({"name": format!("i{n}"), "image": "w", "resources": res});
        if rng.chance(50) {
            c["restartPolicy"] = "Always".into();
            sidecar_req += req;
            sidecar_lim += lim;
        } else {
            init_req = init_req.max(sidecar_req + req);
            init_lim = init_lim.max(sidecar_lim + lim);
        }
        inits.push(c);
    }
    let sum_req = (app_req + sidecar_req).max(init_req);
    let sum_lim = (app_lim + sidecar_lim).max(init_lim);
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
            let limit = request.max(sum_lim) + amount(rng) / 2;
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
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default", "uid": format!("u-{name}")},
           "spec": spec})
}

/// What one side says of a cgroup: memory.max, .min, .low, .high as the cgroup holds
/// them once written ("max" or bytes), absent where left alone.
type Values = [Option<String>; 4];

/// A file written with the kernel's own default for a new cgroup (memory.max and
/// memory.high "max", memory.min and memory.low 0) holds what a file left alone holds:
/// the kubelet writes those defaults as it creates a container, and at its start to
/// the QoS classes to clear what an earlier configuration left; nodemem leaves a file
/// alone where the value is the default and clears stale values by its own plan (its
/// reset and rollback, judged on the real node).
fn as_held(values: Values) -> Values {
    let defaults = ["max", "0", "0", "max"];
    let mut out = values;
    for (v, d) in out.iter_mut().zip(defaults) {
        if v.as_deref() == Some(d) {
            *v = None;
        }
    }
    out
}

const FILE_NAMES: [&str; 4] = [MEMORY_MAX, MEMORY_MIN, MEMORY_LOW, MEMORY_HIGH];

/// One cgroup in the oracle's answer.
#[derive(serde::Deserialize, Default)]
struct Files {
    max: Option<i64>,
    min: Option<String>,
    low: Option<String>,
    high: Option<String>,
}

impl Files {
    fn values(&self) -> Values {
        [
            self.max.map(|b| b.to_string()),
            self.min.clone(),
            self.low.clone(),
            self.high.clone(),
        ]
    }
}

#[derive(serde::Deserialize)]
struct ContainerFiles {
    name: String,
    /// The memory request and limit as the kubelet reads them (`Value()`).
    request: i64,
    limit: i64,
    #[serde(flatten)]
    files: Files,
}

/// The oracle's answer: the defaulted pods, the kubelet's configuration after its
/// defaulting, and what the kubelet writes.
#[derive(serde::Deserialize)]
struct Answer {
    pod: core::Pod,
    #[serde(default)]
    others: Vec<core::Pod>,
    factor: Option<f64>,
    policy: Option<String>,
    #[serde(flatten)]
    files: Files,
    #[serde(default)]
    containers: Vec<ContainerFiles>,
    #[serde(default)]
    qos: std::collections::BTreeMap<String, Files>,
}

/// Every cgroup one side speaks of, by a name that says which ("pod", "container c0",
/// "kubepods", ...), with its values.
type Cgroups = Vec<(String, Values)>;

fn theirs(case: &Value, answer: &Answer) -> Cgroups {
    let mut out = vec![("pod".to_string(), as_held(answer.files.values()))];
    if case["memoryQoS"] == true {
        for c in &answer.containers {
            out.push((format!("container {}", c.name), as_held(c.files.values())));
        }
        for class in ["kubepods", "burstable", "besteffort"] {
            let files = answer.qos.get(class).map(Files::values).unwrap_or_default();
            out.push((class.to_string(), as_held(files)));
        }
    }
    out
}

fn values_of(cgroup: &CgroupValues) -> Values {
    as_held(FILE_NAMES.map(|f| {
        cgroup.get(f).map(|v| match v {
            CgroupValue::Bytes(b) => b.to_string(),
            CgroupValue::Text(t) => t.clone(),
        })
    }))
}

/// nodemem's values for the defaulted pods on a node of `version`'s kubelet, configured
/// as the oracle's kubelet was after its defaulting.
fn nodemems(version: &str, case: &Value, answer: &Answer) -> Cgroups {
    let read = |p: &core::Pod| nodemem_api::k8s::pod::pod_from_k8s(p).expect("a pod nodemem reads");
    let pod = read(&answer.pod);
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
    if case["memoryQoS"] != true {
        let values = unprotected_pod_cgroup(&PodMemoryProfile::of(&pod.spec), node.rules());
        return vec![("pod".to_string(), values_of(&values))];
    }
    // v1.35's Memory QoS gives every pod with a request memory.min: nodemem's
    // HardReservation; later kubelets have the policy.
    let reservation_policy = if kubelet.minor < 36 {
        ReservationPolicy::HardReservation
    } else if answer.policy.as_deref() == Some("TieredReservation") {
        ReservationPolicy::TieredReservation
    } else {
        ReservationPolicy::None
    };
    let settings = MemoryQosSettings {
        enabled: true,
        throttling_factor: answer
            .factor
            .map(|f| ThrottlingFactor::from_f64(f).unwrap()),
        reservation_policy,
    };
    let mut pods = vec![pod];
    pods.extend(answer.others.iter().map(read));
    let plan = plan_node(&settings, &node, &pods);
    let mut out = vec![("pod".to_string(), values_of(&plan.pods[0].cgroup))];
    for c in &plan.pods[0].containers {
        out.push((format!("container {}", c.name), values_of(&c.cgroup)));
    }
    out.push(("kubepods".to_string(), values_of(&plan.kubepods)));
    out.push(("burstable".to_string(), values_of(&plan.burstable)));
    out.push(("besteffort".to_string(), values_of(&plan.besteffort)));
    out
}

fn oracle_dir() -> PathBuf {
    PathBuf::from(std::env::var("NODEMEM_KUBELET_ORACLE").expect(
        "NODEMEM_KUBELET_ORACLE: the directory tests/scripts/build-kubelet-oracle.sh prints (make kubelet-oracle)",
    ))
}

/// The two places where nodemem follows the v1.37 kubelet on older ones, as the real
/// node's kubelet reference names them (`real_node/kubelet_reference.rs`,
/// docs/reference.md): kubelets up to v1.36 skip memory.high when a container's request
/// equals its limit, 0 == 0 included, so a container without memory resources gets
/// none; and the v1.36 kubelet sets no memory.low on kubepods under TieredReservation,
/// which caps the burstable class's memory.low to 0.
const V137_BESTEFFORT_HIGH: &str = "memory.high for containers with neither request nor limit";
const V137_KUBEPODS_LOW: &str = "kubepods memory.low";

/// Which v1.37 fix, if any, a difference is: the kubelet leaves exactly one file alone
/// that nodemem sets, and the cgroup is the fix's. `unrequested`: a container whose
/// memory request and limit the kubelet reads as 0.
fn v137_fix(
    minor: u32,
    name: &str,
    theirs: &Values,
    ours: &Values,
    unrequested: bool,
) -> Option<&'static str> {
    let only = |i: usize| {
        theirs[i].is_none() && ours[i].is_some() && (0..4).all(|j| j == i || theirs[j] == ours[j])
    };
    if minor > 36 {
        None
    } else if name.starts_with("container ") {
        (unrequested && only(3)).then_some(V137_BESTEFFORT_HIGH)
    } else {
        (minor == 36 && name == "kubepods" && only(2)).then_some(V137_KUBEPODS_LOW)
    }
}

/// How often the kubelet wrote each file, by the kind of cgroup ("pod", "container",
/// "kubepods", "burstable", "besteffort"): a comparison over cases that never set a
/// value could not fail.
type Written = std::collections::BTreeMap<String, [usize; 4]>;

/// How often each v1.37 fix showed.
type Fixes = std::collections::BTreeMap<&'static str, usize>;

/// Runs every case through `version`'s oracle and nodemem; the differences, each with
/// its case, how often the kubelet wrote each file and how often each v1.37 fix showed.
fn differences(version: &str, cases: &[Value]) -> (Vec<String>, Written, Fixes) {
    let minor = KubeletVersion::parse(version).unwrap().minor;
    let mut fixes = Fixes::new();
    let binary = oracle_dir().join(format!("kubelet-oracle-{version}"));
    let scratch = tempfile::tempdir().unwrap();
    let mut child = Command::new(&binary)
        .env("NODEMEM_ORACLE_SCRATCH", scratch.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
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
    let mut written = Written::new();
    let answers = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut n = 0;
    for (case, line) in cases.iter().zip(answers) {
        let line = line.unwrap();
        let answer: Answer =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{version}: {e}: {line}"));
        let theirs = theirs(case, &answer);
        let ours: std::collections::BTreeMap<String, Values> =
            nodemems(version, case, &answer).into_iter().collect();
        let mut names: Vec<&String> = ours.keys().collect();
        let unrequested: std::collections::BTreeSet<String> = answer
            .containers
            .iter()
            .filter(|c| c.request == 0 && c.limit == 0)
            .map(|c| format!("container {}", c.name))
            .collect();
        for (name, values) in &theirs {
            let kind = name.split(' ').next().unwrap().to_string();
            let count = written.entry(kind).or_default();
            for (c, v) in count.iter_mut().zip(values) {
                *c += usize::from(v.is_some());
            }
            names.retain(|n| *n != name);
            let ours = ours.get(name).cloned().unwrap_or_default();
            if *values == ours {
                continue;
            }
            if let Some(fix) = v137_fix(minor, name, values, &ours, unrequested.contains(name)) {
                *fixes.entry(fix).or_default() += 1;
            } else {
                found.push(format!(
                    "{version}: {name} [max, min, low, high] kubelet {values:?} nodemem {ours:?}\n  case {case}"
                ));
            }
        }
        for name in names {
            found.push(format!(
                "{version}: {name}: nodemem plans a cgroup the kubelet does not write\n  case {case}"
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
    (found, written, fixes)
}

/// The files each version's kubelet writes, by the kind of cgroup, that the cases
/// must meet often enough to judge (memory.max, .min, .low, .high).
fn must_be_written(minor: u32, kind: &str) -> [bool; 4] {
    match (kind, minor) {
        ("pod", 35) => [true, true, false, false],
        ("pod", 36) => [true, true, true, false],
        ("pod", _) => [true, true, true, true],
        ("container", 35) => [true, true, false, true],
        ("container", _) => [true, true, true, true],
        ("kubepods", 35 | 36) | ("burstable", 35) => [false, true, false, false],
        ("kubepods", _) => [false, true, true, false],
        ("burstable", _) => [false, false, true, false],
        _ => [false; 4],
    }
}

#[test]
fn nodemems_values_are_the_kubelets_own_for_every_version() {
    let count = std::env::var("NODEMEM_ORACLE_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(CASES);
    let versions = std::env::var("NODEMEM_ORACLE_VERSIONS")
        .unwrap_or_else(|_| "v1.35.4 v1.36.3 v1.37.2 v1.38.0-beta.0".into());
    let mut rng = Rng(0x6e6f_6465_6d65_6d60);
    let cases: Vec<Value> = (0..count).map(|i| case(&mut rng, i)).collect();
    // The versions side by side, one oracle process each.
    let cases = std::sync::Arc::new(cases);
    let runs: Vec<_> = versions
        .split_whitespace()
        .map(|version| {
            let (version, cases) = (version.to_string(), cases.clone());
            std::thread::spawn(move || {
                let started = std::time::Instant::now();
                let (found, written, fixes) = differences(&version, &cases);
                (version, found, written, fixes, started.elapsed())
            })
        })
        .collect();
    let (mut all, mut rare) = (Vec::new(), Vec::new());
    for run in runs {
        let (version, found, written, fixes, took) = run.join().expect("a version's run");
        eprintln!(
            "{version}: {} cases, {} differences ({:.1} s); the kubelet wrote [memory.max, .min, .low, .high]: {written:?}; where nodemem follows v1.37: {fixes:?}",
            cases.len(),
            found.len(),
            took.as_secs_f64(),
        );
        let minor = KubeletVersion::parse(&version).unwrap().minor;
        // Each v1.37 fix shows on the versions it departs from (the comparison could
        // not tell otherwise), and no other.
        let departures: &[&str] = match minor {
            35 => &[V137_BESTEFFORT_HIGH],
            36 => &[V137_BESTEFFORT_HIGH, V137_KUBEPODS_LOW],
            _ => &[],
        };
        let mut shown: Vec<&str> = fixes.keys().copied().collect();
        shown.sort_by_key(|f| departures.iter().position(|d| d == f));
        if shown != departures {
            rare.push(format!(
                "{version}: nodemem's v1.37 fixes showed as {shown:?}, expected {departures:?}"
            ));
        }
        for kind in ["pod", "container", "kubepods", "burstable", "besteffort"] {
            let counts = written.get(kind).copied().unwrap_or_default();
            for (i, must) in must_be_written(minor, kind).into_iter().enumerate() {
                if must && counts[i] * 50 < cases.len() {
                    rare.push(format!(
                        "{version}: the kubelet wrote {} to a {kind} cgroup in only {} of {} cases",
                        FILE_NAMES[i],
                        counts[i],
                        cases.len()
                    ));
                }
            }
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
    // Each value a version's kubelet writes is met often enough to be judged.
    assert!(rare.is_empty(), "{}", rare.join("\n"));
}
