//! Registration with the runtime's NRI socket, kept: when the runtime restarts, its
//! connection closes and the agent registers again (the runtime drops a plugin that is
//! gone, so pods keep starting while the agent is away). Every change of the path new
//! containers take asks the loop for a whole-node pass, which repairs and reports it.
//!
//! The plugin is served on a thread of its own ([`spawn`]): the runtime gives an answer
//! 2 s, then closes the plugin and creates the container without it (containerd/nri's
//! `pkg/adaptation/plugin.go`: a `DeadlineExceeded` is fatal), and the agent's loop runs
//! its passes, which read and write many files without yielding, on its single thread.

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

/// The reason the status gives when the plugin's thread could not start.
pub const NO_THREAD: &str = "NoThread";

/// [`serve`] on a thread with a runtime of its own, so that no pass of the agent's loop
/// delays an answer. The thread lives as long as the process.
pub fn spawn(
    config: NriConfig,
    plugin: Arc<NodememPlugin>,
    news: mpsc::UnboundedSender<NriNews>,
    state: watch::Sender<NriState>,
    metrics: Arc<Metrics>,
) {
    let (news_kept, state_kept) = (news.clone(), state.clone());
    let started = std::thread::Builder::new()
        .name("nodemem-nri".into())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime.block_on(serve(config, plugin, news, state, metrics)),
                Err(e) => {
                    warn!(error = %e, "NRI: no runtime for the plugin's thread; new containers get their values from the reaction");
                    set(&state, &news, NriState::Unavailable { reason: NO_THREAD });
                }
            }
        });
    if let Err(e) = started {
        warn!(error = %e, "NRI: the plugin's thread did not start; new containers get their values from the reaction");
        set(
            &state_kept,
            &news_kept,
            NriState::Unavailable { reason: NO_THREAD },
        );
    }
}

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

#[cfg(all(test, feature = "runtime-peer-tests"))]
mod tests {
    use std::time::Instant;

    use nodemem_model::node::creation::CreationTable;
    use nodemem_testkit::nri_runtime::NriRuntime;
    use serde_json::json;

    use super::*;
    use crate::nri::NriMode;

    /// A table with the Burstable pod `web` (uid-web, container `app`).
    fn table() -> Arc<CreationTable> {
        Arc::new(crate::test_node::web_creation_table())
    }

    /// The agent's loop runs a pass that does not yield for longer than the runtime
    /// waits for an answer (2 s): the plugin answers meanwhile, the container is
    /// created with nodemem's values, and the runtime keeps the plugin. (With the
    /// plugin served on the loop's own thread, the runtime gets no answer in time,
    /// closes the plugin and creates the container without the values.)
    #[test]
    fn the_plugin_answers_while_the_agents_loop_is_busy() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("nri.sock");
        let mut runtime = NriRuntime::start(&socket, 1);
        let (_table_out, table) = watch::channel(table());
        let (news_out, _news) = mpsc::unbounded_channel();
        let (state_out, mut state) = watch::channel(NriState::Connecting);
        let metrics = Arc::new(Metrics::new());
        let plugin = Arc::new(NodememPlugin::new(table, news_out.clone(), metrics.clone()));
        let config = NriConfig {
            mode: NriMode::Auto,
            socket: socket.clone(),
            index: "90".into(),
        };
        // The runtime's side: the plugin's registration, then a container created while
        // the loop is busy.
        let (busy, busy_now) = std::sync::mpsc::channel();
        let creating = std::thread::spawn(move || {
            assert_eq!(runtime.line()["event"], "synchronized");
            busy_now.recv().unwrap();
            let asked = Instant::now();
            let answer = runtime.relay(json!({"op": "create",
                "pod": {"id": "sandbox-1", "uid": "uid-web", "name": "web", "namespace": "shop",
                        "linux": {"cgroup_parent": "kubepods-burstable-poduid_web.slice"}},
                "container": {"id": "c1", "pod_sandbox_id": "sandbox-1", "name": "app"}}));
            (answer, asked.elapsed(), runtime)
        });
        // The agent's loop: one thread, as the agent runs it. Once the plugin is
        // registered, a pass of 3 s of reads and writes that never yield.
        let agent = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        agent.block_on(async {
            spawn(config, plugin, news_out, state_out, metrics.clone());
            let registered = state.wait_for(|s| matches!(s, NriState::Registered { .. }));
            tokio::time::timeout(Duration::from_secs(30), registered)
                .await
                .expect("registered within 30 s")
                .unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            busy.send(()).unwrap();
            std::thread::sleep(Duration::from_secs(3));
        });
        let (answer, took, mut runtime) = creating.join().unwrap();
        assert!(answer.get("error").is_none(), "{answer}");
        assert_eq!(
            answer["adjust"]["linux"]["resources"]["unified"]["memory.high"],
            (160u64 << 20).to_string(),
            "answered after {took:?}: {answer}"
        );
        assert!(took < Duration::from_secs(2), "answered after {took:?}");
        assert!(
            matches!(*state.borrow(), NriState::Registered { .. }),
            "the runtime kept the plugin: {:?}",
            *state.borrow()
        );
        assert!(metrics
            .encode()
            .contains("nodemem_agent_nri_requests_total{result=\"adjusted\"} 1"));
        runtime.child.kill().unwrap();
        runtime.child.wait().unwrap();
    }
}
