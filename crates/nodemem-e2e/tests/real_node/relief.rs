//! Phase (systemd driver): relief on a real kernel: a container memory.high chokes is relieved, restored and reported.
//!
//! Under `Agent` with `memoryQoS.relief`, a container that keeps mapping memory past
//! its 160Mi memory.high stalls (PSI `full`); the agent, woken by its PSI trigger
//! (every watched container has one armed from the agent's capability-less pod, none is
//! read on every tick, `nodemem_agent_relief_triggers_fired_total` counts the firing),
//! raises memory.high to the 256Mi memory.max, puts it back after the relief period and
//! reports it (`ReliefRefused`) when it chokes again; the page-cache container is never
//! relieved.

use super::*;

/// Issue 19's relief on the real kernel: a container that holds 150Mi and keeps mapping
/// and unmapping 32Mi more sits at its 160Mi memory.high and stalls (PSI `full`, as
/// the kernel throttles it); the agent, woken by the PSI trigger, raises its
/// memory.high to its memory.max (256Mi) within the configured time, puts it back after
/// the relief period, and reports it when it chokes again within the repeat window. A
/// container that only fills page cache beyond its memory.high is never relieved.
pub(crate) async fn relief_on_a_real_kernel(
    node: &mut RealNode,
    driver: Driver,
    client: &kube::Client,
    admin: &Path,
    agent_ip: &str,
) {
    const MI: i64 = 1 << 20;
    let name = node.name.clone();
    let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
    repolicy(
        client,
        admin,
        &name,
        r#"{"spec":{"enforcement":"Agent","memoryQoS":{"throttlingFactor":0.5,
            "relief":{"fullPressurePercent":10,"sustainedSeconds":10,"reliefSeconds":30,"repeatWindowSeconds":600}},
            "rollout":{"health":{"maxReliefs":5}}}}"#,
    )
    .await;
    let dirs = start_workloads(
        client,
        &name,
        driver,
        &[
            (
                "cache-only",
                &["-allocate", "16Mi", "-cache", "200Mi"],
                "64Mi",
                "256Mi",
            ),
            (
                "thrash",
                &["-allocate", "150Mi", "-churn", "32Mi"],
                "64Mi",
                "256Mi",
            ),
        ],
    )
    .await;
    let started = Instant::now();
    let (cache, thrash) = (dirs[0].clone(), dirs[1].clone());
    let pods: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    let high = (160 * MI).to_string();
    let raised = (256 * MI).to_string();
    let read = |node: &mut RealNode, file: &str| {
        // bash's own read: no process but the request's own (issue 57).
        node.run(&format!("read -r v < {file}; echo \"$v\""))
            .map(|(out, _)| out.trim().to_string())
            .unwrap_or_default()
    };
    // Relieved: sustainedSeconds (10) after the stall is seen, a tick (10 s) to see it.
    let relieved_after = loop {
        if read(node, &format!("{thrash}/memory.high")) == raised {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < paced(Duration::from_secs(120)),
            "thrash not relieved within {:?}: memory.high {}, pressure {}",
            paced(Duration::from_secs(120)),
            read(node, &format!("{thrash}/memory.high")),
            read(node, &format!("{thrash}/memory.pressure"))
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let relieved = eventually(
        "the MemoryHighRelieved event",
        Duration::from_secs(30),
        || async {
            pod_events(client, "thrash", "MemoryHighRelieved")
                .await
                .pop()
        },
    )
    .await;
    assert!(
        relieved.starts_with(&format!(
            "container w: memory.high raised from {high} to {raised}"
        )),
        "{relieved}"
    );
    // Back after the relief period (30 s), then reported when it chokes again.
    let restored_at = loop {
        if read(node, &format!("{thrash}/memory.high")) == high {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < relieved_after + Duration::from_secs(90),
            "memory.high not restored"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        restored_at >= relieved_after + Duration::from_secs(25),
        "restored {restored_at:?} after a relief at {relieved_after:?}: before the relief period"
    );
    let refused = eventually(
        "the ReliefRefused event",
        Duration::from_secs(120),
        || async { pod_events(client, "thrash", "ReliefRefused").await.pop() },
    )
    .await;
    assert!(refused.contains("reported, not relieved"), "{refused}");
    assert_eq!(
        read(node, &format!("{thrash}/memory.high")),
        high,
        "not relieved again"
    );
    // Page cache beyond memory.high: reclaimed, never relieved.
    assert_eq!(read(node, &format!("{cache}/memory.high")), high);
    assert!(pod_events(client, "cache-only", "MemoryHighRelieved")
        .await
        .is_empty());
    // The kernel armed a PSI trigger for every watched container (the agent's pod has
    // no capability: a 10 s window is a multiple of 2 s, which unprivileged triggers
    // need): none is read on every tick, and the relief began with one firing.
    let watched = agent_metric(node, agent_ip, "nodemem_agent_relief_watched_containers");
    let polled = agent_metric(node, agent_ip, "nodemem_agent_relief_polled_containers");
    let fired = agent_metric(node, agent_ip, "nodemem_agent_relief_triggers_fired_total");
    let (why, _) = node
        .run("grep -h 'PSI trigger' /var/log/pods/nodemem-system_*/agent/*.log | tail -n 3")
        .unwrap_or_default();
    assert!(watched >= 2.0, "{watched} containers watched");
    assert!(
        agent_metrics(node, agent_ip).contains("\nnodemem_agent_relief_polled_containers 0\n"),
        "the agent exports its polled containers"
    );
    assert_eq!(
        polled, 0.0,
        "{polled} of {watched} watched containers have no PSI trigger; the agent says: {why}"
    );
    assert!(fired >= 1.0, "no PSI trigger fired ({fired})");
    eprintln!("relief: {watched} containers watched, each with a PSI trigger; {fired} firings");
    let status = configs.get(&name).await.unwrap().status.unwrap();
    let relief = status.relief.expect("relief in status");
    // One relief per repeat window is the promise; each later choke is reported, once
    // per episode (a container quiet for a while and choking again is reported again),
    // so how many depends on how long the kernel keeps it choking, not on nodemem.
    assert_eq!(
        relief.reliefs, 1,
        "one relief in the repeat window: {relief:?}"
    );
    assert!(
        relief.refused >= 1,
        "the choke after it reported: {relief:?}"
    );
    eprintln!(
        "relief on the real kernel: relieved {relieved_after:?} after start, restored at {restored_at:?}; {relieved}"
    );
    for p in ["thrash", "cache-only"] {
        pods.delete(p, &Default::default()).await.unwrap();
    }
}
