//! `cargo bench -p nodemem --bench reaction`: how fast the agent covers a new container
//! cgroup, and what it costs while nothing changes.
//!
//! The real `nodemem` binary (release build) runs `agent --once --follow` against a
//! tmpfs tree (the test harness's `CgroupTree` in /dev/shm) for 334 Burstable pods x 3
//! containers whose container cgroups do not exist yet. The bench then creates the 1,002
//! container cgroups at 20 per second (each prepared aside and renamed into place, as
//! atomic as a mkdir on cgroupfs) and measures, for each, the time until its
//! memory.high holds the agent's value (polled every 100 us). Then 60 s with nothing
//! changing: the agent's CPU time and resident memory from /proc.
//!
//! This is the reaction path of the in-cluster agent (inotify -> the new cgroup alone
//! planned, read and written) without the apiserver; the in-cluster agent adds its
//! watch connections while idle.

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is the run failing

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nodemem_model::pod::qos::QosClass;
use nodemem_model::values::cgroup_layout::{
    container_dir, pod_dir, CgroupDriver, ContainerId, ContainerRuntime,
};
use nodemem_testkit::cgroup_tree::CgroupTree;
use nodemem_testkit::stats::percentile;
use serde_json::json;

const PODS: usize = 334;
const CONTAINERS: usize = 3;
const RATE_PER_SECOND: u64 = 20;
const IDLE: Duration = Duration::from_secs(60);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let base = if Path::new("/dev/shm").is_dir() {
        Path::new("/dev/shm").to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = tempfile::Builder::new()
        .prefix("nodemem-reaction-")
        .tempdir_in(base)
        .unwrap();
    let cgroup = dir.path().join("cgroup");
    std::fs::create_dir_all(&cgroup).unwrap();
    let tree = CgroupTree::at(&cgroup, CgroupDriver::Systemd, 2).unwrap();
    std::fs::create_dir_all(dir.path().join("proc/sys/kernel")).unwrap();
    std::fs::write(
        dir.path().join("proc/sys/kernel/osrelease"),
        "6.1.0-56-amd64\n",
    )
    .unwrap();

    // The pods (all Burstable: every container gets memory.high) and their cgroups:
    // pod cgroups exist, container cgroups are prepared aside.
    let mut items = Vec::new();
    let mut containers = Vec::new();
    let aside = dir.path().join("aside");
    std::fs::create_dir_all(&aside).unwrap();
    for p in 0..PODS {
        let uid = format!("{p:08x}-0000-4000-8000-000000000000");
        let mut statuses = Vec::new();
        let mut specs = Vec::new();
        tree.add_pod(QosClass::Burstable, &uid, &[]).unwrap();
        for c in 0..CONTAINERS {
            let id = format!("{p:056x}{c:08x}");
            specs.push(json!({"name": format!("c{c}"), "image": "x",
                "resources": {"requests": {"memory": "32Mi"}, "limits": {"memory": "128Mi"}}}));
            statuses.push(
                json!({"name": format!("c{c}"), "containerID": format!("containerd://{id}"),
                "image": "x", "imageID": "", "ready": true, "restartCount": 0}),
            );
            let target = container_dir(
                CgroupDriver::Systemd,
                QosClass::Burstable,
                &uid,
                &ContainerId {
                    runtime: ContainerRuntime::Containerd,
                    id: id.clone(),
                },
            );
            // A prepared cgroup directory with the kernel's files, moved in later.
            let staged = aside.join(&id);
            std::fs::create_dir_all(&staged).unwrap();
            for entry in std::fs::read_dir(cgroup.join(pod_dir(
                CgroupDriver::Systemd,
                QosClass::Burstable,
                &uid,
            )))
            .unwrap()
            {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_file() {
                    std::fs::copy(entry.path(), staged.join(entry.file_name())).unwrap();
                }
            }
            containers.push((staged, cgroup.join(target)));
        }
        items.push(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("pod-{p}"), "namespace": "bench", "uid": uid},
            "spec": {"nodeName": "agent-1", "containers": specs},
            "status": {"phase": "Running", "containerStatuses": statuses},
        }));
    }
    let pods = dir.path().join("pods.yaml");
    std::fs::write(
        &pods,
        serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": items}))
            .unwrap(),
    )
    .unwrap();

    let mut agent = Command::new(env!("CARGO_BIN_EXE_nodemem"))
        .args(["agent", "--once", "--follow", "--config"])
        .arg(repo.join("examples/agent-once/config.yaml"))
        .arg("--node")
        .arg(repo.join("examples/agent-once/node.yaml"))
        .arg("--pods")
        .arg(&pods)
        .arg("--cgroup-root")
        .arg(&cgroup)
        .arg("--sys-root")
        .arg(dir.path().join("sys"))
        .arg("--proc-root")
        .arg(dir.path().join("proc"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("the release nodemem binary");
    let pid = agent.id();
    let mut lines = std::io::BufReader::new(agent.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        if line.unwrap().starts_with("following ") {
            break;
        }
    }
    // Drain the agent's reaction lines so its stdout never blocks.
    std::thread::spawn(move || for _ in lines {});

    let period = Duration::from_millis(1000 / RATE_PER_SECOND);
    let mut latencies = Vec::with_capacity(containers.len());
    let mut timeouts = 0;
    let started = Instant::now();
    for (i, (staged, target)) in containers.iter().enumerate() {
        let due = started + period * i as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        std::fs::rename(staged, target).unwrap();
        let t0 = Instant::now();
        let high = target.join("memory.high");
        loop {
            if std::fs::read_to_string(&high)
                .map(|v| v.trim() != "max")
                .unwrap_or(false)
            {
                latencies.push(t0.elapsed());
                break;
            }
            if t0.elapsed() > Duration::from_secs(2) {
                timeouts += 1;
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    latencies.sort();
    println!(
        "reaction: {} container cgroups created at {RATE_PER_SECOND}/s on tmpfs ({} pods on the node): median {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms, {timeouts} not covered within 2 s (goal: median < 10 ms, p99 < 50 ms)",
        latencies.len() + timeouts,
        PODS,
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.9)),
        ms(percentile(&latencies, 0.99)),
        ms(*latencies.last().unwrap()),
    );

    // Idle: nothing changes for IDLE.
    let (ticks0, _) = nodemem_testkit::clients::cpu_ticks_and_rss_kib(pid).unwrap();
    std::thread::sleep(IDLE);
    let (ticks1, rss_kib) = nodemem_testkit::clients::cpu_ticks_and_rss_kib(pid).unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let cpu = (ticks1 - ticks0) as f64 / hz;
    println!(
        "idle: {} pods x {CONTAINERS} containers, nothing changing for {} s: CPU {:.3} s = {:.3}% of one core, resident memory {:.1} MiB (goal: < 0.5%, < 30 MiB)",
        PODS,
        IDLE.as_secs(),
        cpu,
        cpu / IDLE.as_secs_f64() * 100.0,
        rss_kib as f64 / 1024.0
    );
    agent.kill().ok();
    agent.wait().ok();
}
