//! Phase (systemd driver): the observation on a real kernel: working sets, memory.high events and the status that reports them.

use super::*;

/// Issue 19 on the real kernel: under `enforcement: Observe` (factor 0.25: memory.high
/// would be 64Mi + 0.25 x 192Mi = 112Mi) a container holding 200Mi is reported as one
/// memory.high would throttle, with its working set as the kernel counts it and the
/// kernel's memory.peak; a container that fills page cache up to its 96Mi limit beside
/// a small working set is charged for it past its would-be memory.high of 36Mi
/// (memory.current) and not reported; nothing is written.
pub(crate) async fn observation_on_a_real_kernel(
    node: &mut RealNode,
    driver: Driver,
    client: &kube::Client,
    admin: &Path,
) {
    const MI: i64 = 1 << 20;
    let name = node.name.clone();
    let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
    let status = repolicy(
        client,
        admin,
        &name,
        r#"{"spec":{"enforcement":"Observe","memoryQoS":{"throttlingFactor":0.25}}}"#,
    )
    .await;
    let applied = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Applied")
        .unwrap();
    assert_eq!(applied.reason, "Observing", "{applied:?}");
    let dirs = start_workloads(
        client,
        &name,
        driver,
        &[
            ("grows", &["-allocate", "200Mi"], "64Mi", "256Mi"),
            // memory.high would be 16Mi + 0.25 x 80Mi = 36Mi; its page cache fills
            // its 96Mi limit, its working set is the runtime and 4Mi.
            (
                "caches",
                &["-allocate", "4Mi", "-cache", "200Mi"],
                "16Mi",
                "96Mi",
            ),
        ],
    )
    .await;
    let (grows, caches) = (dirs[0].clone(), dirs[1].clone());
    let pods: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    // The page cache is real and charged to the container (as the file is written):
    // memory.current past the would-be memory.high, the working set well under it.
    let deadline = Instant::now() + paced(Duration::from_secs(180));
    let current = loop {
        let (stat, _) = node
            .run(&format!(
                "cat {caches}/memory.current; grep -E '^(inactive_file|active_file) ' {caches}/memory.stat"
            ))
            .unwrap();
        let number = |prefix: &str| -> i64 {
            stat.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        let current: i64 = stat
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or(0);
        let inactive = number("inactive_file ");
        if current > 36 * MI && inactive >= 32 * MI && current - inactive < 36 * MI {
            break current;
        }
        assert!(
            Instant::now() < deadline,
            "the cache is not charged past the would-be memory.high (or the working set is not under it) within {:?}: {stat}",
            paced(Duration::from_secs(180))
        );
        std::thread::sleep(Duration::from_secs(1));
    };

    // The last observation seen, for the failure message.
    let last = std::cell::RefCell::new(None);
    // 13 s alone, 54 s beside three other nodes; once not within 180 s beside them.
    let observed = within(Duration::from_secs(300), || async {
        let o = configs.get(&name).await.ok()?.status?.observation?;
        *last.borrow_mut() = Some(o.clone());
        // Once it holds all it allocates (a sample may catch it on the way).
        o.worst
            .iter()
            .any(|w| w.pod == "default/grows" && w.peak_working_set >= 200 * MI)
            .then_some(o)
    })
    .await;
    let observed = observed.unwrap_or_else(|| {
        let (current, _) = node
            .run(&format!("cat {grows}/memory.current {grows}/memory.peak; grep -E '^(anon|inactive_file|active_file) ' {grows}/memory.stat"))
            .unwrap_or_default();
        panic!(
            "grows reported as throttled: not within {:?}; the last observation: {:?}; grows's memory.current, memory.peak and memory.stat: {current}",
            paced(Duration::from_secs(300)),
            last.borrow()
        )
    });
    assert!(!observed.enforced, "{observed:?}");
    let w = observed
        .worst
        .iter()
        .find(|w| w.pod == "default/grows")
        .unwrap();
    let high = 64 * MI + 48 * MI;
    assert_eq!(w.memory_high, high, "{w:?}");
    // The working set the kernel counts: the 200Mi touched, plus the runtime's own.
    assert!(
        (200 * MI..240 * MI).contains(&w.peak_working_set),
        "peak working set {} MiB: {w:?}",
        w.peak_working_set >> 20
    );
    assert!(
        w.memory_peak.is_some_and(|p| p >= w.peak_working_set),
        "memory.peak (6.1 has it) is at least the working set: {w:?}"
    );
    assert_eq!(w.max_excess_bytes, w.peak_working_set - high, "{w:?}");
    assert!(
        observed.worst.iter().all(|w| w.pod != "default/caches"),
        "page cache is no working set: {observed:?}"
    );
    // Observe wrote nothing: the kernel's defaults.
    for c in [&grows, &caches] {
        let (high, _) = node.run(&format!("cat {c}/memory.high")).unwrap();
        assert_eq!(high.trim(), "max", "{c}");
    }
    eprintln!(
        "observed on the real kernel: grows {} MiB (memory.peak {} MiB) against a would-be memory.high of 112 MiB; caches {} MiB charged, not counted",
        w.peak_working_set >> 20,
        w.memory_peak.unwrap_or(0) >> 20,
        current >> 20
    );
    for p in ["grows", "caches"] {
        pods.delete(p, &Default::default()).await.unwrap();
    }
}
