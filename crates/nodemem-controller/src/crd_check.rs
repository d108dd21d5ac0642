//! The CRDs the controller finds against the ones it was built with: Helm never
//! upgrades `crds/`, so a controller upgraded alone meets older CRDs, and the apiserver
//! prunes the fields they lack from every policy and config it stores. The controller
//! reads both CRDs now and then and says which fields are missing (a log line on each
//! change, `CRDOutdated` on every policy) instead of losing them silently.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::Client;
use tracing::{info, warn};

/// How often the CRDs are read again (a `kubectl apply -f crds/` is seen within it).
pub const EVERY: Duration = Duration::from_secs(30);

/// Each of this build's CRDs by name -> the fields the installed one lacks; None while
/// the CRDs cannot be read (unknown, never "current").
pub type Gaps = Option<BTreeMap<String, Vec<String>>>;

/// Reads the CRDs when [`EVERY`] has passed since `last`.
pub struct CrdCheck {
    last: Option<Instant>,
}

impl CrdCheck {
    pub fn new() -> Self {
        CrdCheck { last: None }
    }

    /// The gaps when it is time to look again (None: not yet time).
    pub async fn due(&mut self, client: &Client) -> Option<Gaps> {
        if self.last.is_some_and(|l| l.elapsed() < EVERY) {
            return None;
        }
        self.last = Some(Instant::now());
        Some(read(client).await)
    }
}

impl Default for CrdCheck {
    fn default() -> Self {
        Self::new()
    }
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
