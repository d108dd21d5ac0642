//! `nodemem agent --once` on a real kernel: Debian's 6.1 in qemu with two NUMA nodes
//! and cgroup v2. A kubelet-shaped tree (`kubepods.slice/...`, pods of all three QoS
//! classes, real processes in the container cgroups) is built by a script, the real
//! binary applies the example config against `/sys/fs/cgroup`, and every value is read
//! back and compared with the node computation made here on the host.

use std::collections::BTreeMap;

use nodemem_api::convert::node_settings;
use nodemem_api::k8s::node_pod_from_k8s;
use nodemem_api::NodeMemoryConfig;
use nodemem_cgroup::parse::memory_events;
use nodemem_model::node::{desired_node, NodeFacts, NodeInput, NodePod};
use nodemem_model::values::cgroup::CgroupValue;
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_model::values::memory_qos::NodeMemoryFacts;
use nodemem_testkit::vm::Vm;
use serde_json::Value;

fn repo_file(path: &str) -> String {
    std::fs::read_to_string(nodemem_e2e::repo_root().join(path)).unwrap()
}

fn example_pods() -> Vec<Value> {
    let list: Value = serde_yaml::from_str(&repo_file("examples/agent-once/pods.yaml")).unwrap();
    list["items"].as_array().unwrap().clone()
}

fn list(items: Vec<Value>) -> String {
    serde_yaml::to_string(&serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}))
        .unwrap()
}

/// A Guaranteed pod of `memory` with one container.
fn guaranteed_pod(name: &str, uid: &str, id: &str, memory: &str) -> Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "db", "uid": uid},
        "spec": {"nodeName": "agent-1", "containers": [{"name": "db", "image": "db",
            "resources": {"requests": {"cpu": "1", "memory": memory}, "limits": {"cpu": "1", "memory": memory}}}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "db", "containerID": format!("containerd://{id}"),
            "image": "db", "imageID": "", "ready": true, "restartCount": 0}]}
    })
}

/// Shell that creates kubepods.slice and its QoS slices (the kubelet's, systemd driver)
/// with the memory and cpuset controllers enabled; leaves the shell in the cgroup root.
const QOS_TREE: &str = r#"cd /sys/fs/cgroup
echo '+memory +cpuset' > cgroup.subtree_control
mkdir kubepods.slice
echo '+memory +cpuset' > kubepods.slice/cgroup.subtree_control
for q in burstable besteffort; do
  mkdir kubepods.slice/kubepods-$q.slice
  echo '+memory +cpuset' > kubepods.slice/kubepods-$q.slice/cgroup.subtree_control
done"#;

/// Shell that creates a pod's cgroups (controllers enabled on the way down) and starts a
/// real process in each container cgroup.
fn make_pod_tree(pods: &[NodePod]) -> String {
    let mut s = String::new();
    for p in pods.iter().filter(|p| !p.container_ids().is_empty()) {
        let qos = nodemem_model::pod::qos::qos_class(&p.pod().spec);
        let pod_dir =
            nodemem_model::values::cgroup_layout::pod_dir(CgroupDriver::Systemd, qos, &p.pod().uid);
        s.push_str(&format!(
            "mkdir -p {pod_dir}\necho '+memory +cpuset' > {pod_dir}/cgroup.subtree_control\n"
        ));
        for id in p.container_ids().values() {
            let dir = nodemem_model::values::cgroup_layout::container_dir(
                CgroupDriver::Systemd,
                qos,
                &p.pod().uid,
                id,
            );
            s.push_str(&format!(
                "mkdir {dir}\nsh -c 'echo $$ > /sys/fs/cgroup/{dir}/cgroup.procs; exec sleep 600' &\n"
            ));
        }
    }
    s
}

fn node_pods(items: &[Value]) -> Vec<NodePod> {
    items
        .iter()
        // The kubelet counts every pod that has not terminated (Pending ones too).
        .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
        .map(|p| {
            node_pod_from_k8s(
                &serde_json::from_value(p.clone()).unwrap(),
                &Default::default(),
            )
            .unwrap()
        })
        .collect()
}

/// `key=value` and `v <path> <file> <value>` lines of the script's output.
fn section(output: &str, name: &str) -> String {
    let start = format!("=== {name}\n");
    let from = output
        .find(&start)
        .unwrap_or_else(|| panic!("no section {name} in\n{output}"))
        + start.len();
    let to = output[from..]
        .find("===")
        .map_or(output.len(), |i| from + i);
    output[from..to].to_string()
}

fn read_values(output: &str, name: &str) -> BTreeMap<(String, String), String> {
    section(output, name)
        .lines()
        .filter_map(|l| l.strip_prefix("v "))
        .map(|l| {
            let mut w = l.splitn(3, ' ');
            let (p, f, v) = (w.next().unwrap(), w.next().unwrap(), w.next().unwrap_or(""));
            ((p.to_string(), f.to_string()), v.to_string())
        })
        .collect()
}

/// The JSON document at the start of a section (before its `v` lines).
fn json_section(output: &str, name: &str) -> Value {
    let text: String = section(output, name)
        .lines()
        .take_while(|l| !l.starts_with("v "))
        .map(|l| format!("{l}\n"))
        .collect();
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"))
}

/// `nodemem agent --once` on a kubelet-shaped `kubepods.slice` tree with processes in
/// every container cgroup: every value reads back as predicted, a second run writes
/// nothing, crossing memory.high raises `memory.events high` (read with the agent's
/// parser), a Guaranteed container is pinned to one NUMA node and a larger one spans
/// both (`cpuset.mems.effective`), turning the policy off restores the defaults, and
/// `agent --once --follow` gives a container cgroup created by the script its values
/// from the inotify event (the reaction path).
#[test]
fn agent_once_applies_pins_and_restores_on_a_real_kernel() {
    let config_text = repo_file("examples/agent-once/config.yaml");
    let static_text = format!(
        "{config_text}  memoryManager:\n    policy: Static\n    reservedMemory:\n    - numaNode: 0\n      limits: {{memory: 32Mi}}\n    - numaNode: 1\n      limits: {{memory: 32Mi}}\n"
    );
    let off_text = config_text.replace("enabled: true", "enabled: false");
    let items = example_pods();
    let pods = node_pods(&items);
    let big = guaranteed_pod(
        "big",
        "9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0",
        &"f6".repeat(32),
        "300Mi",
    );
    let big_pods = node_pods(std::slice::from_ref(&big));

    // The prediction, made on the host with the same inputs the agent reads.
    let config: NodeMemoryConfig = serde_yaml::from_str(&config_text).unwrap();
    let settings = node_settings(&config.spec.settings).unwrap();
    let facts = NodeFacts {
        memory: NodeMemoryFacts {
            allocatable_memory: Some(15 << 30),
            // No kubelet configuration on this node: the agent takes the kubelet's
            // default hard eviction threshold.
            hard_eviction_memory: Some(
                nodemem_model::cluster::policy::DEFAULT_EVICTION_HARD_MEMORY,
            ),
            page_size: 4096,
            kernel_version: Some("6.1.0".into()),
            ..NodeMemoryFacts::default()
        },
        cgroup_driver: CgroupDriver::Systemd,
        ..NodeFacts::default()
    };
    let desired = desired_node(NodeInput {
        settings: &settings,
        facts: &facts,
        pods: &pods,
        memory_manager: None,
    })
    .unwrap();
    let mut expected = BTreeMap::new();
    let mut reads = String::new();
    // The pod still starting has no cgroup yet: the agent reports it missing.
    let starting = desired
        .pods
        .iter()
        .find(|p| p.name == "starting")
        .unwrap()
        .path
        .clone();
    for c in desired.cgroups().iter().filter(|c| c.path != starting) {
        for (file, value) in c.managed() {
            let text = match value {
                CgroupValue::Bytes(b) => (b / 4096 * 4096).to_string(),
                CgroupValue::Text(t) => t.clone(),
            };
            expected.insert((c.path.to_string(), file.to_string()), text);
            reads.push_str(&format!(
                "echo \"v {} {file} $(cat /sys/fs/cgroup/{}/{file})\"\n",
                c.path, c.path
            ));
        }
    }
    assert!(expected.len() >= 10, "{expected:#?}");
    let legacy = desired.pods.iter().find(|p| p.name == "legacy").unwrap();
    let legacy_container = legacy.containers[0].path.clone().unwrap();
    let web = desired.pods.iter().find(|p| p.name == "web").unwrap();
    let web_container = web
        .containers
        .iter()
        .find(|c| c.name == "web")
        .unwrap()
        .path
        .clone()
        .unwrap();
    let api_container = desired
        .pods
        .iter()
        .find(|p| p.name == "api")
        .unwrap()
        .containers[0]
        .path
        .clone()
        .unwrap();
    let big_container = nodemem_model::values::cgroup_layout::container_dir(
        CgroupDriver::Systemd,
        nodemem_model::pod::qos::QosClass::Guaranteed,
        &big_pods[0].pod().uid,
        big_pods[0].container_ids().values().next().unwrap(),
    );

    // A pod whose container cgroup the script creates while `agent --follow` runs.
    let follow_item = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "follow", "namespace": "shop", "uid": "7a6b5c4d-3e2f-1a0b-9c8d-7e6f5a4b3c2d"},
        "spec": {"nodeName": "agent-1", "containers": [{"name": "app", "image": "x",
            "resources": {"requests": {"memory": "32Mi"}, "limits": {"memory": "128Mi"}}}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "app", "containerID": format!("containerd://{}", "a7".repeat(32)),
            "image": "x", "imageID": "", "ready": true, "restartCount": 0}]}
    });
    let follow_pods = node_pods(std::slice::from_ref(&follow_item));
    let follow_pod_dir = nodemem_model::values::cgroup_layout::pod_dir(
        CgroupDriver::Systemd,
        nodemem_model::pod::qos::QosClass::Burstable,
        &follow_pods[0].pod().uid,
    );
    let follow_container_dir = nodemem_model::values::cgroup_layout::container_dir(
        CgroupDriver::Systemd,
        nodemem_model::pod::qos::QosClass::Burstable,
        &follow_pods[0].pod().uid,
        follow_pods[0].container_ids().values().next().unwrap(),
    );
    let agent = "nodemem agent --once --node /etc/node.yaml --state-dir /tmp/state -o json";
    let script = format!(
        r#"
set -e
{qos_tree}
{tree}
{big_tree}
echo "=== first"
{agent} --config /etc/config.yaml --pods /etc/pods.yaml
echo "=== values"
{reads}
echo "v {legacy} memory.low $(cat {legacy}/memory.low)"
echo "v {legacy_container} memory.high $(cat {legacy_container}/memory.high)"
echo "=== second"
{agent} --config /etc/config.yaml --pods /etc/pods.yaml
echo "=== throttle"
sh -c 'echo $$ > /sys/fs/cgroup/{web_container}/cgroup.procs; exec dd if=/dev/zero of=/dev/null bs=124M count=1 2>/dev/null'
cat {web_container}/memory.events
echo "=== static"
{agent} --config /etc/static.yaml --pods /etc/pods.yaml
echo "v {api_container} cpuset.mems $(cat {api_container}/cpuset.mems)"
echo "v {api_container} cpuset.mems.effective $(cat {api_container}/cpuset.mems.effective)"
echo "=== big"
nodemem agent --once --node /etc/node.yaml --state-dir /tmp/state-big -o json --config /etc/static.yaml --pods /etc/big.yaml
echo "v {big_container} cpuset.mems $(cat {big_container}/cpuset.mems)"
echo "v {big_container} cpuset.mems.effective $(cat {big_container}/cpuset.mems.effective)"
echo "=== off"
{agent} --config /etc/off.yaml --pods /etc/pods.yaml
{reads}
echo "v {api_container} cpuset.mems $(cat {api_container}/cpuset.mems)"
echo "v {api_container} cpuset.mems.effective $(cat {api_container}/cpuset.mems.effective)"
echo "=== follow"
mkdir {follow_pod}
echo '+memory +cpuset' > {follow_pod}/cgroup.subtree_control
nodemem agent --once --follow --node /etc/node.yaml --state-dir /tmp/state-follow --config /etc/config.yaml --pods /etc/follow.yaml > /tmp/follow.out 2>&1 &
AGENT=$!
n=0
until grep -q '^following ' /tmp/follow.out; do n=$((n+1)); [ $n -lt 300 ] || break; usleep 100000; done
mkdir {follow_container}
n=0
until [ "$(cat {follow_container}/memory.high)" != max ]; do n=$((n+1)); [ $n -lt 50 ] || break; usleep 100000; done
echo "polls=$n"
echo "v {follow_container} memory.high $(cat {follow_container}/memory.high)"
echo "v {follow_container} memory.low $(cat {follow_container}/memory.low)"
kill $AGENT
grep '^reacted to ' /tmp/follow.out | head -1
echo "=== end"
"#,
        qos_tree = QOS_TREE,
        tree = make_pod_tree(&pods),
        big_tree = make_pod_tree(&big_pods),
        legacy = legacy.path,
        follow_pod = follow_pod_dir,
        follow_container = follow_container_dir,
    );
    let vm = Vm::new()
        .expect("VM prerequisites")
        .with_binary(nodemem_e2e::nodemem(), "nodemem")
        .with_file("/etc/config.yaml", config_text.as_bytes(), 0o644)
        .with_file("/etc/static.yaml", static_text.as_bytes(), 0o644)
        .with_file("/etc/off.yaml", off_text.as_bytes(), 0o644)
        .with_file(
            "/etc/node.yaml",
            repo_file("examples/agent-once/node.yaml").as_bytes(),
            0o644,
        )
        .with_file("/etc/pods.yaml", list(items).as_bytes(), 0o644)
        .with_file("/etc/big.yaml", list(vec![big]).as_bytes(), 0o644)
        .with_file(
            "/etc/follow.yaml",
            list(vec![follow_item]).as_bytes(),
            0o644,
        );
    let out = vm.run(&script).expect("the VM runs the script");
    assert_eq!(out.exit_code, 0, "script failed:\n{}", out.output);
    let o = &out.output;

    // First run: every predicted value reads back from the kernel.
    let first = json_section(o, "first");
    assert!(first["failed"].as_array().unwrap().is_empty(), "{first:#}");
    // PSI is on (the kernel's default): the pressure gate reads the pods' pressure.
    assert_eq!(
        (&first["health"]["status"], &first["health"]["reason"]),
        (&serde_json::json!("True"), &serde_json::json!("Healthy")),
        "{first:#}"
    );
    assert_eq!(first["missing"], serde_json::json!([starting]));
    assert_eq!(
        first["writes"].as_array().unwrap().len(),
        expected.len(),
        "{first:#}"
    );
    let values = read_values(o, "values");
    for (key, want) in &expected {
        assert_eq!(values.get(key), Some(want), "{key:?}");
    }
    // The opted-out pod is untouched.
    assert_eq!(values[&(legacy.path.clone(), "memory.low".into())], "0");
    assert_eq!(
        values[&(legacy_container.clone(), "memory.high".into())],
        "max"
    );

    // Second run: nothing differs, nothing is written.
    assert_eq!(json_section(o, "second")["writes"], serde_json::json!([]));

    // Crossing memory.high counts a `high` event, read with the agent's own parser.
    let events = memory_events("memory.events", &section(o, "throttle"))
        .expect("the kernel's memory.events parses");
    assert!(events.high > 0, "memory.high was crossed: {events:?}");
    assert_eq!(events.oom_kill, 0, "throttled, not killed");

    // Static policy: the Guaranteed container is pinned to one NUMA node, and a pod
    // larger than either node spans both.
    let st = json_section(o, "static");
    assert_eq!(st["pinnedPods"], 1, "{st:#}");
    let pins = read_values(o, "static");
    assert_eq!(pins[&(api_container.clone(), "cpuset.mems".into())], "0");
    assert_eq!(
        pins[&(api_container.clone(), "cpuset.mems.effective".into())],
        "0"
    );
    let big_out = json_section(o, "big");
    assert_eq!(big_out["pinnedPods"], 1, "{big_out:#}");
    let big_pins = read_values(o, "big");
    assert_eq!(
        big_pins[&(big_container.clone(), "cpuset.mems".into())],
        "0-1"
    );
    assert_eq!(
        big_pins[&(big_container.clone(), "cpuset.mems.effective".into())],
        "0-1"
    );

    // Memory QoS off and no Memory Manager: everything nodemem set is back at the
    // kernel's defaults; cpuset.mems is the parent's set again (a cgroup with
    // processes cannot be emptied: the kernel answers ENOSPC).
    let off = json_section(o, "off");
    assert!(
        off["writes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w["kind"] == "restore"),
        "{off:#}"
    );
    let after = read_values(o, "off");
    for (path, file) in expected.keys() {
        let default = if file == "memory.high" { "max" } else { "0" };
        assert_eq!(
            after[&(path.clone(), file.clone())],
            default,
            "{path} {file}"
        );
    }
    assert_eq!(after[&(api_container.clone(), "cpuset.mems".into())], "0-1");

    // The reaction path: the container cgroup created while `--follow` runs gets its
    // values from the inotify event, with no second run.
    let follow = read_values(o, "follow");
    assert_eq!(
        follow[&(follow_container_dir.clone(), "memory.high".into())],
        (((32 << 20) + (96 << 20) * 9 / 10) / 4096 * 4096).to_string(),
        "{}",
        section(o, "follow")
    );
    assert_eq!(
        follow[&(follow_container_dir.clone(), "memory.low".into())],
        (32 << 20).to_string()
    );
    let text = section(o, "follow");
    assert!(
        text.lines()
            .any(|l| l.starts_with("reacted to ") && l.contains(&follow_container_dir)),
        "{text}"
    );
    assert_eq!(
        after[&(api_container.clone(), "cpuset.mems.effective".into())],
        "0-1"
    );
}

/// Shell that prints every memory.min, memory.low, memory.high and cpuset.mems under
/// kubepods.slice as `v <path> <file> <value>` lines.
const PRINT_MANAGED_FILES: &str = r#"for f in $(find kubepods.slice -name memory.min -o -name memory.low -o -name memory.high -o -name cpuset.mems | sort); do
  echo "v ${f%/*} ${f##*/} $(cat $f)"
done"#;

/// The agent killed right after each write of a pass in turn
/// (`NODEMEM_TEST_KILL_AFTER_WRITES=k`, a fault the shipped binary arms from its
/// environment and announces on stderr), then given back directly or after a run on the
/// same settings: every memory and cpuset file under `kubepods.slice` reads what it
/// read before (the same on a temporary tree: `agent_once_cli.rs`); a state directory
/// on a full, then read-only tmpfs: the pass stops before its first write, says
/// `nothing was written` with the errno, and the record's bytes are unchanged.
#[test]
fn a_killed_agent_leaves_no_value_behind_and_a_full_state_directory_writes_nothing_on_a_real_kernel(
) {
    let config_text = repo_file("examples/agent-once/config.yaml");
    let off_text = config_text.replace("enabled: true", "enabled: false");
    let lower_text = config_text.replace("throttlingFactor: 0.9", "throttlingFactor: 0.6");
    let static_text = format!(
        "{config_text}  memoryManager:\n    policy: Static\n    reservedMemory:\n    - numaNode: 0\n      limits: {{memory: 32Mi}}\n    - numaNode: 1\n      limits: {{memory: 32Mi}}\n"
    );
    let items = example_pods();
    let pods = node_pods(&items);
    let agent = "nodemem agent --once --node /etc/node.yaml --pods /etc/pods.yaml -o json";
    // Killed right after each write of the first pass in turn (the fault the test
    // arms), then given back directly, or after a run on the same settings first.
    let script = format!(
        r#"
{qos_tree}
{tree}
echo "=== kubelet"
{print}
echo "=== planned"
{agent} --state-dir /tmp/plan --config /etc/config.yaml --dry-run
n=$({agent} --state-dir /tmp/plan --config /etc/config.yaml --dry-run | grep -o '"kind": *"set"' | wc -l)
for again in no yes; do
  k=1
  while [ $k -le $n ]; do
    rm -rf /tmp/state
    NODEMEM_TEST_KILL_AFTER_WRITES=$k {agent} --state-dir /tmp/state --config /etc/config.yaml > /dev/null 2>&1
    echo "=== killed $again $k status=$?"
    {print}
    if [ $again = yes ]; then {agent} --state-dir /tmp/state --config /etc/config.yaml > /dev/null || echo "again failed"; fi
    {agent} --state-dir /tmp/state --config /etc/off.yaml > /dev/null || echo "off failed"
    echo "=== given back $again $k"
    {print}
    k=$((k+1))
  done
done
# A state directory on a file system with no room left, then read-only.
mkdir /tmp/small
mount -t tmpfs -o size=16k tmpfs /tmp/small
{agent} --state-dir /tmp/small/state --config /etc/config.yaml > /dev/null || echo "first failed"
dd if=/dev/zero of=/tmp/small/fill bs=1k count=64 2>/dev/null || true
record=$(md5sum /tmp/small/state/ownership.json)
echo "=== applied"
{print}
{agent} --state-dir /tmp/small/state --config /etc/static.yaml > /tmp/full.out 2>&1
echo "=== full status=$?"
cat /tmp/full.out
[ "$(md5sum /tmp/small/state/ownership.json)" = "$record" ] && echo "record whole"
ls -a /tmp/small/state
{print}
mount -o remount,ro /tmp/small
{agent} --state-dir /tmp/small/state --config /etc/static.yaml > /tmp/ro.out 2>&1
echo "=== read-only status=$?"
cat /tmp/ro.out
[ "$(md5sum /tmp/small/state/ownership.json)" = "$record" ] && echo "record whole"
{print}
{agent} --state-dir /tmp/small/state --config /etc/lower.yaml > /dev/null 2>&1
echo "=== lower status=$?"
{print}
echo "=== end"
"#,
        qos_tree = QOS_TREE,
        tree = make_pod_tree(&pods),
        print = PRINT_MANAGED_FILES,
    );
    let vm = Vm::new()
        .expect("VM prerequisites")
        .with_binary(nodemem_e2e::nodemem(), "nodemem")
        .with_file("/etc/config.yaml", config_text.as_bytes(), 0o644)
        .with_file("/etc/off.yaml", off_text.as_bytes(), 0o644)
        .with_file("/etc/lower.yaml", lower_text.as_bytes(), 0o644)
        .with_file("/etc/static.yaml", static_text.as_bytes(), 0o644)
        .with_file(
            "/etc/node.yaml",
            repo_file("examples/agent-once/node.yaml").as_bytes(),
            0o644,
        )
        .with_file("/etc/pods.yaml", list(items).as_bytes(), 0o644);
    let out = vm.run(&script).expect("the VM runs the script");
    let o = &out.output;
    assert_eq!(out.exit_code, 0, "script failed:\n{o}");
    let kubelet = read_values(o, "kubelet");
    assert!(kubelet.len() >= 20, "{kubelet:#?}");
    let planned = json_section(o, "planned")["writes"]
        .as_array()
        .unwrap()
        .len();
    assert!(planned >= 10, "{}", section(o, "planned"));
    let differs = |values: &BTreeMap<(String, String), String>| -> Vec<String> {
        values
            .iter()
            .filter(|(k, v)| kubelet.get(*k) != Some(*v))
            .map(|((p, f), v)| format!("{p}/{f} = {v}"))
            .collect()
    };
    for again in ["no", "yes"] {
        for k in 1..=planned {
            let killed = format!("killed {again} {k} status=137");
            assert!(
                o.contains(&format!("=== {killed}\n")),
                "no '{killed}' in\n{o}"
            );
            let at_kill = differs(&read_values(o, &killed));
            assert_eq!(
                at_kill.len(),
                k,
                "killed right after write {k}: {at_kill:#?}"
            );
            let back = format!("given back {again} {k}");
            let left = differs(&read_values(o, &back));
            assert!(
                left.is_empty(),
                "killed after write {k} of {planned} (run again first: {again}), then given back; left behind: {left:#?}\n{}",
                section(o, &back)
            );
        }
    }
    assert!(
        !o.contains("again failed") && !o.contains("off failed") && !o.contains("first failed"),
        "{o}"
    );
    // No room, then read-only: nothing written, the record whole, a message that says
    // so; then settings that add nothing to the record still apply.
    let applied = read_values(o, "applied");
    assert!(!differs(&applied).is_empty());
    for (name, errno) in [
        ("full status=1", "No space left on device"),
        ("read-only status=1", "Read-only file system"),
    ] {
        let text = section(o, name);
        assert!(
            text.contains(errno)
                && text.contains("nothing was written")
                && text.contains("record whole"),
            "{name}:\n{text}"
        );
        assert!(
            !text.contains(".ownership.json.tmp"),
            "no temporary file left:\n{text}"
        );
        assert_eq!(read_values(o, name), applied, "{name}");
    }
    let lower = read_values(o, "lower status=0");
    assert_ne!(lower, applied, "the lower factor applied");
}

/// A kernel booted with `psi=0` (as RHEL-family kernels boot without `psi=1`) has no
/// memory.pressure: the pressure gate is unknown, never read as 0 %. The agent's
/// `Healthy` verdict after a pass is `Unknown` (`PressureUnavailable`) where the policy
/// holds for it and `True` without the gate (`HealthyWithoutPressure`) where it
/// proceeds.
#[test]
fn without_psi_the_pressure_gate_is_unknown_on_a_real_kernel() {
    let config_text = repo_file("examples/agent-once/config.yaml");
    let proceed_text = format!("{config_text}  health:\n    pressureUnavailable: Proceed\n");
    let items = example_pods();
    let pods = node_pods(&items);
    let agent = "nodemem agent --once --node /etc/node.yaml --pods /etc/pods.yaml -o json";
    let script = format!(
        r#"
{qos_tree}
{tree}
echo "=== psi"
cat /proc/pressure/memory 2>&1 || echo "no /proc/pressure/memory"
ls kubepods.slice/memory.pressure 2>&1 || echo "no memory.pressure"
echo "=== hold"
{agent} --state-dir /tmp/hold --config /etc/config.yaml
echo "=== proceed"
{agent} --state-dir /tmp/proceed --config /etc/proceed.yaml
echo "=== end"
"#,
        qos_tree = QOS_TREE,
        tree = make_pod_tree(&pods),
    );
    let mut vm = Vm::new()
        .expect("VM prerequisites")
        .with_binary(nodemem_e2e::nodemem(), "nodemem")
        .with_file("/etc/config.yaml", config_text.as_bytes(), 0o644)
        .with_file("/etc/proceed.yaml", proceed_text.as_bytes(), 0o644)
        .with_file(
            "/etc/node.yaml",
            repo_file("examples/agent-once/node.yaml").as_bytes(),
            0o644,
        )
        .with_file("/etc/pods.yaml", list(items).as_bytes(), 0o644);
    vm.cmdline = "psi=0".to_string();
    let out = vm.run(&script).expect("the VM runs the script");
    let o = &out.output;
    assert_eq!(out.exit_code, 0, "script failed:\n{o}");
    let psi = section(o, "psi");
    assert!(
        psi.contains("no /proc/pressure/memory") && psi.contains("no memory.pressure"),
        "PSI is not off: {psi}"
    );
    let hold = json_section(o, "hold");
    assert!(hold["failed"].as_array().unwrap().is_empty(), "{hold:#}");
    assert_eq!(hold["health"]["status"], "Unknown", "{hold:#}");
    assert_eq!(hold["health"]["reason"], "PressureUnavailable", "{hold:#}");
    assert!(
        hold["health"]["message"]
            .as_str()
            .unwrap()
            .starts_with("memory pressure cannot be read (no memory.pressure: PSI is off; boot the kernel with psi=1)"),
        "{hold:#}"
    );
    let proceed = json_section(o, "proceed");
    assert_eq!(proceed["health"]["status"], "True", "{proceed:#}");
    assert_eq!(
        proceed["health"]["reason"], "HealthyWithoutPressure",
        "{proceed:#}"
    );
}
