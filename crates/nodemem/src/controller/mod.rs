//! `nodemem controller`: turns NodeMemoryPolicies into one NodeMemoryConfig per node
//! and rolls each pool to a new revision safely.
//!
//! * [`world`]: what the watches said (pure index).
//! * [`decide`]: resolution, rollout steps, config writes and policy status (pure).
//! * [`run`]: the watches and the writes around them.

pub mod decide;
pub mod metrics;
pub mod run;
pub mod world;

use crate::agent::LogFormat;
use crate::error::CliError;
use crate::Outcome;

/// Arguments of `nodemem controller`.
#[derive(Clone, Debug, clap::Args)]
pub struct ControllerArgs {
    /// Logs on stderr: human text, or one JSON object per line.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Where to serve /metrics, /healthz and /readyz (host:port, or off).
    #[arg(long, default_value = "0.0.0.0:9181")]
    pub metrics_addr: String,
    /// Seconds between checks of time-based rollout steps (minReadySeconds, deadlines).
    #[arg(long, default_value_t = 5)]
    pub tick_seconds: u64,
}

pub fn run(args: &ControllerArgs) -> Result<Outcome, CliError> {
    crate::agent::init_logs(args.log_format);
    let metrics_addr: Option<std::net::SocketAddr> = match args.metrics_addr.as_str() {
        "" | "off" => None,
        a => Some(a.parse().map_err(|e| {
            CliError::one(format!(
                "--metrics-addr {a:?}: {e}; give host:port such as 0.0.0.0:9181, or off"
            ))
        })?),
    };
    let controller = run::Controller {
        metrics: Default::default(),
        tick: std::time::Duration::from_secs(args.tick_seconds.max(1)),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::one(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async move {
        if let Some(addr) = metrics_addr {
            let bound = crate::endpoints::serve(addr, controller.metrics.clone())
                .await
                .map_err(CliError::one)?;
            tracing::info!(%bound, "serving /metrics, /healthz and /readyz");
        }
        let client = kube::Client::try_default().await.map_err(|e| {
            CliError::one(format!(
                "cannot reach the apiserver ({e}); in a pod the service account is used, elsewhere set KUBECONFIG"
            ))
        })?;
        controller.run(client).await.map_err(CliError::one)
    })?;
    Ok(Outcome::default())
}

#[cfg(test)]
mod tests;
