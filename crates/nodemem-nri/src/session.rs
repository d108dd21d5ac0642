//! One registration with the runtime: connect to its socket, serve the plugin service,
//! register, wait to be configured, then serve until the runtime goes away. The caller
//! reconnects (the runtime restarted: its socket comes back).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use tokio::net::UnixStream;
use tokio::task::JoinHandle;
use ttrpc::r#async::transport::{Listener, Socket};
use ttrpc::r#async::{Client, Server};
use ttrpc::Request;

use crate::api::RegisterPluginRequest;
use crate::mux::{self, TrunkEnd};
use crate::service::{Dispatch, Plugin, RuntimeInfo, RUNTIME_SERVICE};

/// The name and index the plugin registers with. The runtime calls plugins in index
/// order; of two plugins that set the same value, the later one is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    name: String,
    index: String,
}

impl Registration {
    /// `index`: two digits, as NRI checks it (`CheckPluginIndex`).
    pub fn new(name: &str, index: &str) -> Result<Self, ConnectError> {
        let digits = index.len() == 2 && index.bytes().all(|b| b.is_ascii_digit());
        if !digits {
            return Err(ConnectError::InvalidIndex(index.to_string()));
        }
        if name.is_empty() {
            return Err(ConnectError::EmptyName);
        }
        Ok(Registration {
            name: name.to_string(),
            index: index.to_string(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn index(&self) -> &str {
        &self.index
    }
}

/// Why a registration did not happen, told apart because each has its own remedy.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("no NRI socket at {path}: the runtime is not running, or runs with NRI disabled")]
    NoSocket {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("nothing listens on the NRI socket {path}: the runtime is down or restarting")]
    NotListening {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("connecting to the NRI socket {path} failed")]
    Connect {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the runtime refused plugin {name} (index {index}): {reason}")]
    Refused {
        name: String,
        index: String,
        reason: String,
    },
    #[error("the runtime did not configure the plugin within {0:?} of its registration")]
    NotConfigured(Duration),
    #[error("the runtime closed the connection during registration")]
    ClosedEarly,
    #[error("invalid NRI plugin index {0:?}: two digits, 00 to 99")]
    InvalidIndex(String),
    #[error("an NRI plugin needs a name")]
    EmptyName,
    #[error("serving the NRI plugin service failed: {0}")]
    Serve(String),
}

impl ConnectError {
    /// A short name for metrics and conditions.
    pub fn reason(&self) -> &'static str {
        match self {
            ConnectError::NoSocket { .. } => "NoSocket",
            ConnectError::NotListening { .. } => "NotListening",
            ConnectError::Connect { .. } => "ConnectFailed",
            ConnectError::Refused { .. } => "Refused",
            ConnectError::NotConfigured(_) | ConnectError::ClosedEarly => "NotConfigured",
            ConnectError::InvalidIndex(_) | ConnectError::EmptyName => "InvalidRegistration",
            ConnectError::Serve(_) => "ServeFailed",
        }
    }
}

/// A registered plugin, served until the runtime closes the connection.
pub struct Session {
    runtime: RuntimeInfo,
    reader: JoinHandle<TrunkEnd>,
    // Kept for the session's lifetime: dropping them would close the connections.
    _server: Server,
    _client: Client,
}

impl Session {
    /// The runtime as it named itself in Configure.
    pub fn runtime(&self) -> &RuntimeInfo {
        &self.runtime
    }

    /// Waits until the runtime closes the connection (it stopped or restarted).
    pub async fn closed(mut self) -> TrunkEnd {
        match (&mut self.reader).await {
            Ok(end) => end,
            Err(e) => TrunkEnd::Read(io::Error::other(e)),
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// How long registration and Configure may take (NRI's own registration timeout is
/// 5 s).
pub const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects to the runtime at `socket`, registers `plugin` and waits to be configured.
pub async fn connect(
    socket: &Path,
    registration: &Registration,
    plugin: Arc<dyn Plugin>,
) -> Result<Session, ConnectError> {
    let trunk = UnixStream::connect(socket)
        .await
        .map_err(|source| connect_error(socket, source))?;
    let mux = mux::split(trunk);
    let (configured_tx, mut configured) = tokio::sync::watch::channel(None);
    let dispatch = Dispatch::new(plugin, configured_tx);
    let incoming = futures::stream::once(futures::future::ready(Ok::<_, io::Error>(
        mux.plugin_service,
    )));
    let mut server = Server::new()
        .register_service(dispatch.service())
        .add_listener(Listener::new(incoming));
    server
        .start()
        .await
        .map_err(|e| ConnectError::Serve(e.to_string()))?;
    let client = Client::new(Socket::new(mux.runtime_service));
    register(&client, registration).await?;
    let runtime = tokio::time::timeout(REGISTRATION_TIMEOUT, configured.wait_for(Option::is_some))
        .await
        .map_err(|_| ConnectError::NotConfigured(REGISTRATION_TIMEOUT))?
        .map_err(|_| ConnectError::ClosedEarly)?
        .clone()
        .expect("waited for Some");
    Ok(Session {
        runtime,
        reader: mux.reader,
        _server: server,
        _client: client,
    })
}

fn connect_error(socket: &Path, source: io::Error) -> ConnectError {
    let path = socket.to_path_buf();
    match source.kind() {
        io::ErrorKind::NotFound => ConnectError::NoSocket { path, source },
        io::ErrorKind::ConnectionRefused => ConnectError::NotListening { path, source },
        _ => ConnectError::Connect { path, source },
    }
}

async fn register(client: &Client, registration: &Registration) -> Result<(), ConnectError> {
    let payload = RegisterPluginRequest {
        plugin_name: registration.name.clone(),
        plugin_idx: registration.index.clone(),
    };
    let mut req = Request::new();
    req.service = RUNTIME_SERVICE.to_string();
    req.method = "RegisterPlugin".to_string();
    req.payload = payload.encode_to_vec();
    req.timeout_nano = REGISTRATION_TIMEOUT.as_nanos() as i64;
    client
        .request(req)
        .await
        .map(|_| ())
        .map_err(|e| ConnectError::Refused {
            name: registration.name.clone(),
            index: registration.index.clone(),
            reason: match e {
                ttrpc::Error::RpcStatus(s) => s.message,
                other => other.to_string(),
            },
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_is_two_digits() {
        assert!(Registration::new("nodemem", "90").is_ok());
        for bad in ["9", "100", "a0", ""] {
            assert!(matches!(
                Registration::new("nodemem", bad),
                Err(ConnectError::InvalidIndex(_))
            ));
        }
        assert!(matches!(
            Registration::new("", "10"),
            Err(ConnectError::EmptyName)
        ));
    }

    #[tokio::test]
    async fn a_missing_socket_and_a_dead_one_are_told_apart() {
        struct Nothing;
        #[async_trait::async_trait]
        impl Plugin for Nothing {
            fn events(&self) -> crate::events::Events {
                crate::events::Events::default()
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let reg = Registration::new("nodemem", "90").unwrap();
        let missing = dir.path().join("nri.sock");
        let e = connect(&missing, &reg, Arc::new(Nothing))
            .await
            .err()
            .unwrap();
        assert_eq!(e.reason(), "NoSocket", "{e}");
        // A socket file whose listener is gone (the runtime died): refused.
        drop(std::os::unix::net::UnixListener::bind(&missing).unwrap());
        let e = connect(&missing, &reg, Arc::new(Nothing))
            .await
            .err()
            .unwrap();
        assert_eq!(e.reason(), "NotListening", "{e}");
    }
}
