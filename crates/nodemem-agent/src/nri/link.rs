//! Registration with the runtime's NRI socket, kept: when the runtime restarts, its
//! connection closes and the agent registers again (the runtime drops a plugin that is
//! gone, so pods keep starting while the agent is away). Every change of the path new
//! containers take asks the loop for a whole-node pass, which repairs and reports it.

use std::sync::Arc;
use std::time::Duration;

use nodemem_nri::{connect, Registration};
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use super::plugin::NodememPlugin;
use super::{NriConfig, NriMode, NriNews, NriState};
use crate::metrics::Metrics;

/// Between attempts while the socket is absent or refuses.
const RETRY_EVERY: Duration = Duration::from_secs(2);

/// Registers and serves until the agent stops; `state` says how new containers get
/// their values.
pub async fn serve(
    config: NriConfig,
    plugin: Arc<NodememPlugin>,
    news: mpsc::UnboundedSender<NriNews>,
    state: watch::Sender<NriState>,
    metrics: Arc<Metrics>,
) {
    let registration = match Registration::new("nodemem", &config.index) {
        Ok(r) => r,
        Err(e) => {
            warn!(error = %e, "NRI: not registering");
            set(&state, &news, NriState::Unavailable { reason: e.reason() });
            return;
        }
    };
    let mut last_failure: Option<String> = None;
    loop {
        match connect(&config.socket, &registration, plugin.clone()).await {
            Ok(session) => {
                let runtime = format!("{} {}", session.runtime().name, session.runtime().version);
                info!(%runtime, index = registration.index(), "NRI: registered; new containers are created with nodemem's values");
                metrics.nri_connection("registered", true);
                last_failure = None;
                set(&state, &news, NriState::Registered { runtime });
                let end = session.closed().await;
                warn!(reason = %end, "NRI: the runtime closed the connection; registering again");
                metrics.nri_connection("closed", false);
                set(&state, &news, NriState::Connecting);
            }
            Err(e) => {
                metrics.nri_connection(e.reason(), false);
                let said = e.to_string();
                if last_failure.as_ref() != Some(&said) {
                    match config.mode {
                        NriMode::On => {
                            warn!(error = %said, "NRI: not registered (--nri=on); new containers wait for the reaction")
                        }
                        _ => {
                            info!(error = %said, "NRI: not registered; new containers get their values from the reaction")
                        }
                    }
                    last_failure = Some(said);
                }
                set(&state, &news, NriState::Unavailable { reason: e.reason() });
            }
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
}

/// A new state, and a pass to report it (and repair, after a gap), when it changed.
fn set(state: &watch::Sender<NriState>, news: &mpsc::UnboundedSender<NriNews>, new: NriState) {
    if state.send_if_modified(|s| {
        let changed = *s != new;
        *s = new;
        changed
    }) {
        let _ = news.send(NriNews::Resync);
    }
}
