//! The agents follow the controller's own image (`--agent-image-from-container`, as the
//! chart and deploy/ run it): the image is named once by an install, and a pod of the
//! chart's Deployment is where the controller reads it.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nodemem_testkit::bed::{Bed, BedSpec, Install, PoolSpec};

use crate::common::repo;

/// The chart installed with its image `nodemem:own-pod`; the bed's own controller (which
/// deploys no agents) is stopped and the binary is run as the chart's Deployment runs it,
/// with the name of one of that Deployment's pods: the agents' DaemonSet it writes
/// carries the pod's image, which the admission policy admits. Without POD_NAME, or with
/// a container the pod does not have, it exits at once and says which.
#[tokio::test]
async fn the_agents_take_the_image_of_the_controllers_own_container() {
    let spec = BedSpec {
        nodemem: nodemem_e2e::nodemem().into(),
        repo: repo(),
        pools: vec![PoolSpec::new("own", 1)],
        agent_resync_seconds: 5,
        install: Install::Chart {
            release: "nodemem".into(),
            args: ["image.repository=nodemem", "image.tag=own-pod"]
                .iter()
                .flat_map(|v| ["--set".to_string(), v.to_string()])
                .collect(),
            chart: None,
        },
        controller_args: vec![
            "--namespace=nodemem-system".into(),
            "--deployment=nodemem-controller".into(),
        ],
        pod_security_default: None,
    };
    let mut bed = Bed::start(&spec, &|_| {})
        .await
        .expect("the bed starts with the chart");
    bed.stop_controller(Duration::from_secs(5));
    // The Deployment's pods exist (nothing schedules them here): one is the pod the
    // controller reads as its own.
    let deadline = Instant::now() + Duration::from_secs(60);
    let pod = loop {
        let names = bed
            .kubectl(&[
                "get",
                "pods",
                "-n",
                "nodemem-system",
                "-l",
                "app.kubernetes.io/name=nodemem-controller",
                "-o",
                "jsonpath={.items[*].metadata.name}",
            ])
            .unwrap_or_default();
        if let Some(name) = names.split_whitespace().next() {
            break name.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "the chart's Deployment made no pod"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let kubeconfig = bed.controller_kubeconfig().await.unwrap();
    let controller = |container: &str, pod: Option<&str>| {
        let mut c = Command::new(nodemem_e2e::nodemem());
        c.args([
            "controller",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--namespace=nodemem-system",
            "--deployment=nodemem-controller",
            "--leader-elect=false",
            "--tick-seconds=1",
            "--metrics-addr=off",
            &format!("--agent-image-from-container={container}"),
        ])
        .env_remove("POD_NAME");
        if let Some(pod) = pod {
            c.env("POD_NAME", pod);
        }
        c
    };
    let said = |out: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let unset = controller("controller", None).output().unwrap();
    assert!(!unset.status.success(), "{}", said(&unset));
    assert!(
        said(&unset).contains("--agent-image-from-container controller: POD_NAME is not set"),
        "{}",
        said(&unset)
    );
    let misnamed = controller("ctrl", Some(&pod)).output().unwrap();
    assert!(!misnamed.status.success(), "{}", said(&misnamed));
    assert!(
        said(&misnamed).contains(&format!(
            "the pod {pod} has no container ctrl (its containers: controller)"
        )),
        "{}",
        said(&misnamed)
    );

    let log = bed.dir().join("own-image-controller.log");
    let mut running = controller("controller", Some(&pod))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let policy = std::fs::read_to_string(repo().join("examples/general/policy.yaml"))
        .unwrap()
        .replace("nodemem.io/pool: general", "nodemem.io/pool: own");
    let file = bed.dir().join("policy.yaml");
    std::fs::write(&file, policy).unwrap();
    bed.kubectl(&["apply", "-f", file.to_str().unwrap()])
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let image = loop {
        let image = bed.kubectl(&[
            "get",
            "daemonset",
            "nodemem-agent",
            "-n",
            "nodemem-system",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ]);
        match image {
            Ok(image) if !image.is_empty() => break image,
            _ => {}
        }
        if let Some(status) = running.try_wait().unwrap() {
            panic!(
                "the controller ended ({status}): {}",
                nodemem_testkit::process::tail(&log, 30)
            );
        }
        assert!(
            Instant::now() < deadline,
            "no agent DaemonSet: {}",
            nodemem_testkit::process::tail(&log, 30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let _ = running.kill();
    let _ = running.wait();
    assert_eq!(image, "nodemem:own-pod");
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("the agents take the image of the controller's own container"),
        "{said}"
    );
}
