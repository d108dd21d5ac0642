//! Phase: nodemem's values survive their files' other owners (systemd's reloads and property changes, containerd and kubelet restarts, a resize, a container restart): the longest stretch with a value not nodemem's.
//!
//! The agent's own container keeps its runtime's values (the kernel forbids the write);
//! a monitor on the node records every change of every file nodemem holds through
//! `systemctl daemon-reload`, a property change of the burstable slice, a containerd
//! restart (these three not for the v1.35 kubelet, the systemd node's second:
//! `owners::Events::KubeletOnly`, since 2026-11-30: systemd and containerd do them
//! without reading the kubelet, and under the v1.36 kubelet before it they ran on the
//! same node with the same programs), a kubelet restart and its QoS update
//! (`UpdateCgroups`, which runs at the kubelet's start, every minute and in the sync of
//! a pod whose cgroup does not exist yet: unless its minute has passed during the other
//! events, a new BestEffort pod brings it at once instead of a wait for the minute,
//! since 2026-11-29; on a slow machine, 88 s after the restart, the periodic one had
//! run already), an in-place resize (nodemem's new memory.high follows) and a container
//! restart (the new cgroup gets its values); any moment a value is not nodemem's fails
//! the test with the file, both values and the event before it.

use super::*;

/// Records every change of the watched files with the node's clock until
/// /run/nodemem-monitor/stop exists: `<epoch seconds> <path> <value>` (`gone` once
/// the cgroup is removed), every 50 ms. The node's `value-monitor`
/// (`tests/node/probe/monitor`: one pread per file from descriptors kept open): the
/// bash loop it replaced (a `read` builtin opening each file) spent 54 % of a CPU
/// over 60 files under TCG against its 10 %, about a third of this phase's CPU on
/// every node (issue 57).
const MONITOR: &str = "/mnt/nodemem/tools/value-monitor -watch /run/nodemem-monitor/watch -stop /run/nodemem-monitor/stop -every 50ms";

/// One owner's event on the node, with when it began (the node's clock).
struct OwnerEvent {
    what: &'static str,
    at: f64,
}

/// Runs `script` on the node and returns the node's time just before it ran.
fn owner_event(node: &mut RealNode, what: &'static str, script: &str) -> OwnerEvent {
    let (out, code) = node
        .run_within(
            &format!("echo $EPOCHREALTIME; {script}"),
            Duration::from_secs(120),
        )
        .unwrap();
    assert_eq!(code, 0, "{what}: {out}");
    let at = out.lines().next().unwrap().trim().parse().unwrap();
    OwnerEvent { what, at }
}

/// Owner events whose writes nodemem can only repair, not prevent, and the longest
/// window each may leave: a v1.37 kubelet writes memory.min/low of 0 when it starts
/// (kubepods, the burstable slice) and in a container's update on resize
/// (`generateLinuxContainerResources`), through systemd on this driver. Empty for a
/// kubelet that writes none of nodemem's files (v1.36 with its gate off): any moment
/// fails.
pub(crate) type Repaired = &'static [(&'static str, f64)];

/// Which owners' events a node's owners phase brings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Events {
    /// Every owner's: systemd's reload and a slice's property change, containerd's
    /// restart, and the kubelet's (its restart and QoS update, a resize, a container
    /// restart).
    All,
    /// The kubelet's only, for a second kubelet on a node whose first ran them all
    /// (issue 57): systemd re-applies its record and containerd restarts without
    /// either reading the kubelet, and a kubelet with its Memory QoS gate off (the
    /// v1.35 one under nodemem, as the v1.36 one before it) puts nothing of its own in
    /// the records of nodemem's values, so those events do to them what they did under
    /// the first kubelet.
    KubeletOnly,
}

/// Item 4 of issue 17: the programs that own the cgroups nodemem writes (systemd, the
/// kubelet, containerd) rewrite them on their own occasions. Every value nodemem
/// holds must read back as nodemem's through all of them; the monitor on the node
/// records each file's every change, and any moment a value was not nodemem's fails
/// the test with the file, the values and the event before it, unless it follows an
/// event in `repaired` and lasts no longer than its bound (then it is reported).
pub(crate) async fn values_survive_their_owners(
    node: &mut RealNode,
    bed: &Bed<'_>,
    installed: &Installed,
    expected: std::collections::BTreeMap<String, (String, String)>,
    repaired: Repaired,
    brought: Events,
) {
    let (driver, client, admin) = (bed.driver, &bed.client, bed.admin());
    let (policy, work) = (installed.policy.as_path(), installed.work.path());
    let agent_container = installed.agent_container();
    let agent_container = agent_container.as_str();
    // What simulate predicts for the node's pods as they are now.
    let expected_now = |node: &RealNode| {
        let name = node.name.clone();
        async move { expected_files(client, admin, policy, work, driver, &name, agent_container).await }
    };
    // memory.max is the kubelet's and changes on resize: not nodemem's to hold.
    let watched: Vec<&String> = expected
        .keys()
        .filter(|p| !p.ends_with("/memory.max"))
        .collect();
    let watch_list: String = watched.iter().map(|p| format!("{p}\n")).collect();
    std::fs::write(node.share().join("watch"), watch_list).unwrap();
    // A fresh directory and unit: a node that runs this phase twice (one kubelet after
    // another) would otherwise find the first run's stop file (the monitor would stop
    // at once) and its log, which `file:` does not truncate: the first kubelet's
    // values read as the second's (seen 2026-11-30).
    let (out, code) = node
        .run(&format!("systemctl stop nodemem-monitor 2>/dev/null; systemctl reset-failed nodemem-monitor 2>/dev/null; rm -rf /run/nodemem-monitor && mkdir -p /run/nodemem-monitor && cp /mnt/nodemem/watch /run/nodemem-monitor/watch && systemd-run --unit=nodemem-monitor --property=StandardOutput=file:/run/nodemem-monitor/log {MONITOR}"))
        .unwrap();
    assert_eq!(code, 0, "{out}");
    let started = owner_event(node, "monitor started", "sleep 2");
    let mut events = vec![started];
    let burstable_unit = match driver {
        Driver::Systemd => "kubepods-burstable.slice",
        Driver::Cgroupfs => "",
    };
    if brought == Events::All {
        events.push(owner_event(
            node,
            "systemctl daemon-reload",
            "systemctl daemon-reload && sleep 3",
        ));
        if driver == Driver::Systemd {
            // What the kubelet's periodic QoS update does to a slice (a property change),
            // without waiting for it; the real one comes below.
            events.push(owner_event(
                node,
                "a property change on the burstable slice",
                &format!(
                    "systemctl set-property --runtime {burstable_unit} TasksAccounting=yes && sleep 3"
                ),
            ));
        }
        events.push(owner_event(
            node,
            "containerd restart",
            "systemctl restart containerd && sleep 5",
        ));
    }
    let kubelet_restart = owner_event(
        node,
        "kubelet restart",
        "systemctl restart kubelet && until systemctl is-active -q kubelet; do sleep 1; done; sleep 10",
    );
    let kubelet_restarted_at = kubelet_restart.at;
    events.push(kubelet_restart);

    // An in-place resize of the workload's memory limit: the kubelet writes the pod's
    // and the container's memory.max (through systemd on this driver, which re-applies
    // the rest from its record); nodemem's memory.high for the container follows.
    let resize_at = owner_event(node, "pod resize", "true");
    let resized_at = Instant::now();
    kubectl(
        admin,
        &[
            "patch",
            "pod",
            "workload",
            "-n",
            "default",
            "--subresource",
            "resize",
            "--type=merge",
            "-p",
            r#"{"spec":{"containers":[{"name":"w","resources":{"limits":{"memory":"320Mi"}}}]}}"#,
        ],
    )
    .unwrap();
    events.push(resize_at);
    let pods: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    eventually(
        "the resize applied by the kubelet",
        Duration::from_secs(120),
        || async {
            let p = pods.get("workload").await.ok()?;
            let limit = p
                .status?
                .container_statuses?
                .first()?
                .resources
                .clone()?
                .limits?
                .get("memory")?
                .0
                .clone();
            (limit == "320Mi").then_some(())
        },
    )
    .await;
    let after_resize = expected_now(node).await;
    let changed_by_resize: Vec<String> = after_resize
        .iter()
        .filter(|(p, (_, v))| {
            expected.get(*p).map(|(_, old)| old) != Some(v) && !p.ends_with("/memory.max")
        })
        .map(|(p, _)| p.clone())
        .collect();
    assert!(
        !changed_by_resize.is_empty(),
        "the resize changes nodemem's memory.high of the container"
    );
    let resized: Vec<(&String, &String)> = changed_by_resize
        .iter()
        .map(|p| (p, &after_resize[p].1))
        .collect();
    node_values_become(node, &resized, "not nodemem's after the resize");
    eprintln!(
        "{}: after an in-place resize nodemem's new values were in place {:?} after the patch",
        node.name,
        resized_at.elapsed()
    );

    // The container restarted (its process killed): a new container, a new cgroup.
    let old_id = container_id(&pods, "workload").await;
    let restart = owner_event(node, "container restart", "pkill -KILL -x workload");
    let killed_at = Instant::now();
    events.push(restart);
    let new_id = eventually(
        "the workload container restarted",
        Duration::from_secs(120),
        || async {
            let id = container_id(&pods, "workload").await;
            (id != old_id && !id.is_empty()).then_some(id)
        },
    )
    .await;
    let restarted = expected_now(node).await;
    let new_scope: Vec<(&String, &String)> = restarted
        .iter()
        .filter(|(p, _)| p.contains(&new_id) && !p.ends_with("/memory.max"))
        .map(|(p, (_, v))| (p, v))
        .collect();
    assert!(
        !new_scope.is_empty(),
        "the new container's cgroup among {:?}",
        restarted.keys()
    );
    node_values_become(
        node,
        &new_scope,
        "not nodemem's after the container restarted",
    );
    eprintln!(
        "{}: the restarted container's values were in place {:?} after the kill",
        node.name,
        killed_at.elapsed()
    );

    // The kubelet's QoS update (`UpdateCgroups`, pkg/kubelet/cm/qos_container_manager_linux.go:
    // every QoS level's cgroup through the cgroup manager, on the systemd driver
    // systemd's SetUnitProperties) after its restart: one function that runs at the
    // kubelet's start, every minute after (`periodicQOSCgroupUpdateInterval`) and when the
    // kubelet syncs a pod whose cgroup does not exist yet (pkg/kubelet/kubelet.go
    // `SyncPod`: `if !pcm.Exists(pod) { UpdateQOSCgroups }`, before `EnsureExists`), in
    // each of v1.35, v1.36 and v1.37. Unless its minute has passed already (a slow
    // node), a new pod brings it at once instead of a wait: once the pod runs, its
    // cgroup exists, so the update has run. BestEffort: it changes no QoS level's value
    // nodemem holds.
    let (now, _) = node.run("echo $EPOCHREALTIME").unwrap();
    let since: f64 = now.trim().parse::<f64>().unwrap() - kubelet_restarted_at;
    if since < 65.0 {
        events.push(owner_event(
            node,
            "the kubelet's QoS update (a new pod's sync)",
            "true",
        ));
        start_pods(client, &[qos_update_pod(&node.name)]).await;
        eprintln!(
            "{}: the kubelet's QoS update brought by a new pod {since:.0} s after its restart (its periodic one would come at 60 s)",
            node.name
        );
    } else {
        eprintln!(
            "{}: the kubelet's periodic QoS update ran during the events ({since:.0} s since its restart)",
            node.name
        );
    }
    let end = owner_event(
        node,
        "monitor stopped",
        "touch /run/nodemem-monitor/stop && sleep 1",
    );
    let (log, code) = node.run("cat /run/nodemem-monitor/log").unwrap();
    assert_eq!(code, 0, "{log}");

    // Each file's timeline against the value nodemem holds there (the resize's new
    // values from when they were in place; a removed cgroup holds nothing).
    let mut timelines: std::collections::BTreeMap<&str, Vec<(f64, &str)>> = Default::default();
    for line in log.lines() {
        let mut parts = line.splitn(3, ' ');
        let (Some(t), Some(path), Some(v)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let Ok(t) = t.parse::<f64>() else { continue };
        timelines.entry(path).or_default().push((t, v));
    }
    assert!(
        timelines.len() >= watched.len(),
        "every watched file read: {} of {}",
        timelines.len(),
        watched.len()
    );
    let mut wrong = Vec::new();
    let mut windows = Vec::new();
    let mut longest = 0.0f64;
    for (path, changes) in &timelines {
        let Some((owner, want)) = expected.get(*path) else {
            continue;
        };
        if changed_by_resize.iter().any(|p| p == path) {
            // Held at the old value until the resize, then at the new one: checked
            // above; before the resize it must hold the old.
            continue;
        }
        for (i, (t, v)) in changes.iter().enumerate() {
            if *v == want.as_str() || *v == "gone" {
                continue;
            }
            let until = changes.get(i + 1).map_or(end.at, |(t, _)| *t);
            let before = events
                .iter()
                .rev()
                .find(|e| e.at <= *t)
                .map_or("?", |e| e.what);
            longest = longest.max(until - t);
            let line = format!(
                "{owner} {path}: {v} instead of {want} for {:.3}s, after {before}",
                until - t
            );
            match repaired.iter().find(|(what, _)| *what == before) {
                Some((_, bound)) if until - t <= *bound => windows.push(line),
                _ => wrong.push(line),
            }
        }
    }
    eprintln!(
        "{}: {} files watched through {}: longest window with a value not nodemem's: {:.3}s",
        node.name,
        timelines.len(),
        events
            .iter()
            .skip(1)
            .map(|e| e.what)
            .collect::<Vec<_>>()
            .join(", "),
        longest
    );
    if !windows.is_empty() {
        eprintln!(
            "{}: windows nodemem repaired after owners that write its files ({} of them):\n{}",
            node.name,
            windows.len(),
            windows.join("\n")
        );
    }
    assert!(
        wrong.is_empty(),
        "values nodemem holds were changed by their owners:\n{}",
        wrong.join("\n")
    );
}

/// A BestEffort pod of the phase whose sync makes the kubelet run its QoS update.
fn qos_update_pod(node: &str) -> core::Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "qos-update", "labels": {PHASE_POD: "true"}},
        "spec": {"nodeName": node, "containers": [{
            "name": "q", "image": "nodemem.local/workload:1", "imagePullPolicy": "Never",
            "args": ["-allocate", "1Mi"]
        }]}
    }))
    .unwrap()
}
