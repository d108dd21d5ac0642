//! The agents' image read from the controller's own pod (`--agent-image-from-container`),
//! so that an install names its image once: the chart's and deploy/'s kustomize `images:`
//! entry set the controller's container and the admission ConfigMap, and the agents
//! follow the controller's container.

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};
use nodemem_plumbing::CliError;

/// The image of `container` in the controller's own pod `pod` of `namespace`, as its
/// spec names it (the reference the install wrote, which the admission ConfigMap names
/// too; the status's resolved imageID would not match it).
pub async fn read(
    client: &Client,
    namespace: &str,
    pod: Option<&str>,
    container: &str,
) -> Result<String, CliError> {
    let pod = pod.filter(|p| !p.is_empty()).ok_or_else(|| {
        CliError::one(format!(
            "--agent-image-from-container {container}: POD_NAME is not set, so the controller \
             cannot find its own pod (set it from the downward API's metadata.name, or give \
             --agent-image)"
        ))
    })?;
    let found = Api::<Pod>::namespaced(client.clone(), namespace)
        .get(pod)
        .await
        .map_err(|e| {
            CliError::one(format!(
                "--agent-image-from-container {container}: cannot read the controller's own pod \
                 {namespace}/{pod}: {e}"
            ))
        })?;
    container_image(&found, container)
        .map_err(|e| CliError::one(format!("--agent-image-from-container {container}: {e}")))
}

/// The spec image of the container named `container`.
pub fn container_image(pod: &Pod, container: &str) -> Result<String, String> {
    let name = pod.metadata.name.as_deref().unwrap_or("");
    let containers = pod.spec.as_ref().map(|s| &s.containers[..]).unwrap_or(&[]);
    let found = containers
        .iter()
        .find(|c| c.name == container)
        .ok_or_else(|| {
            let names: Vec<&str> = containers.iter().map(|c| c.name.as_str()).collect();
            format!(
                "the pod {name} has no container {container} (its containers: {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            )
        })?;
    found
        .image
        .clone()
        .filter(|i| !i.is_empty())
        .ok_or_else(|| format!("the container {container} of the pod {name} names no image"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(containers: &[(&str, Option<&str>)]) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "nodemem-controller-abc"},
            "spec": {"containers": containers.iter().map(|(n, i)| {
                let mut c = serde_json::json!({"name": n});
                if let Some(i) = i { c["image"] = serde_json::json!(i); }
                c
            }).collect::<Vec<_>>()},
        }))
        .unwrap()
    }

    #[test]
    fn the_named_containers_image_is_taken_beside_a_sidecar() {
        let p = pod(&[
            ("istio-proxy", Some("docker.io/istio/proxyv2:1.27")),
            (
                "controller",
                Some("registry.example.com/nodemem@sha256:ab12"),
            ),
        ]);
        assert_eq!(
            container_image(&p, "controller").unwrap(),
            "registry.example.com/nodemem@sha256:ab12"
        );
    }

    #[test]
    fn a_missing_container_names_the_ones_there() {
        let p = pod(&[("ctl", Some("x:1")), ("sidecar", Some("y:2"))]);
        assert_eq!(
            container_image(&p, "controller").unwrap_err(),
            "the pod nodemem-controller-abc has no container controller (its containers: ctl, sidecar)"
        );
        assert!(container_image(&pod(&[]), "controller")
            .unwrap_err()
            .ends_with("(its containers: none)"));
    }

    #[test]
    fn a_container_without_an_image_is_refused() {
        let p = pod(&[("controller", None)]);
        assert_eq!(
            container_image(&p, "controller").unwrap_err(),
            "the container controller of the pod nodemem-controller-abc names no image"
        );
        let p = pod(&[("controller", Some(""))]);
        assert!(container_image(&p, "controller").is_err());
    }
}
