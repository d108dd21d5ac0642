//! Phase: the chart's whole life on the real node (issue 41, item 2), with the real
//! helm. The deploy/ install of the phases before goes (as a user would remove it);
//! `helm install` runs the controller as the chart's Deployment on the node itself,
//! which deploys the agent and sets nodemem's values again; `helm uninstall` runs the
//! pre-delete hook as the chart's pod, which gives the node back before the release's
//! objects go. Afterwards no nodemem pod or object is left, the policies (the user's)
//! hold no finalizer, and every memory file reads what this kubelet leaves there.
//!
//! `helm install` runs the controller as the chart's Deployment on the node itself,
//! which deploys the agent and sets nodemem's values again; `helm test` runs the
//! chart's test pod (the image's `nodemem check`) on the node and it succeeds; `helm
//! uninstall` runs the pre-delete hook as the chart's pod (`--hook-of-release`: the
//! Deployment is the release's), which gives the node back before the release's objects
//! go; no nodemem pod or object is left, the policies hold no finalizer, and every
//! memory file reads what the kubelet leaves there.

use super::*;
use give_back::{all_given_back, nodemem_values};

/// The release's name and namespace, as the README installs it.
const RELEASE: &str = "nodemem";
const NAMESPACE: &str = "nodemem-system";

pub(crate) async fn helm_install_and_uninstall_leave_nothing_behind(
    node: &mut RealNode,
    bed: &Bed<'_>,
    installed: &Installed,
) {
    let admin = bed.admin();
    let repo = repo_root();
    // The deploy/ objects carry no Helm ownership: helm would refuse to take them over.
    kubectl(
        admin,
        &[
            "delete",
            "-f",
            repo.join("deploy/namespace.yaml").to_str().unwrap(),
            "-f",
            repo.join("deploy/agent").to_str().unwrap(),
            "-f",
            repo.join("deploy/controller").to_str().unwrap(),
            "--ignore-not-found",
            "--wait=true",
            "--timeout=120s",
        ],
    )
    .unwrap();

    let (repository, tag) = installed.image.rsplit_once(':').unwrap();
    let install = nodemem_testkit::clients::helm(
        admin,
        &[
            "install",
            RELEASE,
            repo.join("charts/nodemem").to_str().unwrap(),
            "-n",
            NAMESPACE,
            "--create-namespace",
            "--set",
            &format!("image.repository={repository}"),
            "--set",
            &format!("image.tag={tag}"),
            "--set",
            "controller.tickSeconds=1",
            "--wait",
            "--timeout",
            "5m",
        ],
    );
    assert!(install.is_ok(), "helm install: {install:?}");

    // The chart's controller, a pod on this node, deploys the agent (owned by its
    // Deployment, so Helm's and Argo CD's trees show it) and the policy's values return.
    let daemonsets: Api<k8s_openapi::api::apps::v1::DaemonSet> =
        Api::namespaced(bed.client.clone(), NAMESPACE);
    let owner = eventually(
        "the chart's controller deploys the agent DaemonSet",
        Duration::from_secs(120),
        || async {
            let ds = daemonsets.get_opt("nodemem-agent").await.ok()??;
            let owners = ds.metadata.owner_references.unwrap_or_default();
            owners.into_iter().find(|o| o.kind == "Deployment")
        },
    )
    .await;
    assert_eq!(owner.name, "nodemem-controller");
    let set = eventually(
        "the helm-installed agent sets nodemem's values",
        Duration::from_secs(180),
        async || {
            let (_, set) = nodemem_values(node);
            (set.len() >= 3).then_some(set)
        },
    )
    .await;
    eprintln!(
        "{}: after helm install, {} memory files read nodemem's values",
        node.name,
        set.len()
    );

    // `helm test`: the chart's test pod, run by this node's kubelet from the image,
    // asks `nodemem check` whether the controller leads and is ready.
    // (Its pod is deleted once it succeeds, so its log is not asked for: helm test's
    // phase is the pod's, Succeeded only when `nodemem check` exited 0.)
    let tested = nodemem_testkit::clients::helm(
        admin,
        &["test", RELEASE, "-n", NAMESPACE, "--timeout", "3m"],
    );
    let said = tested.unwrap_or_else(|e| panic!("helm test: {e}"));
    assert!(
        said.contains("nodemem-test-controller-leads") && said.contains("Succeeded"),
        "helm test: {said}"
    );
    eprintln!(
        "{}: helm test passed (nodemem check in the chart's test pod)",
        node.name
    );

    let started = Instant::now();
    let uninstall = nodemem_testkit::clients::helm(
        admin,
        &[
            "uninstall",
            RELEASE,
            "-n",
            NAMESPACE,
            "--wait",
            "--timeout",
            "5m",
        ],
    );
    assert!(uninstall.is_ok(), "helm uninstall: {uninstall:?}");
    eprintln!(
        "{}: helm uninstall (its hook's give-back included) took {:.1} s",
        node.name,
        started.elapsed().as_secs_f64()
    );
    nothing_is_left(node, bed).await;
}

/// No nodemem pod, config, Lease, DaemonSet or cluster-wide object is left; the
/// policies hold no finalizer; every memory file reads what the kubelet leaves there.
async fn nothing_is_left(node: &mut RealNode, bed: &Bed<'_>) {
    let pods: Api<core::Pod> = Api::namespaced(bed.client.clone(), NAMESPACE);
    let left = within(Duration::from_secs(120), || async {
        let list = pods.list(&ListParams::default()).await.ok()?;
        list.items.is_empty().then_some(())
    })
    .await;
    let listed = kubectl(bed.admin(), &["get", "pods", "-n", NAMESPACE, "-o", "wide"]);
    assert!(left.is_some(), "nodemem pods left: {listed:?}");
    let name_of = |args: &[&str]| {
        kubectl(bed.admin(), args)
            .unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"))
            .trim()
            .to_string()
    };
    for (what, args) in [
        ("NodeMemoryConfigs", &["get", "nmc", "-o", "name"][..]),
        (
            "nodemem's objects in its namespace",
            &[
                "get",
                "daemonset,deployment,lease,serviceaccount,service,role,rolebinding",
                "-n",
                NAMESPACE,
                "-l",
                "app.kubernetes.io/part-of=nodemem",
                "-o",
                "name",
            ][..],
        ),
        (
            "the controller's Lease",
            &[
                "get",
                "lease",
                "nodemem-controller",
                "-n",
                NAMESPACE,
                "--ignore-not-found",
                "-o",
                "name",
            ][..],
        ),
        (
            "the agent DaemonSet",
            &[
                "get",
                "daemonset",
                "nodemem-agent",
                "-n",
                NAMESPACE,
                "--ignore-not-found",
                "-o",
                "name",
            ][..],
        ),
        (
            "Helm releases",
            &[
                "get",
                "secret",
                "-n",
                NAMESPACE,
                "-l",
                "owner=helm",
                "-o",
                "name",
            ][..],
        ),
    ] {
        assert_eq!(name_of(args), "", "{what} left after helm uninstall");
    }
    let cluster_wide = name_of(&[
        "get",
        "clusterrole,clusterrolebinding,validatingadmissionpolicy,validatingadmissionpolicybinding",
        "-o",
        "name",
    ]);
    let ours: Vec<&str> = cluster_wide
        .lines()
        .filter(|l| l.contains("nodemem"))
        .collect();
    assert!(ours.is_empty(), "cluster-wide objects left: {ours:?}");
    let finalizers = name_of(&[
        "get",
        "nmp",
        "-o",
        "jsonpath={.items[*].metadata.finalizers}",
    ]);
    assert_eq!(finalizers, "", "policies still hold finalizers");

    let files = all_given_back(node, "helm uninstall");
    eprintln!(
        "{}: after helm uninstall no nodemem object is left and {files} memory files read what the kubelet leaves",
        node.name
    );
}
