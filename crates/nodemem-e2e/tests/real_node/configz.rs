//! The kubelet's own word as the oracle of what nodemem reads of it (issue 58): for each
//! layout a kubelet is started with on the nodes nodemem meets, the kubelet restarted
//! with it, its `/configz` (the configuration it runs: file, drop-ins, flags and its
//! defaults) is held against what nodemem reads (`nodemem agent --print-kubelet`, run
//! in the agent's own container, with its privileges and its view of the host), field
//! by field, for every field nodemem uses. Run on each kubelet version of the bed.
//!
//! The layouts (docs/operations.md, "Managed clusters"):
//! - `file`: `--config` only, YAML (kubeadm);
//! - `flags`: no file at all, flags only (no `evictionHard`: the kubelet's default
//!   threshold comes with a `--config` file only, `cmd/kubelet/app/server.go`
//!   `loadConfigFile`);
//! - `config-dir`: `--config-dir` only, its JSON drop-ins in the kubelet's order;
//! - `json-file-and-drop-ins`: a JSON file and JSON drop-ins, as EKS's AL2023 nodeadm
//!   writes them (a percentage threshold);
//! - `file-and-flags`: a file with flags over it, as AKS starts its kubelet.
//!
//! `/configz` is read on the node (`tests/node/probe/configz`): the bed's control plane
//! cannot reach the node's kubelet port, so the apiserver's node proxy is not the way.
//!
//! The kubelet restarted with five layouts in turn (a YAML `--config` only; flags only,
//! no file and no threshold; `--config-dir` only with JSON drop-ins; a JSON file with
//! JSON drop-ins and a percentage threshold, as EKS; a file with `--eviction-hard` and
//! `--kube-reserved` over it, as AKS), each setting the fields nodemem reads to values
//! of its own: the kubelet's `/configz` (read on the node by `tests/node/probe/configz`
//! with the node's client certificate: the control plane cannot reach the node's
//! kubelet port) and `nodemem agent --print-kubelet -o json` run in the agent's
//! container (`ctr tasks exec`: the agent's image, user and capabilities) agree on
//! every field nodemem uses, and the file and drop-ins nodemem names are the layout's;
//! the kubelet as installed again after, Ready.

use super::*;

/// Where the layouts' files go on the node (removed at the end).
const LAYOUT_DIR: &str = "/etc/nodemem-layout";
/// What the node's kubelet arguments name for its configuration, replaced per layout.
const INSTALLED: &str =
    "--config=/var/lib/kubelet/config.yaml --config-dir=/etc/kubernetes/kubelet.conf.d";

/// A way the kubelet is started: its configuration arguments and the files they name.
struct Layout {
    name: &'static str,
    args: String,
    /// (path under [`LAYOUT_DIR`], contents).
    files: Vec<(&'static str, String)>,
    /// The `memory.available` threshold the kubelet runs with it: /configz must say
    /// it, or the kubelet asked is not the layout's.
    threshold: Option<&'static str>,
}

/// The layouts, each built from the configuration the node's kubelet runs now (`base`,
/// its `--config` file as JSON), so that the kubelet runs the same node in each: same
/// driver, runtime, certificates and Memory QoS gate. Each sets the fields nodemem
/// reads to values of its own, so that a field read from the wrong place shows.
fn layouts(base: &Value) -> Vec<Layout> {
    let with = |patch: Value| {
        let mut config = base.clone();
        merge(&mut config, &patch);
        config
    };
    let yaml = |v: &Value| serde_yaml::to_string(v).unwrap();
    let json = |v: &Value| serde_json::to_string_pretty(v).unwrap();
    // A drop-in is a KubeletConfiguration of its own (the kubelet decodes each).
    let drop_in = |patch: Value| {
        let mut doc = json!({
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
        });
        merge(&mut doc, &patch);
        json(&doc)
    };
    let driver = base["cgroupDriver"]
        .as_str()
        .unwrap_or("cgroupfs")
        .to_string();
    let gate = base["featureGates"]["MemoryQoS"].as_bool();
    // The flags for what the base file sets that the kubelet needs to run the node.
    let mut flags = vec![
        format!("--cgroup-driver={driver}"),
        "--container-runtime-endpoint=unix:///run/containerd/containerd.sock".to_string(),
        "--client-ca-file=/etc/kubernetes/pki/ca.crt".into(),
        "--anonymous-auth=false".into(),
        "--authentication-token-webhook=false".into(),
        "--authorization-mode=AlwaysAllow".into(),
        "--fail-swap-on=false".into(),
        "--rotate-certificates=false".into(),
        "--serialize-image-pulls=false".into(),
        "--resolv-conf=/etc/resolv.conf".into(),
        "--image-gc-high-threshold=100".into(),
        "--image-gc-low-threshold=99".into(),
    ];
    if let Some(gate) = gate {
        flags.push(format!("--feature-gates=MemoryQoS={gate}"));
    }
    let low_disk = json!({"nodefs.available": "1%", "imagefs.available": "1%"});
    let eviction = |memory: &str| {
        let mut e = low_disk.clone();
        e["memory.available"] = json!(memory);
        e
    };
    vec![
        Layout {
            name: "file",
            args: format!("--config={LAYOUT_DIR}/config.yaml"),
            threshold: Some("150Mi"),
            files: vec![(
                "config.yaml",
                yaml(&with(json!({
                    "evictionHard": eviction("150Mi"),
                    "kubeReserved": {"memory": "64Mi"},
                }))),
            )],
        },
        Layout {
            name: "flags",
            threshold: None,
            args: format!(
                "{} --kube-reserved=memory=48Mi --system-reserved=memory=32Mi",
                flags.join(" ")
            ),
            files: vec![],
        },
        Layout {
            name: "config-dir",
            threshold: Some("250Mi"),
            args: format!("--config-dir={LAYOUT_DIR}/conf.d"),
            files: vec![
                ("conf.d/10-node.conf", json(base)),
                (
                    "conf.d/20-eviction.conf",
                    drop_in(json!({"evictionHard": eviction("250Mi"), "systemReserved": {"memory": "40Mi"}})),
                ),
            ],
        },
        Layout {
            name: "json-file-and-drop-ins",
            threshold: Some("5%"),
            args: format!("--config={LAYOUT_DIR}/config.json --config-dir={LAYOUT_DIR}/conf.d"),
            files: vec![
                (
                    "config.json",
                    json(&with(json!({"evictionHard": eviction("120Mi")}))),
                ),
                (
                    "conf.d/40-eks.conf",
                    drop_in(json!({"evictionHard": eviction("5%"), "systemReserved": {"memory": "56Mi"}})),
                ),
            ],
        },
        Layout {
            name: "file-and-flags",
            threshold: Some("180Mi"),
            args: format!(
                "--config={LAYOUT_DIR}/config.yaml --eviction-hard=memory.available<180Mi,nodefs.available<1%,imagefs.available<1% --kube-reserved=memory=80Mi"
            ),
            files: vec![(
                "config.yaml",
                yaml(&with(json!({
                    "evictionHard": eviction("150Mi"),
                    "kubeReserved": {"memory": "64Mi"},
                }))),
            )],
        },
    ]
}

/// Merges `patch` into `base` (objects key by key, anything else replaced).
fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, p) => *b = p.clone(),
    }
}

/// Every layout on this node's kubelet (`version`, as the Node reports it), then the
/// kubelet as it was, Ready again, whatever happened.
pub(crate) async fn nodemem_reads_what_the_kubelet_runs(
    node: &mut RealNode,
    bed: &Bed<'_>,
    version: &str,
) {
    use futures::FutureExt;
    let original = node_text(node, "/etc/default/kubelet");
    let outcome = std::panic::AssertUnwindSafe(each_layout(node, bed, version, &original))
        .catch_unwind()
        .await;
    restart_with(node, &original, &[]);
    let before = node_clock(node);
    node_ready_after_restart(node, &bed.client, before).await;
    run_ok(node, &format!("rm -rf {LAYOUT_DIR}"));
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn each_layout(node: &mut RealNode, bed: &Bed<'_>, version: &str, original: &str) {
    assert!(
        original.contains(INSTALLED),
        "the node's kubelet arguments name {INSTALLED}: {original}"
    );
    let base: Value = serde_json::from_str(&node_text(node, "/var/lib/kubelet/config.yaml"))
        .expect("the bed writes the kubelet's file as JSON");
    let mut differences = Vec::new();
    for layout in layouts(&base) {
        let args = original.replace(INSTALLED, &layout.args);
        restart_with(node, &args, &layout.files);
        let configz = configz(node, layout.name);
        let read = print_kubelet(node, bed, version, layout.name).await;
        let configuration = &read["configuration"];
        let runs = normalized(THRESHOLD.of(&configz["kubeletconfig"]));
        assert_eq!(
            runs,
            normalized(layout.threshold.map(|t| json!(t)).as_ref()),
            "{}: the kubelet's /configz is not the layout's: {configz}",
            layout.name
        );
        let before = differences.len();
        for field in FIELDS {
            let kubelets = normalized(field.of(&configz["kubeletconfig"]));
            let nodemems = normalized(field.of(configuration));
            if kubelets != nodemems {
                differences.push(format!(
                    "{}: {}: the kubelet runs {kubelets:?}, nodemem reads {nodemems:?}",
                    layout.name, field.name
                ));
            }
        }
        eprintln!(
            "{}: layout {}: nodemem read {} ({} drop-ins, {} flags); {} of {} fields differ from /configz (the threshold {runs:?})",
            node.name,
            layout.name,
            read["config"],
            read["dropIns"].as_array().map_or(0, Vec::len),
            read["flags"].as_array().map_or(0, Vec::len),
            differences.len() - before,
            FIELDS.len(),
        );
        // Where it read from is the layout's (a field equal by chance from the wrong
        // file does not pass).
        let config = read["config"].as_str().unwrap_or("");
        let expected_config = layout
            .files
            .iter()
            .map(|(path, _)| *path)
            .find(|p| !p.starts_with("conf.d/"))
            .map(|p| format!("{LAYOUT_DIR}/{p}"));
        assert_eq!(
            (!config.is_empty()).then(|| config.to_string()),
            expected_config,
            "{}: the file nodemem read: {read}",
            layout.name
        );
        let drop_ins: Vec<String> = layout
            .files
            .iter()
            .filter(|(p, _)| p.starts_with("conf.d/"))
            .map(|(p, _)| format!("{LAYOUT_DIR}/{p}"))
            .collect();
        assert_eq!(
            read["dropIns"],
            json!(drop_ins),
            "{}: the drop-ins nodemem read: {read}",
            layout.name
        );
    }
    assert!(
        differences.is_empty(),
        "nodemem reads the kubelet otherwise than its /configz says:\n{}",
        differences.join("\n")
    );
}

/// A field nodemem uses, by its path in the kubelet's configuration.
struct Field {
    name: &'static str,
    path: &'static [&'static str],
}

impl Field {
    fn of<'a>(&self, config: &'a Value) -> Option<&'a Value> {
        self.path
            .iter()
            .try_fold(config, |v, key| v.get(key))
            .filter(|v| !v.is_null())
    }
}

const THRESHOLD: Field = Field {
    name: "evictionHard.memory.available",
    path: &["evictionHard", "memory.available"],
};

const FIELDS: &[Field] = &[
    Field {
        name: "featureGates.MemoryQoS",
        path: &["featureGates", "MemoryQoS"],
    },
    Field {
        name: "memoryThrottlingFactor",
        path: &["memoryThrottlingFactor"],
    },
    Field {
        name: "memoryReservationPolicy",
        path: &["memoryReservationPolicy"],
    },
    Field {
        name: "memoryManagerPolicy",
        path: &["memoryManagerPolicy"],
    },
    Field {
        name: "reservedMemory",
        path: &["reservedMemory"],
    },
    Field {
        name: "cgroupDriver",
        path: &["cgroupDriver"],
    },
    Field {
        name: "kubeReserved.memory",
        path: &["kubeReserved", "memory"],
    },
    Field {
        name: "systemReserved.memory",
        path: &["systemReserved", "memory"],
    },
    THRESHOLD,
];

/// A value as compared: a quantity as its bytes, a percentage as its number, an empty
/// list as none (the kubelet prints an empty `reservedMemory` as absent or `[]` by
/// version), anything else as written.
fn normalized(v: Option<&Value>) -> Option<String> {
    let v = v?;
    match v {
        Value::Array(a) if a.is_empty() => None,
        Value::String(s) => Some(match s.strip_suffix('%') {
            Some(p) => format!("{}%", p.parse::<f64>().map_or(s.clone(), |p| p.to_string())),
            None => nodemem_model::quantity::Quantity::parse(s)
                .map_or(s.clone(), |q| q.value().to_string()),
        }),
        other => Some(other.to_string()),
    }
}

/// Writes `files` under [`LAYOUT_DIR`] and the unit's arguments, restarts the kubelet
/// (its start limit reset first: six restarts in a phase are not a crash loop).
fn restart_with(node: &mut RealNode, default_kubelet: &str, files: &[(&str, String)]) {
    let share = node.share().join("layout");
    let _ = std::fs::remove_dir_all(&share);
    for (path, text) in files {
        let at = share.join(path);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(at, text).unwrap();
    }
    std::fs::create_dir_all(&share).unwrap();
    std::fs::write(node.share().join("kubelet.default"), default_kubelet).unwrap();
    let (out, code) = node
        .run_within(
            &format!("rm -rf {LAYOUT_DIR} && cp -r /mnt/nodemem/layout {LAYOUT_DIR} && cp /mnt/nodemem/kubelet.default /etc/default/kubelet && systemctl reset-failed kubelet; systemctl restart kubelet"),
            Duration::from_secs(120),
        )
        .unwrap();
    assert_eq!(code, 0, "{out}");
}

/// The kubelet's `/configz` once its server answers (the restarted kubelet's: the
/// restart returned after the old one stopped).
fn configz(node: &mut RealNode, layout: &str) -> Value {
    let (out, code) = node
        .run_within(
            "for i in $(seq 1 120); do if out=$(/mnt/nodemem/tools/kubelet-configz 2>&1); then echo \"$out\"; exit 0; fi; sleep 1; done; echo \"$out\"; systemctl status kubelet --no-pager | tail -n 20; exit 1",
            Duration::from_secs(180),
        )
        .unwrap();
    assert_eq!(
        code, 0,
        "{layout}: the kubelet's /configz did not answer: {out}"
    );
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{layout}: /configz: {e}: {out}"))
}

/// `nodemem agent --print-kubelet -o json` in the agent's container on the node (the
/// agent's image, user and capabilities: what the agent itself can read).
async fn print_kubelet(node: &mut RealNode, bed: &Bed<'_>, version: &str, layout: &str) -> Value {
    let container = agent_container_id(bed, &node.name).await;
    let (out, code) = node
        .run(&format!(
            "ctr -n k8s.io tasks exec --exec-id print-kubelet-$$ {container} /nodemem agent --print-kubelet --proc-root=/host/proc --kubelet-version={version} -o json"
        ))
        .unwrap();
    assert_eq!(code, 0, "{layout}: nodemem agent --print-kubelet: {out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{layout}: --print-kubelet: {e}: {out}"))
}

/// The agent container's ID on `node` (containerd's, from the pod's status).
async fn agent_container_id(bed: &Bed<'_>, node: &str) -> String {
    let pods: Api<core::Pod> = Api::namespaced(bed.client.clone(), "nodemem-system");
    let listed = ListParams::default().labels("app.kubernetes.io/name=nodemem-agent");
    let list = pods.list(&listed).await.expect("the agent's pods listed");
    list.items
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter_map(|p| p.status?.container_statuses)
        .flatten()
        .find(|c| c.name == "agent")
        .and_then(|c| c.container_id)
        .and_then(|id| id.strip_prefix("containerd://").map(str::to_string))
        .unwrap_or_else(|| panic!("no agent container on {node}"))
}

fn node_text(node: &mut RealNode, path: &str) -> String {
    let (out, code) = node.run(&format!("cat {path}")).unwrap();
    assert_eq!(code, 0, "{path}: {out}");
    out
}
