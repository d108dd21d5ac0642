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

/// The probe running (its name: a unit and a directory of its own), and the pass
/// histogram's count and sum when it began.
pub(crate) struct Probe {
    what: &'static str,
    passes: (f64, f64),
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
        "{what}: /healthz answered 200 {answered} of {asked} times, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {n:.0} passes, mean {:.1} ms",
        at(0.5),
        at(0.99),
        ms.last().copied().unwrap_or(f64::NAN),
        if n > 0.0 { s / n * 1000.0 } else { f64::NAN }
    )
}
