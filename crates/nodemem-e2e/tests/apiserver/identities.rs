//! Identities and admission: the admin, the controller's service account and per-node
//! agent tokens are distinct users; RBAC really decides; ValidatingAdmissionPolicy is on.

use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{SelfSubjectReview, UserInfo};
use kube::api::{Api, PostParams};
use kube::Client;
use nodemem_testkit::nodes::SimNode;
use nodemem_testkit::Identity;
use serde_json::json;

use crate::common::{admin, cluster, object, policies};

async fn whoami(client: Client) -> UserInfo {
    let api: Api<SelfSubjectReview> = Api::all(client);
    let review = api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .expect("SelfSubjectReview");
    review.status.unwrap().user_info.unwrap()
}

#[tokio::test]
async fn each_identity_is_its_own_user_and_rbac_decides() {
    let cp = cluster();
    let admin_client = admin().await;
    let me = whoami(admin_client.clone()).await;
    assert_eq!(me.username.as_deref(), Some("nodemem-admin"));
    assert!(me.groups.unwrap().contains(&"system:masters".to_string()));

    let controller = cp.client(&Identity::Controller).await.unwrap();
    let me = whoami(controller.clone()).await;
    assert_eq!(
        me.username.as_deref(),
        Some("system:serviceaccount:nodemem-system:nodemem-controller")
    );

    // The agent on a node: a token bound to a pod on that node carries the node name.
    SimNode::new("identity-node-1")
        .register(&admin_client)
        .await
        .unwrap();
    let agent = cp
        .client(&Identity::Agent("identity-node-1".into()))
        .await
        .unwrap();
    let me = whoami(agent.clone()).await;
    assert_eq!(
        me.username.as_deref(),
        Some("system:serviceaccount:nodemem-system:nodemem-agent")
    );
    let extra = me.extra.unwrap_or_default();
    assert_eq!(
        extra.get("authentication.kubernetes.io/node-name"),
        Some(&vec!["identity-node-1".to_string()]),
        "extra: {extra:?}"
    );

    // RBAC: a plain user and the controller may not list policies until granted.
    let stranger = cp
        .client(&Identity::User {
            name: "stranger".into(),
            groups: vec![],
        })
        .await
        .unwrap();
    let denied = policies(stranger).list(&Default::default()).await;
    assert!(
        matches!(&denied, Err(kube::Error::Api(s)) if s.code == 403),
        "{denied:?}"
    );
    let before = policies(controller.clone()).list(&Default::default()).await;
    assert!(
        matches!(&before, Err(kube::Error::Api(s)) if s.code == 403),
        "{before:?}"
    );

    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(admin_client.clone());
    roles
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "test-nmp-reader"},
                "rules": [{"apiGroups": ["nodemem.io"], "resources": ["nodememorypolicies"], "verbs": ["get", "list", "watch"]}],
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> =
        Api::all(admin_client.clone());
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "test-nmp-reader"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "test-nmp-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "nodemem-controller", "namespace": "nodemem-system"}],
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    // RBAC changes reach the authorizer through an informer: allow a moment.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match policies(controller.clone()).list(&Default::default()).await {
            Ok(_) => break,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("still denied after the binding: {e}"),
        }
    }
    // Reading was granted, writing was not.
    let write = policies(controller)
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
                "metadata": {"name": "rbac-write"},
                "spec": {"nodeSelector": {"matchLabels": {"pool": "rbac"}}},
            })),
        )
        .await;
    assert!(
        matches!(&write, Err(kube::Error::Api(s)) if s.code == 403),
        "{write:?}"
    );
}

#[tokio::test]
async fn validating_admission_policy_is_enforced() {
    cluster();
    let client = admin().await;
    let vaps: Api<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy> =
        Api::all(client.clone());
    vaps.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "test-nmp-priority-cap"},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": ["nodemem.io"], "apiVersions": ["v1alpha1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["nodememorypolicies"],
                }]},
                "validations": [{
                    "expression": "!has(object.metadata.labels) || !('test-vap' in object.metadata.labels) || object.spec.priority <= 500",
                    "message": "test-vap: priority above 500 is reserved",
                }],
            },
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    let bindings: Api<
        k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
    > = Api::all(client.clone());
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "test-nmp-priority-cap"},
                "spec": {"policyName": "test-nmp-priority-cap", "validationActions": ["Deny"]},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let api = policies(client);
    let make = |name: &str, priority: i64| {
        object(json!({
            "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
            "metadata": {"name": name, "labels": {"test-vap": "yes"}},
            "spec": {"nodeSelector": {"matchLabels": {"pool": "vap"}}, "priority": priority},
        }))
    };
    // The policy becomes active once the apiserver has compiled it: retry briefly.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let name = format!("vap-high-{attempt}");
        match api.create(&PostParams::default(), &make(&name, 900)).await {
            Err(kube::Error::Api(s)) => {
                assert!(
                    s.message
                        .contains("test-vap: priority above 500 is reserved"),
                    "{s:?}"
                );
                assert!(s.message.contains("test-nmp-priority-cap"), "{s:?}");
                break;
            }
            Ok(_) if Instant::now() < deadline => {
                let _ = api.delete(&name, &Default::default()).await;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            other => panic!("expected a VAP denial, got {other:?}"),
        }
    }
    api.create(&PostParams::default(), &make("vap-low", 100))
        .await
        .expect("a policy within the cap is admitted");
}
