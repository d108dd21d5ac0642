//! Phase "reclaim", first: on the real kernel, cold page cache is taken back to its
//! container's request as Observe had predicted, while a hot page cache beside it stays.
//!
//! A Burstable pod (request 16Mi) writes 160Mi to a file and goes idle. Under `reclaim:
//! {mode: Observe}` status says how much can be taken (`reclaimableBytes`, within 5 %
//! of memory.current less the request as the kernel reads it), nothing is taken; a
//! second pod then reads its 48Mi file ten times a second; under `Active` the cold
//! container comes down to its request (within 8 MiB) and what its memory.current lost
//! is Observe's prediction within 15 %, and its memory.current, read every 50 ms on the
//! node from before Active until 10 s after it reached its floor (bash builtins: at
//! least 100 readings), never reads below its request less a page (issue 58: each step
//! is written in parts whose worst overshoot stays above the request); over the whole
//! Active run the hot pod's PSI `some` stall stays under the 1000 µs/s target times the
//! node's CPU slowness (its 200k shell rounds against 3 s, never below 1: under TCG a
//! refault's wall time is the CPU's; since 2026-11-29, after the same 14,612 refaults
//! stalled it 2,040 µs/s on a node of 9.49 s per 200k rounds), it keeps 40Mi or more of
//! its cache and refaults less than twice its file. What was taken is page cache (once
//! status counts it: its figures are written at most every 30 s, the test waits up to
//! 60 s; `reclaimedFileBytes` at least 90 % of what the cold container lost,
//! `reclaimedAnonBytes` 0: no swap) and `swappinessKey` is what the kernel's version
//! says (6.1: false, the probe's `0 swappiness=60` refused). Measured 2026-11-28 (four
//! runs): predicted 151-153 MiB, taken 145-147 MiB (169 -> 21-23 MiB, floor 16), 218 MB
//! of all that reclaim took page cache and none anon; the hot pod stalled 158-409 µs/s,
//! refaulted 12,883-14,929 pages in 53-56 s and kept all 48 MiB; with the hot watch cut
//! from 20 s to 10 s (2026-11-28, tenth session): 229-555 µs/s, 14,630-14,726 pages in
//! 45-46 s, 48 MiB kept. The VM tier's initramfs has no block device, so its page cache
//! is not reclaimable: this runs on the real node's VM (ext4 root disk, the same Debian
//! 6.1 kernel).

use super::reclaim::{reclaim_patch, stat_value, MI};
use super::*;

/// The cold pod writes this much once and never reads it again.
const COLD: &[&str] = &["-cache", "160Mi"];
/// The cold pod's request: reclaim's floor.
const FLOOR: i64 = 16 * MI;
/// How far above its floor the cold container may end: the last steps take what is
/// left over the floor, and its own memory (the program, the kernel's objects) is not
/// page cache.
const FLOOR_MARGIN: i64 = 8 * MI;
/// Observe's prediction against what Active then took.
const PREDICTION_MARGIN_PERCENT: i64 = 15;
/// Observe's figure against the kernel's (memory.current less the floor) at the same
/// time: the cold pod is idle, so the two readings agree but for its own small churn.
const READING_MARGIN_PERCENT: i64 = 5;
/// The hot pod's file, in 4 KiB pages.
const HOT_PAGES: i64 = 48 * MI / 4096;
/// The step controller's stall target (the policy's default: 0.1 % of the time).
const TARGET_STALL_US_PER_S: u64 = 1000;
/// A page: the floor's tolerance (issue 58: never below the request less a page).
const PAGE: i64 = 4096;

/// Samples the cold container's memory.current every 50 ms on the node (bash builtins
/// only: a fork and an exec cost about 20 ms each under TCG) until told to stop, then
/// writes the lowest reading and the number of readings.
const FLOOR_SAMPLER: &str = r#"#!/bin/bash
mkfifo /run/nodemem-floor/wait
exec 3<>/run/nodemem-floor/wait
min=
n=0
while [ ! -e /run/nodemem-floor/stop ]; do
  if read -r v < "$1/memory.current"; then
    n=$((n + 1))
    if [ -z "$min" ] || [ "$v" -lt "$min" ]; then min=$v; fi
  fi
  read -r -t 0.05 -u 3 _
done
echo "$min $n" > /run/nodemem-floor/result
"#;

/// Starts [`FLOOR_SAMPLER`] on `cgroup` (a container's directory on the node).
fn floor_sampler_started(node: &mut RealNode, cgroup: &str) {
    std::fs::write(node.share().join("floor.sh"), FLOOR_SAMPLER).unwrap();
    let (out, code) = node
        .run(&format!(
            "rm -rf /run/nodemem-floor && mkdir -p /run/nodemem-floor && systemd-run --unit=nodemem-floor bash /mnt/nodemem/floor.sh {cgroup}"
        ))
        .unwrap();
    assert_eq!(code, 0, "{out}");
}

/// Stops the sampler: the lowest memory.current it read, and how many readings.
fn floor_sampler_stopped(node: &mut RealNode) -> (i64, u64) {
    let (out, code) = node
        .run("touch /run/nodemem-floor/stop; for i in $(seq 100); do [ -s /run/nodemem-floor/result ] && break; sleep 0.1; done; cat /run/nodemem-floor/result")
        .unwrap();
    assert_eq!(code, 0, "the floor sampler wrote nothing: {out}");
    let mut f = out
        .split_whitespace()
        .map(|v| v.parse::<i64>().unwrap_or(-1));
    let (min, n) = (f.next().unwrap_or(-1), f.next().unwrap_or(0));
    (min, u64::try_from(n).unwrap_or(0))
}

/// Issue 46 on the real kernel: a pod writes 160Mi of page cache and goes idle. Under
/// Observe the agent's status says how much of it could be taken (memory.current above
/// the pod's 16Mi request, the kernel agreeing within 5 %) and takes nothing; under
/// Active the cold container goes down to its request (within 8 MiB), and what its
/// memory.current lost is Observe's prediction within 15 %. A pod beside it that reads
/// its 48Mi file ten times a second keeps it: its memory pressure over the whole run
/// (PSI `some` total) stays under the stall target and it refaults less than twice its file. Returns
/// the hot container's cgroup, which the next steps go on using.
pub(crate) async fn cold_cache_goes_as_observe_predicted(
    node: &mut RealNode,
    bed: &Bed<'_>,
) -> String {
    let name = node.name.clone();
    let client = &bed.client;
    let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
    repolicy(client, bed.admin(), &name, &reclaim_patch("Observe")).await;
    let cold = start_workloads(
        client,
        &name,
        bed.driver,
        &[("cold", COLD, "16Mi", "512Mi")],
    )
    .await
    .remove(0);
    eventually(
        "the cold pod's 160Mi of page cache",
        Duration::from_secs(60),
        async || (stat_value(node, &cold, "file")? >= 150 * MI).then_some(()),
    )
    .await;

    // Observe: the figure, once status reads the filled cache; the kernel's beside it.
    let predicted = eventually(
        "Observe's figures for the filled cold pod",
        Duration::from_secs(90),
        async || {
            let r = configs.get(&name).await.ok()?.status?.reclaim?;
            (r.mode == "Observe" && r.resident_bytes >= 150 * MI).then_some(r)
        },
    )
    .await;
    assert_eq!(
        predicted.containers, 1,
        "the cold pod is the only target: {predicted:?}"
    );
    assert_eq!(
        predicted.reclaimed_bytes, 0,
        "Observe takes nothing: {predicted:?}"
    );
    let before = memory_current(node, &cold);
    let kernel = before - FLOOR;
    let p = predicted.reclaimable_bytes;
    assert!(
        (p - kernel).abs() <= kernel * READING_MARGIN_PERCENT / 100,
        "Observe says {} MiB can be taken, the kernel {} MiB above the floor: {predicted:?}",
        p / MI,
        kernel / MI
    );
    assert!(
        stat_value(node, &cold, "file").unwrap_or(0) >= 150 * MI,
        "the cold cache is still there under Observe"
    );

    // The hot pod, settled before reclaim starts: its file wholly in page cache.
    let hot = hot_pod_started(node, bed).await;
    let hot_start = (stall_us(node, &hot), refaults(node, &hot), Instant::now());

    // Active: the cold container goes to its floor, what it lost is the prediction,
    // and no reading every 50 ms on the way finds it below its request (issue 58).
    floor_sampler_started(node, &cold);
    repolicy(client, bed.admin(), &name, &reclaim_patch("Active")).await;
    let end = within(Duration::from_secs(120), async || {
        let c = memory_current(node, &cold);
        (c <= FLOOR + FLOOR_MARGIN).then_some(c)
    })
    .await;
    let Some(end) = end else {
        panic!(
            "the cold container did not come down to its request: memory.current {} MiB (floor {} MiB); {:?}",
            memory_current(node, &cold) / MI,
            FLOOR / MI,
            configs_reclaim(&configs, &name).await
        )
    };
    // The hot pod is watched a while longer: reclaim keeps trying it (and the next
    // parts go on trying it for minutes).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (lowest, readings) = floor_sampler_stopped(node);
    eprintln!(
        "reclaim floor: the cold container's memory.current read {readings} times (every 50 ms) under Active, the lowest {} KiB, its request {} KiB",
        lowest / 1024,
        FLOOR / 1024
    );
    assert!(
        readings >= 100 && lowest >= FLOOR - PAGE,
        "reclaim took the cold container below its request: {lowest} bytes at the lowest of {readings} readings, request {FLOOR}"
    );
    let seconds = hot_start.2.elapsed().as_secs_f64();
    let stall = stall_us(node, &hot) - hot_start.0;
    let hot_refaults = refaults(node, &hot) - hot_start.1;
    let hot_file = stat_value(node, &hot, "file").unwrap_or(0);
    let taken = before - end;
    // status.reclaim is written at the agent's passes, its counts a pass behind the
    // kernel: the test waits for them to count what the cold container lost.
    let counted = within(Duration::from_secs(60), async || {
        configs_reclaim(&configs, &name)
            .await
            .filter(|r| r.mode == "Active" && r.reclaimed_bytes >= taken * 9 / 10)
    })
    .await;
    let on = match counted {
        Some(r) => Some(r),
        None => configs_reclaim(&configs, &name).await,
    };
    eprintln!(
        "reclaim on the kernel: Observe predicted {} MiB, Active took {} MiB from the cold pod ({} -> {} MiB, floor {}); \
         the hot pod stalled {:.0} us/s (target {TARGET_STALL_US_PER_S}, x{:.2} at this node's CPU speed), refaulted {hot_refaults} pages, kept {} MiB of cache in {seconds:.0} s; {on:?}",
        p / MI,
        taken / MI,
        before / MI,
        end / MI,
        FLOOR / MI,
        stall as f64 / seconds,
        super::pace::cpu_slowness(),
        hot_file / MI,
    );
    assert!(
        (taken - p).abs() <= p * PREDICTION_MARGIN_PERCENT / 100,
        "Observe predicted {} MiB, Active took {} MiB: {on:?}",
        p / MI,
        taken / MI
    );
    // The stall is the wall time the hot pod's refaults cost it, and under TCG a
    // refault costs a slower CPU more: the same 14,612 refaults stalled it 90 ms on a
    // node of 9.49 s per 200k shell rounds (2,040 us/s, 2026-11-29) where 12,883-14,929
    // stalled it 10-25 ms on faster ones. What nodemem decides, how often it takes what
    // the pod reads again, is held by the refault bound below, on any machine; the
    // stall's target is held at the CPU's speed.
    let target = TARGET_STALL_US_PER_S as f64 * super::pace::cpu_slowness();
    assert!(
        stall as f64 / seconds <= target,
        "the hot pod stalled {:.0} us/s over {seconds:.0} s, over the {TARGET_STALL_US_PER_S} us/s target ({target:.0} at this node's CPU speed): {on:?}",
        stall as f64 / seconds
    );
    assert!(
        hot_file >= 40 * MI,
        "the hot pod's cache is down to {} MiB: {on:?}",
        hot_file / MI
    );
    // Each step on the hot pod takes pages it reads again at once, and the refaults
    // stop the next one for twice as long: at the phase's steps (30 times the default
    // pace) that came to 14,671 pages in 53 s, 0.2 % of its reads (2026-11-28); a
    // reclaim that did not back off would take its 48Mi over and over.
    assert!(
        hot_refaults < 2 * HOT_PAGES,
        "the hot pod refaulted {hot_refaults} pages, twice its 48Mi ({HOT_PAGES} pages) or more: reclaim kept taking what it reads: {on:?}"
    );
    // What nodemem took is page cache (no swap on the node), and whether the kernel's
    // memory.reclaim takes swappiness= is found out as its version says (6.11). The
    // share is of what nodemem's own ledger took, not of the cold pod's drop in
    // memory.current: that drop also holds the kernel memory (slab, page tables) the
    // cold pod gave back, 129 of 145 MiB in a CI run (2026-11-29) where nodemem's
    // ledger held 130 MiB of file pages in 134 MiB taken.
    let on = on.expect("status.reclaim under Active");
    assert!(
        !on.swap
            && on.reclaimed_anon_bytes == 0
            && on.reclaimed_file_bytes * 10 >= on.reclaimed_bytes * 9,
        "page cache, {} MiB of the {} MiB nodemem took (the cold pod gave back {} MiB): {on:?}",
        on.reclaimed_file_bytes / MI,
        on.reclaimed_bytes / MI,
        taken / MI
    );
    let (release, _) = node.run("cat /proc/sys/kernel/osrelease").unwrap();
    let version: Vec<u32> = release
        .split(['.', '-'])
        .take(2)
        .map(|n| n.trim().parse().unwrap_or(0))
        .collect();
    assert_eq!(
        on.swappiness_key,
        Some(version >= vec![6, 11]),
        "kernel {}: {on:?}",
        release.trim()
    );
    let pods: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    pods.delete("cold", &Default::default()).await.unwrap();
    hot
}

/// Starts the pod that reads its 48Mi file ten times a second and waits for the file
/// wholly in page cache; its container's cgroup.
pub(crate) async fn hot_pod_started(node: &mut RealNode, bed: &Bed<'_>) -> String {
    let hot = start_workloads(
        &bed.client,
        &node.name,
        bed.driver,
        &[("hot", &["-hot", "48Mi"], "16Mi", "256Mi")],
    )
    .await
    .remove(0);
    eventually(
        "the hot pod's 48Mi in page cache",
        Duration::from_secs(60),
        async || (stat_value(node, &hot, "file")? >= HOT_PAGES * 4096).then_some(()),
    )
    .await;
    hot
}

/// memory.current of a cgroup on the node, bytes.
pub(crate) fn memory_current(node: &mut RealNode, dir: &str) -> i64 {
    read_number(node, &format!("cat {dir}/memory.current"))
}

/// The total stall of memory.pressure's `some` line, microseconds.
fn stall_us(node: &mut RealNode, dir: &str) -> i64 {
    read_number(
        node,
        &format!(
            "awk '$1==\"some\" {{sub(\"total=\", \"\", $5); print $5}}' {dir}/memory.pressure"
        ),
    )
}

/// workingset_refault_anon + workingset_refault_file of a cgroup.
pub(crate) fn refaults(node: &mut RealNode, dir: &str) -> i64 {
    read_number(
        node,
        &format!("awk '$1 ~ /^workingset_refault_(anon|file)$/ {{n += $2}} END {{print n}}' {dir}/memory.stat"),
    )
}

fn read_number(node: &mut RealNode, script: &str) -> i64 {
    let (out, code) = node.run(script).unwrap();
    assert_eq!(code, 0, "{script}: {out}");
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{script}: not a number: {out}"))
}

/// The config's status.reclaim now.
pub(crate) async fn configs_reclaim(
    configs: &Api<NodeMemoryConfig>,
    name: &str,
) -> Option<nodemem_api::config::ReclaimSummary> {
    configs.get(name).await.ok()?.status?.reclaim.map(|r| *r)
}
