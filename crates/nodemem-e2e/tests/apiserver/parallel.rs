//! The harness itself: two control planes side by side are separate clusters, and
//! dropping one stops its processes and removes its directory.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use nodemem_testkit::{ControlPlane, Identity};
use serde_json::json;

#[tokio::test]
async fn two_control_planes_run_in_parallel_and_tear_down() {
    let handles: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(ControlPlane::start))
        .collect();
    let planes: Vec<ControlPlane> = handles
        .into_iter()
        .map(|h| h.join().unwrap().expect("control plane starts"))
        .collect();
    assert_ne!(planes[0].server, planes[1].server);

    let a: Api<Namespace> = Api::all(planes[0].client(&Identity::Admin).await.unwrap());
    let b: Api<Namespace> = Api::all(planes[1].client(&Identity::Admin).await.unwrap());
    a.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "only-in-a"}})).unwrap(),
    )
    .await
    .unwrap();
    assert!(a.get_opt("only-in-a").await.unwrap().is_some());
    assert!(
        b.get_opt("only-in-a").await.unwrap().is_none(),
        "separate etcd"
    );

    let dirs: Vec<_> = planes.iter().map(|p| p.dir().to_path_buf()).collect();
    let pids: Vec<Vec<u32>> = planes.iter().map(|p| p.pids()).collect();
    drop(planes);
    for d in dirs {
        assert!(!d.exists(), "{} removed", d.display());
    }
    for pid in pids.into_iter().flatten() {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} stopped"
        );
    }
}
