//! The apiserver client every command builds the same way: kubectl's rules for
//! `--kubeconfig`, `--context` and `KUBECONFIG`, else the pod's service account.

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::error::CliError;

/// The client for `--kubeconfig` (else `KUBECONFIG`, else `~/.kube/config`, else the
/// in-cluster service account) and `--context`.
pub async fn client(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<Client, CliError> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path)
                .map_err(|e| CliError::one(format!("--kubeconfig {}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(file, &options).await
        }
        None if context.is_some() => Config::from_kubeconfig(&options).await,
        None => {
            return Client::try_default()
                .await
                .map_err(|e| {
                    CliError::one(format!(
                        "cannot load a kubeconfig ({e}); in a pod the service account is used, elsewhere set KUBECONFIG or --kubeconfig"
                    ))
                })
        }
    }
    .map_err(|e| CliError::one(format!("kubeconfig: {e}")))?;
    Client::try_from(config).map_err(|e| CliError::one(format!("cannot build a client: {e}")))
}

/// An apiserver error as one line, naming what was being read or written.
pub fn api_error(what: &str, e: kube::Error) -> CliError {
    match e {
        kube::Error::Api(status) => {
            CliError::one(format!("{what}: {} ({})", status.message, status.reason))
        }
        other => CliError::one(format!("{what}: {other}")),
    }
}
