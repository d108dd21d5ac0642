//! Phase: an agent whose image the kubelet cannot pull is named on its policy (issue
//! 41, item 3), in the real kubelet's words. The controller is started again with an
//! agent image no registry serves (as a typo in the chart's `image.tag` would): its
//! DaemonSet takes it, the kubelet's pod for the node waits in
//! ErrImagePull/ImagePullBackOff and the policy says `AgentsBlocked=True` with that
//! reason and the node, long before any progress deadline; the controller started with
//! the right image again, the agent runs again and the policy says nothing keeps it.
//! (An image set on the DaemonSet by hand no longer shows this: the controller applies
//! its own DaemonSet again at once.)

use super::*;

pub(crate) async fn an_agent_that_cannot_pull_is_named_on_its_policy(
    node: &mut RealNode,
    bed: &Bed<'_>,
    installed: &mut Installed,
) {
    let image = installed.image.clone();
    let mut set_image = |image: &str| {
        let mut args = installed.controller.args().to_vec();
        let at = args
            .iter()
            .position(|a| a == "--agent-image")
            .expect("the controller runs with --agent-image");
        args[at + 1] = image.to_string();
        // As `helm upgrade --set image.tag=...` would: the admission policy's image
        // with the controller's (otherwise the policy refuses the DaemonSet, and the
        // kubelet never meets the image).
        nodemem_testkit::admission::write_agent_admission(bed.admin(), "nodemem-system", &args)
            .unwrap();
        installed.controller.stop(Duration::from_secs(10));
        installed
            .controller
            .start_again_with(args)
            .expect("the controller starts again");
    };
    let policies: Api<nodemem_api::NodeMemoryPolicy> = Api::all(bed.client.clone());
    let blocked = async |truth: &str| {
        let p = policies.get("real").await.ok()?;
        p.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "AgentsBlocked" && c.status == truth)
    };
    let started = Instant::now();
    set_image("nodemem.local/nodemem:no-such-tag");
    let said = within(Duration::from_secs(120), || blocked("True")).await;
    let said = said.unwrap_or_else(|| {
        panic!(
            "no AgentsBlocked=True on the policy; pods:\n{}",
            kubectl(bed.admin(), &["get", "pods", "-A", "-o", "wide"]).unwrap_or_default()
        )
    });
    assert!(
        ["ErrImagePull", "ImagePullBackOff"].contains(&said.reason.as_str()),
        "{said:?}"
    );
    assert!(said.message.contains(&node.name), "{said:?}");
    eprintln!(
        "{}: AgentsBlocked {} after {:.1} s: {}",
        node.name,
        said.reason,
        started.elapsed().as_secs_f64(),
        said.message
    );
    set_image(&image);
    let cleared = within(Duration::from_secs(180), || blocked("False")).await;
    assert!(
        cleared.is_some(),
        "AgentsBlocked did not clear with the image set back"
    );
    // The agent runs again before the next phase needs it.
    let pods: Api<core::Pod> = Api::namespaced(bed.client.clone(), "nodemem-system");
    let agents = ListParams::default().labels("app.kubernetes.io/name=nodemem-agent");
    let ready = within(Duration::from_secs(180), || async {
        let list = pods.list(&agents).await.ok()?;
        list.items.into_iter().find_map(|p| {
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let own = p
                .spec
                .as_ref()
                .is_some_and(|s| s.containers[0].image.as_deref() == Some(image.as_str()));
            (ready && own && p.metadata.deletion_timestamp.is_none()).then(|| {
                (
                    p.metadata.name.clone().unwrap_or_default(),
                    p.status.and_then(|s| s.pod_ip).unwrap_or_default(),
                )
            })
        })
    })
    .await;
    let (pod, ip) = ready.expect("the agent did not run again with its image");
    // The next phases find the agent's new pod.
    installed.agent_pod = pod;
    installed.agent_ip = ip;
}
