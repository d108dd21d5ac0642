//! `nodemem-fuzz <target>`: feeds stdin to one parser, for afl++ (see TESTING.md,
//! `tests/scripts/fuzz-afl.sh`). A panic is what the fuzzer looks for: every parser
//! must answer any input with a value or an error. The same properties run on every
//! `make test` as proptest cases; this harness is for long runs.

use std::io::Read;

use nodemem_cgroup::parse;
use nodemem_model::numa::sysfs;
use nodemem_model::pod::qos::QosClass;
use nodemem_model::quantity::Quantity;
use nodemem_model::values::cgroup_layout::{container_dir, pod_dir, CgroupDriver, ContainerId};

/// The targets, each a parser or builder and what it takes from the input.
const TARGETS: &[&str] = &[
    "memory-value",
    "memory-events",
    "memory-stat",
    "pressure",
    "range-list",
    "controllers",
    "meminfo",
    "hugepages",
    "quantity",
    "cgroup-path",
];

fn run(target: &str, input: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(input);
    match target {
        "memory-value" => drop(parse::memory_value("memory.high", &text)),
        "memory-events" => drop(parse::memory_events("memory.events", &text)),
        "memory-stat" => {
            if let Ok(stat) = parse::memory_stat("memory.stat", &text) {
                drop(parse::working_set("memory.stat", u64::MAX, &stat));
            }
        }
        "pressure" => drop(parse::pressure("memory.pressure", &text)),
        "range-list" => drop(parse::range_list("cpuset.mems", &text)),
        "controllers" => drop(parse::controllers("cgroup.controllers", &text)),
        "meminfo" => drop(sysfs::parse_meminfo_total(&text)),
        // A hugepage directory's name, then its nr_hugepages, then meminfo.
        "hugepages" => {
            let mut parts = text.splitn(3, '\n');
            let dir = parts.next().unwrap_or_default();
            let nr = parts.next().unwrap_or_default();
            let meminfo = parts.next().unwrap_or_default();
            if let Ok(capacity) = sysfs::node_capacity(meminfo, &[(dir, nr)]) {
                assert!(capacity.values().all(|b| *b >= 0), "{capacity:?}");
            }
        }
        "quantity" => drop(Quantity::parse(&text)),
        // A pod UID, then a container ID: a path is built only from identifiers that
        // pass the check, and it stays one component per identifier.
        "cgroup-path" => {
            let (uid, id) = text.split_once('\n').unwrap_or((&text, ""));
            if nodemem_cgroup::check_identifier("pod UID", uid).is_ok()
                && nodemem_cgroup::check_identifier("container ID", id).is_ok()
            {
                for driver in [CgroupDriver::Systemd, CgroupDriver::Cgroupfs] {
                    for qos in [
                        QosClass::Guaranteed,
                        QosClass::Burstable,
                        QosClass::BestEffort,
                    ] {
                        let pod = pod_dir(driver, qos, uid);
                        let container =
                            container_dir(driver, qos, uid, &ContainerId::containerd(id));
                        let path = nodemem_cgroup::CgroupPath::new(&container)
                            .map_err(|e| format!("{container}: {e}"))?;
                        assert!(container.starts_with(&pod), "{container} not under {pod}");
                        assert!(!path.as_str().split('/').any(|c| c == ".." || c == "."));
                    }
                }
            }
        }
        other => {
            return Err(format!(
                "unknown target {other:?}; one of: {}",
                TARGETS.join(", ")
            ))
        }
    }
    Ok(())
}

fn main() {
    // A panic aborts: the fuzzer counts a signal as a crash, not an exit status.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("nodemem-fuzz: {info}");
        std::process::abort();
    }));
    let target = std::env::args().nth(1).unwrap_or_default();
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        eprintln!("nodemem-fuzz: reading stdin: {e}");
        std::process::exit(2);
    }
    if let Err(e) = run(&target, &input) {
        eprintln!("nodemem-fuzz: {e}");
        std::process::exit(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_target_takes_kernel_text_and_garbage() {
        let inputs: &[&[u8]] = &[
            b"",
            b"max\n",
            b"some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
            b"hugepages-2048kB\n8\nNode 0 MemTotal: 1024 kB\n",
            b"0123-4567\nabcdef",
            b"\xff\xfe..\n../../etc",
        ];
        for target in TARGETS {
            for input in inputs {
                run(target, input).unwrap();
            }
        }
        assert!(run("nothing", b"").unwrap_err().contains("unknown target"));
    }
}
