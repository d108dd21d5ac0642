//! The CRDs the controller finds against the ones it was built with: Helm never
//! upgrades `crds/`, so a controller upgraded alone meets older CRDs, and the apiserver
//! prunes the fields they lack from every policy and config it stores. The controller
//! reads both CRDs every 30 s, beside its decisions, and says which fields are missing (a log line on each
//! change, `CRDOutdated` on every policy) instead of losing them silently.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::Client;
use tracing::{info, warn};

/// How often the CRDs are read again (a `kubectl apply -f crds/` is seen within it).
pub const EVERY: Duration = Duration::from_secs(30);

/// Each of this build's CRDs by name -> the fields the installed one lacks; None while
/// the CRDs cannot be read (unknown, never "current").
pub type Gaps = Option<BTreeMap<String, Vec<String>>>;

/// The gaps every [`EVERY`] (the first at once), read beside the decisions: the
/// controller's loop learns them from its queue like a watch event and never waits for
/// these reads.
pub fn readings(client: Client) -> impl futures::Stream<Item = Gaps> {
    futures::stream::unfold(
        (client, tokio::time::interval(EVERY)),
        |(client, mut every)| async move {
            every.tick().await;
            let gaps = read(&client).await;
            Some((gaps, (client, every)))
        },
    )
}

async fn read(client: &Client) -> Gaps {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut gaps = BTreeMap::new();
    for (_, ours) in nodemem_api::crdgen::crds() {
        let name = ours.metadata.name.clone().unwrap_or_default();
        match api.get(&name).await {
            Ok(installed) => {
                gaps.insert(
                    name.clone(),
                    nodemem_api::crdgen::missing_fields(&name, &installed),
                );
            }
            Err(e) => {
                warn!(crd = %name, error = %e, "cannot read the installed CRD to compare it with this build's; fields it lacks would be pruned unnoticed");
                return None;
            }
        }
    }
    Some(gaps)
}

/// Logs what changed between two readings.
pub fn report(before: &Gaps, now: &Gaps) {
    if before == now {
        return;
    }
    let Some(now) = now else { return };
    for (crd, missing) in now {
        if missing.is_empty() {
            info!(%crd, "the installed CRD has every field this build uses");
        } else {
            warn!(%crd, missing = %missing.join(", "), "the installed CRD is older than this build: the apiserver prunes these fields from every object it stores; apply this release's CRDs (kubectl apply --server-side --force-conflicts -f crds/)");
        }
    }
}
