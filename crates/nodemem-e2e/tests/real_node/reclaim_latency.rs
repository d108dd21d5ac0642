//! Reclaim's cost to the agent, measured on the real node (issue 58, BENCHMARKS.md
//! "Reclaim beside the agent's loop"): while a pod streams page cache, the agent's
//! `/healthz` is asked every 100 ms from the node and its passes are timed by its own
//! histogram, once with reclaim observing and once with it taking hundreds of MiB. A
//! benchmark, not a gate: the figures are printed; the streaming part's assertions are
//! the phase's.

use super::*;

/// Asks the agent's `/healthz` every 100 ms until told to stop (bash builtins only:
/// `/dev/tcp`, `$EPOCHREALTIME`); one line per answer: start, end, status line.
const PROBER: &str = r#"#!/bin/bash
d=/run/nodemem-latency-$2
mkfifo "$d/wait"
exec 4<>"$d/wait"
while [ ! -e "$d/stop" ]; do
  s=$EPOCHREALTIME
  if exec 3<>"/dev/tcp/$1/9180"; then
    printf 'GET /healthz HTTP/1.0\r\n\r\n' >&3
    read -r line <&3
    exec 3<&-
    echo "$s $EPOCHREALTIME $line" >> "$d/out"
  fi
  read -r -t 0.1 -u 4 _
done
touch "$d/done"
exit 0
"#;

/// The probe running (its name: a unit and a directory of its own), the pass
/// histogram's count and sum when it began, and the agent's CPU then.
pub(crate) struct Probe {
    what: &'static str,
    passes: (f64, f64),
    cpu: Option<AgentCpu>,
}

/// The agent container's CPU from its cgroup's `cpu.stat` at a time on the node's clock:
/// the kernel's reclaim runs in the context of the thread that writes `memory.reclaim`
/// (the agent's writer), so its work is the agent's system time.
#[derive(Clone, Copy, Debug)]
struct AgentCpu {
    at_seconds: f64,
    user_usec: f64,
    system_usec: f64,
}

fn agent_cpu(node: &mut RealNode) -> Option<AgentCpu> {
    let (out, code) = node
        .run("p=$(pgrep -f '^/nodemem agent' | head -n1); c=$(cut -d: -f3 /proc/$p/cgroup); echo at $(date +%s.%N); grep -E '^(user|system)_usec ' /sys/fs/cgroup$c/cpu.stat")
        .ok()?;
    let field = |name: &str| -> Option<f64> {
        out.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
    };
    (code == 0).then_some(())?;
    Some(AgentCpu {
        at_seconds: field("at ")?,
        user_usec: field("user_usec ")?,
        system_usec: field("system_usec ")?,
    })
}

/// The agent's CPU between two readings, in ms of CPU per second of the node's clock.
fn cpu_between(from: Option<AgentCpu>, to: Option<AgentCpu>) -> String {
    match (from, to) {
        (Some(a), Some(b)) if b.at_seconds > a.at_seconds && b.user_usec >= a.user_usec => {
            let wall = b.at_seconds - a.at_seconds;
            let per_second = |usec: f64| usec / 1000.0 / wall;
            format!(
                "the agent's CPU {:.1} ms/s user, {:.1} ms/s system over {wall:.0} s",
                per_second(b.user_usec - a.user_usec),
                per_second(b.system_usec - a.system_usec)
            )
        }
        _ => "the agent's CPU not measured (its cgroup not read, or it restarted)".into(),
    }
}

pub(crate) fn started(node: &mut RealNode, agent_ip: &str, what: &'static str) -> Probe {
    std::fs::write(node.share().join("latency.sh"), PROBER).unwrap();
    let (out, code) = node
        .run(&format!(
            "mkdir -p /run/nodemem-latency-{what} && systemd-run --unit=nodemem-latency-{what} bash /mnt/nodemem/latency.sh {agent_ip} {what}"
        ))
        .unwrap();
    assert_eq!(code, 0, "{out}");
    Probe {
        what,
        passes: passes(node, agent_ip),
        cpu: agent_cpu(node),
    }
}

/// The pass histogram's count and sum now.
fn passes(node: &mut RealNode, agent_ip: &str) -> (f64, f64) {
    let m = agent_metrics(node, agent_ip);
    (
        series_value(&m, "nodemem_agent_pass_duration_seconds_count"),
        series_value(&m, "nodemem_agent_pass_duration_seconds_sum"),
    )
}

/// Stops the probe; a line of its figures.
pub(crate) fn stopped(node: &mut RealNode, agent_ip: &str, probe: Probe) -> String {
    let what = probe.what;
    let cpu = cpu_between(probe.cpu, agent_cpu(node));
    let (out, _) = node
        .run(&format!(
            "d=/run/nodemem-latency-{what}; touch $d/stop; for i in $(seq 50); do [ -e $d/done ] && break; sleep 0.1; done; cat $d/out"
        ))
        .unwrap();
    let mut ms: Vec<f64> = out
        .lines()
        .filter(|l| l.contains(" 200"))
        .filter_map(|l| {
            let mut f = l.split_whitespace().map(|v| v.parse::<f64>().ok());
            Some((f.next()??, f.next()??))
        })
        .map(|(s, e)| (e - s) * 1000.0)
        .collect();
    ms.sort_by(f64::total_cmp);
    let answered = ms.len();
    let asked = out.lines().count();
    let at = |q: f64| {
        ms.get(((answered as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    let (count, sum) = passes(node, agent_ip);
    let (n, s) = (count - probe.passes.0, sum - probe.passes.1);
    format!(
        "{what}: /healthz answered 200 {answered} of {asked} times, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {n:.0} passes, mean {:.1} ms; {cpu}",
        at(0.5),
        at(0.99),
        ms.last().copied().unwrap_or(f64::NAN),
        if n > 0.0 { s / n * 1000.0 } else { f64::NAN }
    )
}
