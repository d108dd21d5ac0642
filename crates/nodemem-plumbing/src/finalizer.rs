//! Letting go of a NodeMemoryPolicy's handoff finalizer
//! ([`nodemem_api::HANDOFF_FINALIZER`]): `kubectl nodemem release POLICY --now` and a
//! controller that stands down (scaled to zero, deleted, uninstalled) share this one
//! write, so the way out never needs a running controller.

use kube::api::{Api, Patch, PatchParams};
use nodemem_api::NodeMemoryPolicy;
use serde_json::json;

/// Removes the handoff finalizer from `policy` and keeps every other finalizer. The
/// resourceVersion read is a precondition (a policy changed meanwhile is read again).
/// Ok(false): the policy is gone or never had it. `params`: who writes (the field
/// manager) and whether only as a dry run.
pub async fn let_go(
    api: &Api<NodeMemoryPolicy>,
    policy: &str,
    params: &PatchParams,
) -> Result<bool, kube::Error> {
    for _ in 0..5 {
        let Some(p) = api.get_opt(policy).await? else {
            return Ok(false);
        };
        let finalizers = p.metadata.finalizers.clone().unwrap_or_default();
        if !finalizers
            .iter()
            .any(|f| f == nodemem_api::HANDOFF_FINALIZER)
        {
            return Ok(false);
        }
        let kept: Vec<&String> = finalizers
            .iter()
            .filter(|f| *f != nodemem_api::HANDOFF_FINALIZER)
            .collect();
        let patch = json!({"metadata": {"resourceVersion": p.metadata.resource_version,
            "finalizers": kept}});
        match api.patch(policy, params, &Patch::Merge(&patch)).await {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    // Five conflicts in a row: something rewrites the policy all the time.
    Err(kube::Error::Api(Box::new(
        kube::core::Status::failure(
            &format!("nodememorypolicy {policy} changed on every try; not released"),
            "Conflict",
        )
        .with_code(409),
    )))
}
