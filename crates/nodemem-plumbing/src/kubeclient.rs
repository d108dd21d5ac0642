//! The apiserver client every command builds the same way: kubectl's rules for
//! `--kubeconfig`, `--context` and `KUBECONFIG`, else the pod's service account.

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::error::CliError;

/// The client for `--kubeconfig` (else `KUBECONFIG`, else `~/.kube/config`, else the
/// in-cluster service account) and `--context`.
pub async fn client(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<Client, CliError> {
    let config = config(kubeconfig, context).await?;
    Client::try_from(config).map_err(|e| CliError::one(format!("cannot build a client: {e}")))
}

/// How often one request is retried in the client when the apiserver answers 429, 503
/// or 504 (waiting at least its Retry-After), for [`client_with_brief_retries`].
pub const BRIEF_RETRIES: u32 = 2;

/// [`client`] for a process that retries failed writes itself, per object (the
/// controller's writes, the agent's status writes): a request the apiserver refuses for load (429, 503, 504) is retried
/// here only [`BRIEF_RETRIES`] times, honouring the apiserver's Retry-After, then
/// fails to its caller. kube's default client retries one request up to 15 times over
/// minutes, which would hold a whole decision's writes behind one refused object.
pub async fn client_with_brief_retries(kubeconfig: Option<&Path>) -> Result<Client, CliError> {
    with_brief_retries(config(kubeconfig, None).await?)
}

/// The client of `config` with [`client_with_brief_retries`]' retries (what tests
/// build against an apiserver of their own).
pub fn with_brief_retries(mut config: Config) -> Result<Client, CliError> {
    use kube::client::retry::RetryPolicy;
    config.default_retry = false;
    let policy = RetryPolicy::new(
        std::time::Duration::from_millis(200),
        std::time::Duration::from_secs(1),
        BRIEF_RETRIES,
        true,
    )
    .map_err(|e| CliError::one(format!("retry policy: {e}")))?;
    let builder = kube::client::ClientBuilder::try_from(config)
        .map_err(|e| CliError::one(format!("cannot build a client: {e}")))?;
    // The retry layer clones its service; a buffer makes the boxed stack cloneable.
    Ok(builder
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&tower::retry::RetryLayer::new(policy))
        .build())
}

/// The client configuration by kubectl's rules (see [`client`]).
async fn config(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<Config, CliError> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path)
                .map_err(|e| CliError::one(format!("--kubeconfig {}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|e| CliError::one(format!("kubeconfig: {e}")))
        }
        None if context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| CliError::one(format!("kubeconfig: {e}"))),
        None => Config::infer().await.map_err(|e| {
            CliError::one(format!(
                "cannot load a kubeconfig ({e}); in a pod the service account is used, elsewhere set KUBECONFIG or --kubeconfig"
            ))
        }),
    }
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
