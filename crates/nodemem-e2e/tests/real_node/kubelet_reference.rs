//! Phase: the kubelet's own Memory QoS is the reference: what it writes at the QoS
//! levels, pod slices and container scopes is what `nodemem simulate` predicts, on the
//! v1.36.3 kubelet with its two known departures and on the v1.37.2 kubelet with none.
//!
//! The node boots with the kubelet's own Memory QoS (gate `MemoryQoS`,
//! `memoryReservationPolicy: TieredReservation` where the version has it, factor 0.9)
//! and pods of every QoS class (Guaranteed; Burstable with an init container, a
//! restartable sidecar and a container without a limit; BestEffort; pod-level
//! resources) run without nodemem, and beside them three pods drawn from a seed
//! (`shapes.rs`, issue 58: one to three containers without resources, with a request, a
//! request and a limit, a limit alone or Guaranteed; an init container, a sidecar,
//! pod-level resources, a RuntimeClass with overhead; quantities in binary and decimal
//! suffixes, bytes, fractions and exponents; the seed is the commit's: every commit
//! draws new shapes and CI draws the ones a local run of that commit drew; printed,
//! `NODEMEM_SHAPES_SEED` draws it again; their first run found two classes the listed
//! pods never met: a sidecar without resources is one of the v1.36 kubelet's containers
//! without memory.high, and a decimal quantity, `88M`, is held by the kernel in whole
//! pages, so the comparison is of what the kernel holds): every memory.min/low/high/max
//! the kubelet wrote equals `nodemem simulate`'s prediction for the same Node, pods and
//! kubelet configuration, except the two places where the v1.36.3 kubelet differs from
//! its KEP and nodemem follows the v1.37 fixes (named in the test, which requires both
//! to show; docs/reference.md).

use super::*;

pub(crate) const V137_BESTEFFORT_HIGH: &str =
    "memory.high for containers with neither request nor limit";

pub(crate) const V137_KUBEPODS_LOW: &str = "kubepods memory.low";

/// Both of nodemem's v1.37 fixes, where the v1.36.3 kubelet departs.
pub(crate) const V136_DEPARTURES: &[&str] = &[V137_BESTEFFORT_HIGH, V137_KUBEPODS_LOW];

/// Which kubelet is the reference, and what it is expected to differ in.
pub(crate) struct Reference<'a> {
    /// The policy simulate predicts with (the kubelet's configuration in its words).
    pub policy: &'a str,
    /// Pods named with this tag (a second reference on the same node needs new names).
    pub tag: &'a str,
    /// Where this kubelet departs from nodemem, which follows the v1.37 fixes: each
    /// must show as a difference, and nothing else may differ. The v1.36.3 kubelet:
    /// both ([`V136_DEPARTURES`]); v1.35 under HardReservation: the BestEffort
    /// memory.high only; a v1.37 kubelet: none.
    pub departures: &'a [&'static str],
}

/// Item 3 of issue 17: the same pods on the same node with the kubelet's own Memory
/// QoS on and nodemem not installed. memory.min, memory.low and memory.high as the
/// kubelet wrote them must equal `nodemem simulate`'s prediction for every cgroup
/// (memory.max too, which is the kubelet's either way). The pods are deleted after.
/// Returns every memory.high the kubelet wrote that is not `max` (path -> value).
pub(crate) async fn the_kubelets_memory_qos_is_nodemems_prediction(
    cp: &ControlPlane,
    node: &mut RealNode,
    driver: Driver,
    client: &kube::Client,
    reference: Reference<'_>,
) -> std::collections::BTreeMap<String, String> {
    // The listed shapes, and shapes drawn from a seed beside them (issue 58).
    let seed = shapes::seed();
    let drawn = shapes::drawn_pods(&node.name, reference.tag, seed);
    eprintln!(
        "{}: {} pods drawn from seed {seed} (NODEMEM_SHAPES_SEED={seed} draws them again)",
        node.name,
        drawn.len()
    );
    shapes::overhead_class(client).await;
    let mut pods = qos_pods(&node.name, reference.tag, false);
    pods.extend(drawn.iter().cloned());
    start_pods(client, &pods).await;
    let work = tempfile::tempdir().unwrap();
    let policy = work.path().join("policy.yaml");
    std::fs::write(&policy, reference.policy).unwrap();
    let admin = cp.admin_kubeconfig();
    let expected =
        expected_files(client, admin, &policy, work.path(), driver, &node.name, "").await;
    // Containers with neither a memory request nor a limit (BestEffort, and a
    // container without resources in a pod with pod-level ones).
    let api: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    let mut unrequested = std::collections::BTreeSet::new();
    for p in &pods {
        let name = p.metadata.name.clone().unwrap();
        let spec = api.get(&name).await.unwrap().spec.unwrap();
        // Sidecars too: a restartable init container runs beside the others.
        for c in spec
            .containers
            .into_iter()
            .chain(spec.init_containers.into_iter().flatten())
        {
            let r = c.resources.unwrap_or_default();
            let has = |m: &Option<std::collections::BTreeMap<String, _>>| {
                m.as_ref().is_some_and(|m| m.contains_key("memory"))
            };
            if !has(&r.requests) && !has(&r.limits) {
                unrequested.insert(format!("default/{name}/{}", c.name));
            }
        }
    }
    let mut differences = Vec::new();
    let mut v137 = std::collections::BTreeMap::new();
    let mut throttled = std::collections::BTreeMap::new();
    let paths: Vec<&str> = expected.keys().map(String::as_str).collect();
    let read = node_read_all(node, &paths);
    for (path, (owner, predicted)) in &expected {
        let kubelet = read.get(path).cloned().unwrap_or_default();
        assert_ne!(kubelet, "<unreadable>", "{path}");
        if path.ends_with("/memory.high") && kubelet != "max" {
            throttled.insert(path.clone(), kubelet.clone());
        }
        if as_the_kernel_holds(&kubelet) == as_the_kernel_holds(predicted) {
            continue;
        }
        match v137_fix(owner, path, &kubelet, &unrequested)
            .filter(|fix| reference.departures.contains(fix))
        {
            Some(fix) => *v137.entry(fix).or_insert(0) += 1,
            None => differences.push(format!(
                "{owner}: {path}: the kubelet wrote {kubelet}, nodemem predicts {predicted}"
            )),
        }
    }
    // Only the reference pods run in `default` at this point: the phases after it
    // start from an empty namespace, this one's verdict or not (a drawn pod left
    // behind would be the next phases' too).
    if let Err(left) = remove_pods(client, &ListParams::default()).await {
        panic!("the reference pods not gone: {left:?}");
    }
    // On v1.36.3 both fixes show on this pod set; a kubelet that has them fails here,
    // and the list below goes. A v1.37 kubelet has them: any difference is one.
    let departures: std::collections::BTreeSet<_> = reference.departures.iter().copied().collect();
    assert_eq!(
        v137.keys()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
        departures,
        "the kubelet's known differences: {v137:?}"
    );
    assert!(
        expected.len() >= 40,
        "only {} files compared",
        expected.len()
    );
    assert!(
        differences.is_empty(),
        "the kubelet's own Memory QoS ({driver:?} driver) differs from nodemem's prediction:\n{}\n(the drawn pods, seed {seed}: {})",
        differences.join("\n"),
        serde_json::to_string(&drawn).unwrap()
    );
    eprintln!(
        "{}: the kubelet's own Memory QoS equals nodemem's prediction in {} files compared ({} memory.high set), except where nodemem follows the v1.37 fixes: {v137:?}",
        node.name,
        expected.len(),
        throttled.len()
    );
    throttled
}

/// The places where the node's v1.36.3 kubelet differs from its own KEP and nodemem
/// follows the v1.37 fixes (crates/nodemem-model/src/values/memory_qos.rs, docs/reference.md):
/// the v1.36 kubelet skips memory.high when request == limit, 0 == 0 included, so
/// containers without memory resources get none (the KEP gives them
/// `factor x allocatable`); and it sets no memory.low on kubepods, which caps the
/// burstable slice's memory.low to 0 (memory.low is bounded by the parent's).
fn v137_fix(
    owner: &str,
    path: &str,
    kubelet: &str,
    unrequested: &std::collections::BTreeSet<String>,
) -> Option<&'static str> {
    if path.ends_with("/memory.high") && kubelet == "max" && unrequested.contains(owner) {
        return Some(V137_BESTEFFORT_HIGH);
    }
    if owner == "kubepods" && path.ends_with("/memory.low") && kubelet == "0" {
        return Some(V137_KUBEPODS_LOW);
    }
    None
}
