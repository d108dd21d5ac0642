//! Phase: a node rebooted comes back under its config (issue 64). Pods of every QoS
//! class run with nodemem's values; the node is rebooted as an operator does
//! (`systemctl reboot`: a clean shutdown, the same disk booted again). The kernel's
//! cgroup tree is new after a boot, so none of nodemem's values are there: the kubelet
//! starts every pod again (new sandboxes, new container IDs, the same pod UIDs), its
//! agent's pod among them, and the agent, reading its config and the state it kept on
//! the node's disk, writes every value `nodemem simulate` predicts for the pods as they
//! run after the boot. Printed: how long each step took after the reboot began.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use kube::api::Api;
use nodemem_testkit::real_node::RealNode;

use crate::{
    eventually, expected_files, node_values_become, paced, qos_pods, start_pods, Bed, Installed,
};

/// Each pod's running containers' IDs, by `pod/container`, for the pods on `node`.
async fn container_ids(client: &kube::Client, node: &str) -> BTreeMap<String, String> {
    let pods: Api<core::Pod> = Api::all(client.clone());
    let on_node = kube::api::ListParams::default().fields(&format!("spec.nodeName={node}"));
    let mut ids = BTreeMap::new();
    for pod in pods.list(&on_node).await.unwrap() {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let status = pod.status.unwrap_or_default();
        for c in status.container_statuses.unwrap_or_default() {
            if c.state.as_ref().is_some_and(|s| s.running.is_some()) {
                ids.insert(
                    format!("{name}/{}", c.name),
                    c.container_id.unwrap_or_default(),
                );
            }
        }
    }
    ids
}

/// The files and their values as `node_values_become` takes them.
fn wanted(files: &[(String, String)]) -> Vec<(&String, &String)> {
    files.iter().map(|(p, v)| (p, v)).collect()
}

/// The Node's boot as its kubelet reports it, when the Node is Ready.
async fn ready_on_boot(client: &kube::Client, node: &str) -> Option<String> {
    let nodes: Api<core::Node> = Api::all(client.clone());
    let status = nodes.get_opt(node).await.ok()??.status?;
    let ready = status
        .conditions?
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    ready.then(|| status.node_info.map(|i| i.boot_id))?
}

pub(crate) async fn it_comes_back_under_its_config(
    node: &mut RealNode,
    bed: &Bed<'_>,
    installed: &Installed,
) {
    let name = node.name.clone();
    start_pods(&bed.client, &qos_pods(&name, "rb", true)).await;
    let agent_container = installed.agent_container();
    let expected = || async {
        let files = expected_files(
            &bed.client,
            bed.admin(),
            &installed.policy,
            installed.work.path(),
            bed.driver,
            &name,
            &agent_container,
        )
        .await;
        files
            .into_iter()
            .map(|(path, (_, value))| (path, value))
            .collect::<Vec<(String, String)>>()
    };
    let before = expected().await;
    node_values_become(
        node,
        &wanted(&before),
        "files not as predicted before the reboot",
    );
    let ids_before = container_ids(&bed.client, &name).await;
    let boot_before = ready_on_boot(&bed.client, &name)
        .await
        .expect("the Node Ready before the reboot");

    let began = Instant::now();
    let boot = node.reboot(paced(Duration::from_secs(300))).unwrap();
    let back = began.elapsed();
    assert_ne!(boot, boot_before, "a new boot");
    eventually(
        "the Node Ready on its new boot",
        Duration::from_secs(240),
        async || (ready_on_boot(&bed.client, &name).await? == boot).then_some(()),
    )
    .await;
    let ready = began.elapsed();
    // Every container that ran before runs again, under a new ID.
    eventually(
        "every container started again after the reboot",
        Duration::from_secs(300),
        async || {
            let now = container_ids(&bed.client, &name).await;
            let again = ids_before
                .iter()
                .all(|(c, id)| now.get(c).is_some_and(|new| new != id));
            again.then_some(())
        },
    )
    .await;
    let running = began.elapsed();
    let after = expected().await;
    assert_eq!(
        after.len(),
        before.len(),
        "the same cgroups (new container IDs) after the reboot"
    );
    assert_ne!(after, before, "the containers' cgroups are new");
    node_values_become(
        node,
        &wanted(&after),
        "files not as predicted after the reboot",
    );
    let values = began.elapsed();
    eprintln!(
        "{name}: rebooted (systemctl reboot): the node answered again {back:.0?} after, the Node Ready on its new boot {ready:.0?}, every container running again {running:.0?}, all {} files as predicted {values:.0?} after",
        after.len()
    );
    assert!(after.len() >= 60, "only {} files checked", after.len());
}
