//! The real-kernel tier: Debian's 6.1 kernel in qemu with two NUMA nodes and cgroup v2
//! (see nodemem_testkit::vm). Proves the plumbing the agent will rely on: interface
//! files accept and report values, memory.high throttles and counts events, cpuset.mems
//! pins to a NUMA node, the NUMA sysfs files parse with the model's parsers, and the
//! nodemem binary runs inside with its shared libraries.

use std::collections::BTreeMap;

use nodemem_model::numa::sysfs::node_capacity;
use nodemem_testkit::vm::Vm;

/// `key=value` lines of the script's output.
fn values(output: &str) -> BTreeMap<String, String> {
    output
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

const CGROUP_SCRIPT: &str = r#"
set -e
cd /sys/fs/cgroup
echo "controllers=$(cat cgroup.controllers)"
mkdir kubepods
echo "+memory +cpuset" > kubepods/cgroup.subtree_control
mkdir kubepods/pod1
echo 16777216 > kubepods/pod1/memory.min
echo 33554432 > kubepods/pod1/memory.low
echo 67108864 > kubepods/pod1/memory.high
echo "min=$(cat kubepods/pod1/memory.min)"
echo "low=$(cat kubepods/pod1/memory.low)"
echo "high=$(cat kubepods/pod1/memory.high)"
# A value that is not a multiple of the page size is rounded down by the kernel.
echo 16777217 > kubepods/pod1/memory.min
echo "min_rounded=$(cat kubepods/pod1/memory.min)"
echo "max=$(cat kubepods/pod1/memory.max)"
# A controller's files exist only where the parent enabled it: writing a missing
# interface file fails (EACCES from cgroupfs), it never creates a plain file.
mkdir kubepods/pod1/nomem
if echo 1 > kubepods/pod1/nomem/memory.high 2>/dev/null; then echo "missing_file=written"; else echo "missing_file=refused"; fi
rmdir kubepods/pod1/nomem
# Throttling: a 24Mi buffer in a cgroup whose memory.high is 16Mi (a small overage
# keeps the kernel's throttling delay short).
echo "+memory +cpuset" > kubepods/pod1/cgroup.subtree_control
mkdir kubepods/pod1/c1
echo 16777216 > kubepods/pod1/c1/memory.high
echo "high_events_before=$(grep '^high ' kubepods/pod1/c1/memory.events | cut -d' ' -f2)"
sh -c 'echo $$ > /sys/fs/cgroup/kubepods/pod1/c1/cgroup.procs; exec dd if=/dev/zero of=/dev/null bs=24M count=1 2>/dev/null'
echo "high_events_after=$(grep '^high ' kubepods/pod1/c1/memory.events | cut -d' ' -f2)"
echo "oom_kill=$(grep '^oom_kill ' kubepods/pod1/c1/memory.events | cut -d' ' -f2)"
# NUMA pinning.
echo "mems_effective_before=$(cat kubepods/pod1/cpuset.mems.effective)"
echo 1 > kubepods/pod1/cpuset.mems
echo "mems=$(cat kubepods/pod1/cpuset.mems)"
echo "mems_effective=$(cat kubepods/pod1/cpuset.mems.effective)"
# Writing a missing NUMA node fails, as the agent must expect.
if echo 5 > kubepods/pod1/cpuset.mems 2>/dev/null; then echo "bad_mems=accepted"; else echo "bad_mems=rejected"; fi
echo "nodemem=$(nodemem --version)"
"#;

#[test]
fn cgroup_v2_memory_and_cpuset_on_a_real_kernel() {
    let vm = Vm::new()
        .expect("VM prerequisites")
        .with_binary(nodemem_e2e::nodemem(), "nodemem");
    let out = vm.run(CGROUP_SCRIPT).expect("the VM runs the script");
    assert_eq!(out.exit_code, 0, "script failed:\n{}", out.output);
    let v = values(&out.output);
    let controllers: Vec<&str> = v["controllers"].split_whitespace().collect();
    for c in ["cpuset", "cpu", "io", "memory", "hugetlb", "pids"] {
        assert!(controllers.contains(&c), "{c} missing from {controllers:?}");
    }
    assert_eq!(v["min"], "16777216");
    assert_eq!(v["low"], "33554432");
    assert_eq!(v["high"], "67108864");
    assert_eq!(v["min_rounded"], "16777216", "rounded down to a page");
    assert_eq!(v["max"], "max");
    assert_eq!(v["missing_file"], "refused");
    let before: u64 = v["high_events_before"].parse().unwrap();
    let after: u64 = v["high_events_after"].parse().unwrap();
    assert_eq!(before, 0);
    assert!(
        after > before,
        "memory.high was crossed: {before} -> {after}"
    );
    assert_eq!(
        v["oom_kill"], "0",
        "memory.high throttles, it does not kill"
    );
    assert_eq!(v["mems_effective_before"], "0-1", "two NUMA nodes");
    assert_eq!(v["mems"], "1");
    assert_eq!(v["mems_effective"], "1");
    assert_eq!(v["bad_mems"], "rejected");
    assert_eq!(
        v["nodemem"],
        format!("nodemem {}", env!("CARGO_PKG_VERSION")),
        "the binary under test runs in the VM with its shared libraries"
    );
}

const NUMA_SCRIPT: &str = r#"
for n in 0 1; do
  echo "--- meminfo $n"
  cat /sys/devices/system/node/node$n/meminfo
  for d in /sys/devices/system/node/node$n/hugepages/hugepages-*; do
    echo "--- hugepages $n $(basename $d) $(cat $d/nr_hugepages)"
  done
done
echo "--- end"
"#;

#[test]
fn numa_sysfs_parses_with_the_model() {
    let mut vm = Vm::new().expect("VM prerequisites");
    // 16 pages of 2Mi at boot: the kernel spreads them over both NUMA nodes.
    vm.cmdline = "hugepagesz=2M hugepages=16".into();
    let out = vm.run(NUMA_SCRIPT).expect("the VM runs the script");
    assert_eq!(out.exit_code, 0, "{}", out.output);

    // Split the output into each node's meminfo and hugepage counts.
    let mut meminfo: BTreeMap<u32, String> = BTreeMap::new();
    let mut pools: BTreeMap<u32, Vec<(String, String)>> = BTreeMap::new();
    let mut current: Option<u32> = None;
    for line in out.output.lines() {
        if let Some(rest) = line.strip_prefix("--- meminfo ") {
            current = Some(rest.trim().parse().unwrap());
        } else if let Some(rest) = line.strip_prefix("--- hugepages ") {
            let w: Vec<&str> = rest.split_whitespace().collect();
            pools
                .entry(w[0].parse().unwrap())
                .or_default()
                .push((w[1].to_string(), w[2].to_string()));
            current = None;
        } else if line.starts_with("--- end") {
            current = None;
        } else if let Some(n) = current {
            let text = meminfo.entry(n).or_default();
            text.push_str(line);
            text.push('\n');
        }
    }
    assert_eq!(meminfo.len(), 2, "two NUMA nodes:\n{}", out.output);
    let mut huge_total = 0;
    for n in [0u32, 1] {
        let p: Vec<(&str, &str)> = pools[&n]
            .iter()
            .map(|(d, c)| (d.as_str(), c.as_str()))
            .collect();
        let cap = node_capacity(&meminfo[&n], &p).expect("the model parses real sysfs text");
        // 256Mi per node minus what the kernel keeps for itself.
        let total = cap["memory"] + cap["hugepages-2Mi"];
        assert!(
            total > 200 << 20 && total <= 256 << 20,
            "node {n}: {total} bytes"
        );
        assert!(
            cap.contains_key("hugepages-2Mi"),
            "the 2Mi pool is listed: {cap:?}"
        );
        huge_total += cap["hugepages-2Mi"];
    }
    assert_eq!(
        huge_total,
        16 * (2 << 20),
        "16 pages of 2Mi over both nodes"
    );
}
