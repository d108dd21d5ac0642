//! What the controller's benches share: a control plane of their own with nodemem's
//! CRDs and the controller's RBAC applied by the real `kubectl`, Node objects (no
//! kubelets), and the release `nodemem controller` as a process with its own identity.
// Each bench uses part of it.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::Client;
use nodemem_testkit::binaries::repo_root;
use nodemem_testkit::clients::kubectl;
use nodemem_testkit::control_plane::Options;
use nodemem_testkit::{ControlPlane, Identity};
use serde_json::json;

pub struct Cluster {
    pub cp: ControlPlane,
    pub runtime: tokio::runtime::Runtime,
    pub client: Client,
}

impl Cluster {
    /// A control plane with the CRDs established and `deploy/controller` applied.
    pub fn start() -> Self {
        Self::start_with(&Options::default())
    }

    /// [`Cluster::start`] on an apiserver that differs from the defaults by `options`.
    pub fn start_with(options: &Options) -> Self {
        let repo = repo_root();
        let cp = ControlPlane::start_with(options).expect("control plane");
        let admin = cp.admin_kubeconfig().to_path_buf();
        let path = |p: &str| repo.join(p).display().to_string();
        kubectl(&admin, &["apply", "-f", &path("crds")]).unwrap();
        kubectl(
            &admin,
            &[
                "wait",
                "--for=condition=Established",
                "crd/nodememoryconfigs.nodemem.io",
                "crd/nodememorypolicies.nodemem.io",
            ],
        )
        .unwrap();
        kubectl(
            &admin,
            &[
                "apply",
                "-f",
                &path("deploy/namespace.yaml"),
                "-f",
                &path("deploy/controller"),
            ],
        )
        .unwrap();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let client = runtime.block_on(cp.client(&Identity::Admin)).unwrap();
        Cluster {
            cp,
            runtime,
            client,
        }
    }

    /// `nodes` Node objects `{prefix}-NNNNN` labelled `nodemem.io/pool: {pool}`, 16
    /// created at a time.
    pub fn create_nodes(&self, nodes: usize, prefix: &str, pool: &str) {
        self.runtime.block_on(async {
            let api: Api<Node> = Api::all(self.client.clone());
            futures::stream::iter(0..nodes)
                .map(|i| {
                    let api = api.clone();
                    async move {
                        let node: Node = serde_json::from_value(json!({"metadata": {
                            "name": format!("{prefix}-{i:05}"),
                            "labels": {"nodemem.io/pool": pool}}}))
                        .unwrap();
                        api.create(&PostParams::default(), &node).await.map(|_| ())
                    }
                })
                .buffer_unordered(16)
                .try_collect::<Vec<_>>()
                .await
                .unwrap();
        });
    }

    /// The release controller with the controller's identity, ticking every second,
    /// no metrics endpoint, and `extra` arguments; its log goes to `log`.
    pub fn spawn_controller(&self, extra: &[&str], log: &std::fs::File) -> Child {
        let kubeconfig = self
            .runtime
            .block_on(self.cp.kubeconfig(&Identity::Controller))
            .unwrap();
        // NODEMEM_BENCH_HEAPTRACK=file: the controller runs under heaptrack, which
        // writes its heap profile there (the resident figures are then heaptrack's).
        let mut command = match std::env::var_os("NODEMEM_BENCH_HEAPTRACK") {
            Some(out) => {
                let mut c = Command::new("heaptrack");
                c.arg("-o").arg(out).arg(env!("CARGO_BIN_EXE_nodemem"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_nodemem")),
        };
        command
            .args(["controller", "--tick-seconds", "1", "--metrics-addr", "off"])
            .args(extra)
            .env("KUBECONFIG", &kubeconfig)
            .stdout(Stdio::null())
            .stderr(log.try_clone().unwrap())
            .spawn()
            .unwrap()
    }
}

/// The spec of the config the controller writes for policy `name` with `spec`: every
/// field it writes, so that a plain client writing it costs the apiserver what the
/// controller's writes cost (server-side apply's work grows with the fields).
pub fn config_spec(name: &str, spec: &serde_json::Value) -> serde_json::Value {
    let policy: nodemem_api::NodeMemoryPolicy = serde_json::from_value(json!({
        "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
        "metadata": {"name": name}, "spec": spec}))
    .expect("a valid policy");
    let settings = policy.spec.settings;
    serde_json::to_value(nodemem_api::NodeMemoryConfigSpec {
        policy: name.to_string(),
        revision: nodemem_api::revision::revision(&settings),
        settings,
        health: policy.spec.rollout.health,
    })
    .expect("a config spec")
}

/// `nodes` configs named `{prefix}-NNNNN` with `spec`, `writers` server-side applies at
/// a time.
pub async fn plain_writes(
    configs: &Api<DynamicObject>,
    spec: &serde_json::Value,
    nodes: usize,
    prefix: &str,
    owner: Option<(&str, &str)>,
    writers: usize,
) -> Duration {
    let started = Instant::now();
    let apply = PatchParams::apply("plain-client").force();
    futures::stream::iter(0..nodes)
        .map(|i| {
            let name = format!("{prefix}-{i:05}");
            let mut metadata = json!({"name": name,
                "annotations": {"nodemem.io/spec-changed-at": "2026-11-22T10:00:00Z"}});
            if let Some((owner, uid)) = owner {
                metadata["ownerReferences"] = json!([{"apiVersion": "nodemem.io/v1alpha1",
                    "kind": "NodeMemoryPolicy", "name": owner, "uid": uid, "controller": true,
                    "blockOwnerDeletion": false}]);
            }
            let patch = json!({"apiVersion": "nodemem.io/v1alpha1",
                "kind": "NodeMemoryConfig", "metadata": metadata, "spec": spec});
            let apply = &apply;
            async move {
                configs
                    .patch(&name, apply, &Patch::Apply(patch))
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(writers)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    started.elapsed()
}

/// Removes a plain run's configs (16 at a time).
pub async fn remove_plain(configs: &Api<DynamicObject>, nodes: usize, prefix: &str) {
    futures::stream::iter(0..nodes)
        .map(|i| async move {
            configs
                .delete(&format!("{prefix}-{i:05}"), &Default::default())
                .await
                .map(|_| ())
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .unwrap_or_else(|e| panic!("removing the {prefix} configs: {e}"));
}

/// A watch of every config, returned once its initial list is done (so that no write
/// after this is missed).
pub async fn listed_config_watch(
    configs: &Api<DynamicObject>,
) -> std::pin::Pin<
    Box<
        dyn futures::Stream<
                Item = kube::runtime::watcher::Result<kube::runtime::watcher::Event<DynamicObject>>,
            > + Send,
    >,
> {
    use kube::runtime::watcher;
    let mut events = Box::pin(watcher::watcher(
        configs.clone(),
        watcher::Config::default(),
    ));
    while let Some(e) = events.next().await {
        if matches!(e, Ok(watcher::Event::InitDone)) {
            break;
        }
    }
    events
}
