//! Phase (systemd driver): workload classes on the real node (issue 63): what each
//! class's pods run (under NRI, from their creation on), each class's containers
//! observed apart, and a pod moved to another class by its annotation.

use super::*;

/// The phase's classes annotation.
const CLASS: &str = "nodemem.io/class";

/// The pool's policy with two classes beside its own settings (factor 0.9,
/// TieredReservation): `service` without memory.high, `batch` throttled at half the
/// headroom without protection.
const CLASSES_POLICY: &str = "apiVersion: nodemem.io/v1alpha1
kind: NodeMemoryPolicy
metadata:
  name: real
spec:
  nodeSelector:
    matchLabels:
      nodemem.io/pool: real
  memoryQoS:
    throttlingFactor: 0.9
    reservationPolicy: TieredReservation
  enforcement: Agent
  classes:
  - name: service
    memoryHigh: None
  - name: batch
    throttlingFactor: 0.5
    protection: None
  rollout:
    minReadySeconds: 0
";

/// A Burstable workload pod of the phase (64Mi request, 256Mi limit) in `class`.
fn classed_pod(node: &str, name: &str, class: Option<&str>) -> core::Pod {
    let mut pod = workload_pod(node, name, &["-allocate", "8Mi"], "64Mi", "256Mi");
    if let Some(class) = class {
        pod.metadata.annotations = Some([(CLASS.to_string(), class.to_string())].into());
    }
    pod
}

/// `pod` of another QoS class: Guaranteed (64Mi and [`GUARANTEED_CPU`], requests equal
/// to limits: at 10m its `runc init` took two minutes to start it under TCG) or, with
/// `None`, BestEffort (no resources).
fn of_qos(mut pod: core::Pod, guaranteed: Option<()>) -> core::Pod {
    let resources = guaranteed.map(|()| {
        serde_json::from_value(
            json!({"requests": {"memory": "64Mi", "cpu": GUARANTEED_CPU},
            "limits": {"memory": "64Mi", "cpu": GUARANTEED_CPU}}),
        )
        .unwrap()
    });
    if let Some(spec) = pod.spec.as_mut() {
        spec.containers[0].resources = resources;
    }
    pod
}

/// The phase's pods: a Burstable pod in each class and in the pool's settings, a
/// BestEffort one in `batch` and a Guaranteed one in `service`.
const PODS: [&str; 5] = [
    "classes-svc",
    "classes-etl",
    "classes-api",
    "classes-be",
    "classes-gu",
];

/// The files of `owner` (a pod `default/NAME` or its container `default/NAME/w`) among
/// `expected`, with their predicted values.
fn files_of(
    expected: &std::collections::BTreeMap<String, (String, String)>,
    owner: &str,
) -> std::collections::BTreeMap<String, String> {
    expected
        .iter()
        .filter(|(_, (o, _))| o == owner)
        .map(|(path, (_, value))| {
            let file = path.rsplit('/').next().unwrap_or_default().to_string();
            (file, value.clone())
        })
        .collect()
}

/// Three classes on one pool (a service class, a batch class, the pool's own) with pods
/// of each QoS class (a BestEffort batch pod, a Guaranteed service pod): each pod's
/// cgroups read what `nodemem simulate` predicts for the same policy, Node and pods
/// (the QoS levels too: the batch pods' requests left out of their sums), and
/// those predictions are each class's formula (no memory.high for the service, 0.5 of
/// the headroom for the batch pod, 0.9 for the pool's). Then the batch pod's
/// annotation is edited to `service`: its values move, the other pods' do not, and
/// the node's `status.classes` counts the pods per class. The phase's pods go and the
/// installed policy is applied again at the end.
pub(crate) async fn classes_on_the_real_node(
    node: &mut RealNode,
    bed: &Bed<'_>,
    installed: &Installed,
) {
    const MI: u64 = 1 << 20;
    let name = node.name.clone();
    let (client, admin) = (&bed.client, bed.admin());
    let work = installed.work.path();
    let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
    let policy = work.join("policy-classes.yaml");
    std::fs::write(&policy, CLASSES_POLICY).unwrap();
    let before = configs.get(&name).await.unwrap().spec.revision;
    kubectl(admin, &["apply", "-f", policy.to_str().unwrap()]).unwrap();
    config_applied(
        client,
        admin,
        &name,
        Some(&before),
        Duration::from_secs(180),
    )
    .await;
    start_pods(
        client,
        &[
            classed_pod(&name, "classes-svc", Some("service")),
            classed_pod(&name, "classes-etl", Some("batch")),
            classed_pod(&name, "classes-api", None),
            of_qos(classed_pod(&name, "classes-be", Some("batch")), None),
            of_qos(classed_pod(&name, "classes-gu", Some("service")), Some(())),
        ],
    )
    .await;
    let agent = installed.agent_container();
    let expected = expected_files(client, admin, &policy, work, bed.driver, &name, &agent).await;
    // What simulate predicts is each class's formula, on its container `w`.
    let high = |pod: &str| files_of(&expected, &format!("default/{pod}/w"))["memory.high"].clone();
    let low = |pod: &str| files_of(&expected, &format!("default/{pod}"))["memory.low"].clone();
    let page = |bytes: u64| (bytes / PAGE * PAGE).to_string();
    assert_eq!(high("classes-svc"), "max", "service: no memory.high");
    assert_eq!(
        high("classes-etl"),
        page(64 * MI + 96 * MI),
        "batch: 64Mi + 0.5 x 192Mi"
    );
    assert_eq!(
        high("classes-api"),
        page(64 * MI + (0.9 * (192 * MI) as f64) as u64),
        "the pool's: 64Mi + 0.9 x 192Mi"
    );
    assert_eq!(low("classes-svc"), (64 * MI).to_string());
    assert_eq!(low("classes-etl"), "0", "batch: no protection");
    // Started under NRI (this phase runs before the reaction phase turns it off): each
    // container's OCI spec, what its process started under, carried its class's
    // memory.high, not the pool's.
    let path = configs
        .get(&name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.node?.container_values);
    assert_eq!(
        path.as_ref().map(|p| p.path.as_str()),
        Some("NRI"),
        "{path:?}"
    );
    let pods: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    for pod in ["classes-etl", "classes-api"] {
        let id = container_id(&pods, pod).await;
        let unified = super::reaction::spec_unified(node, &id);
        assert_eq!(
            unified.get("memory.high"),
            Some(&high(pod)),
            "{pod}'s OCI spec at creation: {unified:?}"
        );
    }
    let svc = super::reaction::spec_unified(node, &container_id(&pods, "classes-svc").await);
    assert!(
        svc.get("memory.high").is_none_or(|h| h == "max"),
        "the service class sets no memory.high, at creation neither: {svc:?}"
    );
    let wanted: Vec<(&String, &String)> = expected.iter().map(|(p, (_, v))| (p, v)).collect();
    node_values_become(
        node,
        &wanted,
        "files that do not read what simulate predicts under classes",
    );
    let counted = eventually(
        "status.classes counts two pods in each class",
        Duration::from_secs(60),
        async || {
            let status = configs.get(&name).await.ok()?.status?;
            let counts: Vec<(String, i64)> = status
                .classes
                .iter()
                .map(|c| (c.name.clone(), c.pods))
                .collect();
            (counts == [("batch".to_string(), 2), ("service".to_string(), 2)]).then_some(counts)
        },
    )
    .await;
    eprintln!("status.classes: {counted:?}");
    // Observed on the real kernel, each class with a memory.high of its own apart:
    // the batch pods' containers (factor 0.5; BestEffort's towards the allocatable) and
    // the Burstable service pod's (none; the Guaranteed one has no room for a
    // memory.high) in their classes' tallies, the pool's pod in the pool's.
    let observed = eventually(
        "status.observation counts each class's container apart",
        Duration::from_secs(90),
        async || {
            let o = configs.get(&name).await.ok()?.status?.observation?;
            let classes: Vec<(String, i32)> = o
                .classes
                .iter()
                .map(|c| (c.name.clone(), c.containers))
                .collect();
            let apart = classes == [("batch".to_string(), 2), ("service".to_string(), 1)];
            (apart && o.containers >= 1).then_some((o.containers, classes))
        },
    )
    .await;
    eprintln!("status.observation: pool containers and classes {observed:?}");

    // The batch pod moves to the service class by its annotation alone.
    kubectl(
        admin,
        &[
            "annotate",
            "pod",
            "classes-etl",
            &format!("{CLASS}=service"),
            "--overwrite",
        ],
    )
    .unwrap();
    let moved = expected_files(client, admin, &policy, work, bed.driver, &name, &agent).await;
    assert_eq!(
        files_of(&moved, "default/classes-etl/w")["memory.high"],
        "max",
        "the moved pod's container: the service class's"
    );
    for other in [
        "default/classes-svc",
        "default/classes-svc/w",
        "default/classes-api",
        "default/classes-api/w",
        "default/classes-be",
        "default/classes-be/w",
        "default/classes-gu",
        "default/classes-gu/w",
    ] {
        assert_eq!(
            files_of(&moved, other),
            files_of(&expected, other),
            "{other} did not move"
        );
    }
    let wanted: Vec<(&String, &String)> = moved.iter().map(|(p, (_, v))| (p, v)).collect();
    node_values_become(
        node,
        &wanted,
        "files that do not read what simulate predicts after the annotation edit",
    );

    // The phase's pods go (the observation phase after it counts the node's
    // containers), and the installed policy is back for the phases after this one.
    for pod in PODS {
        let named = ListParams::default().fields(&format!("metadata.name={pod}"));
        super::remove_pods_or_say(bed, &named).await;
    }
    let classes_revision = configs.get(&name).await.unwrap().spec.revision;
    kubectl(admin, &["apply", "-f", installed.policy.to_str().unwrap()]).unwrap();
    config_applied(
        client,
        admin,
        &name,
        Some(&classes_revision),
        Duration::from_secs(180),
    )
    .await;
}
