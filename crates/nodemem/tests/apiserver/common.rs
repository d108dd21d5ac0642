//! Shared setup: the process-wide control plane with nodemem's CRDs installed.

use std::path::PathBuf;
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::Client;
use nodemem_api::NodeMemoryPolicy;
use nodemem_testkit::{ControlPlane, Identity};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The shared control plane, CRDs from `crds/` installed and Established.
pub fn cluster() -> &'static ControlPlane {
    static READY: OnceLock<Result<Vec<String>, String>> = OnceLock::new();
    let cp = ControlPlane::shared().expect("control plane");
    let installed = READY.get_or_init(|| {
        // A private runtime: every #[tokio::test] has its own, and clients must not
        // outlive the runtime they were made on.
        std::thread::spawn(move || {
            tokio::runtime::Runtime::new()
                .expect("runtime")
                .block_on(nodemem_testkit::crds::install_dir(cp, &repo().join("crds")))
                .map_err(|e| e.to_string())
        })
        .join()
        .expect("CRD install thread")
    });
    installed.as_ref().expect("CRDs install");
    cp
}

pub async fn admin() -> Client {
    cluster()
        .client(&Identity::Admin)
        .await
        .expect("admin client")
}

pub fn policies(client: Client) -> Api<DynamicObject> {
    Api::all_with(client, &ApiResource::erase::<NodeMemoryPolicy>(&()))
}

/// A DynamicObject from JSON.
pub fn object(value: serde_json::Value) -> DynamicObject {
    serde_json::from_value(value).expect("a Kubernetes object")
}

/// Creates a pod (see `nodemem_testkit::clients::create_pod`); a failure fails the test.
pub async fn create_pod(api: &Api<Pod>, pod: serde_json::Value) -> Pod {
    let pod: Pod = serde_json::from_value(pod).unwrap();
    nodemem_testkit::clients::create_pod(api, &pod)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}
