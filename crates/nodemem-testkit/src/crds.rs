//! Installs CustomResourceDefinitions from YAML files and waits until the apiserver
//! reports them Established (so objects of the new kinds are accepted).

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};

use crate::{ControlPlane, Error, Identity};

pub const FIELD_MANAGER: &str = "nodemem-testkit";

/// Server-side applies every CRD in `dir` (`*.yaml`) and waits for Established.
/// Returns the CRD names.
pub async fn install_dir(cp: &ControlPlane, dir: &Path) -> Result<Vec<String>, Error> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| Error::Setup(format!("{}: {e}", dir.display())))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let client = cp.client(&Identity::Admin).await?;
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let mut names = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f)
            .map_err(|e| Error::Setup(format!("{}: {e}", f.display())))?;
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text)
            .map_err(|e| Error::Setup(format!("{}: {e}", f.display())))?;
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await
        .map_err(|e| Error::Api(format!("apply CRD {name} from {}: {e}", f.display())))?;
        names.push(name);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for name in &names {
        loop {
            let crd = api
                .get(name)
                .await
                .map_err(|e| Error::Api(format!("get CRD {name}: {e}")))?;
            let established = crd
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::Api(format!(
                    "CRD {name} not Established within 60s: {:?}",
                    crd.status
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(names)
}
