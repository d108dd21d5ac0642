//! A stand-in for systemd's private socket, for tests: it accepts connections at a
//! path, answers `SetUnitProperties` (an empty reply) and `RestartUnit` (a job path)
//! as systemd does, or `org.freedesktop.systemd1.NoSuchUnit` for units it does not
//! know, and records each call with its wire signature. The real systemd is the real node's (tests/real_node).

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::StreamExt;
use zbus::zvariant::OwnedValue;

/// One call as the fake received it.
#[derive(Debug)]
pub struct Call {
    pub member: String,
    /// The body's signature as on the wire (`sba(sv)`).
    pub signature: String,
    pub unit: String,
    pub runtime: bool,
    pub properties: Vec<(String, OwnedValue)>,
    /// RestartUnit's job mode (empty for SetUnitProperties).
    pub mode: String,
}

/// SetUnitProperties' arguments: the unit, runtime, the properties.
type SetUnitProperties = (String, bool, Vec<(String, OwnedValue)>);

/// Called with the unit of each RestartUnit the fake accepts (a test's stand-in for
/// the unit's process starting again).
pub type OnRestart = Arc<dyn Fn(&str) + Send + Sync>;

pub struct FakeSystemd {
    socket: std::path::PathBuf,
    calls: Arc<Mutex<Vec<Call>>>,
    accept: tokio::task::JoinHandle<()>,
    connections: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl FakeSystemd {
    /// Listens at `socket` (its directory is created); `unknown` units answer
    /// NoSuchUnit. Must be called inside a tokio runtime.
    pub fn listen(socket: &Path, unknown: &[&str]) -> std::io::Result<Self> {
        Self::listen_with(socket, unknown, Arc::new(|_: &str| {}))
    }

    /// [`FakeSystemd::listen`], calling `on_restart` for each accepted RestartUnit.
    pub fn listen_with(
        socket: &Path,
        unknown: &[&str],
        on_restart: OnRestart,
    ) -> std::io::Result<Self> {
        if let Some(dir) = socket.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let listener = tokio::net::UnixListener::bind(socket)?;
        let calls = Arc::new(Mutex::new(Vec::new()));
        let unknown: Arc<Vec<String>> = Arc::new(unknown.iter().map(|u| u.to_string()).collect());
        let recorded = calls.clone();
        let connections = Arc::new(Mutex::new(Vec::new()));
        let served = connections.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let task = tokio::spawn(serve(
                    stream,
                    recorded.clone(),
                    unknown.clone(),
                    on_restart.clone(),
                ));
                locked(&served).push(task);
            }
        });
        Ok(FakeSystemd {
            socket: socket.to_path_buf(),
            calls,
            accept,
            connections,
        })
    }

    /// The calls so far, taken.
    pub fn calls(&self) -> Vec<Call> {
        std::mem::take(&mut locked(&self.calls))
    }

    /// Closes every connection and the socket: as systemd re-executing does.
    pub fn stop(self) {
        self.accept.abort();
        for c in locked(&self.connections).drain(..) {
            c.abort();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// The guarded value, also after a test thread panicked holding it: the fake keeps
/// recording for the test's report.
fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn serve(
    stream: tokio::net::UnixStream,
    calls: Arc<Mutex<Vec<Call>>>,
    unknown: Arc<Vec<String>>,
    on_restart: OnRestart,
) {
    let Ok(builder) = zbus::connection::Builder::unix_stream(stream).server(zbus::Guid::generate())
    else {
        return;
    };
    let Ok(conn) = builder.p2p().build().await else {
        return;
    };
    let mut messages = zbus::MessageStream::from(&conn);
    while let Some(Ok(msg)) = messages.next().await {
        let header = msg.header();
        if header.message_type() != zbus::message::Type::MethodCall {
            continue;
        }
        let member = header.member().map(|m| m.to_string()).unwrap_or_default();
        let signature = msg.body().signature().to_string_no_parens();
        let call = if member == "RestartUnit" {
            msg.body()
                .deserialize::<(String, String)>()
                .map(|(unit, mode)| (unit, false, Vec::new(), mode))
        } else {
            msg.body()
                .deserialize::<SetUnitProperties>()
                .map(|(unit, runtime, properties)| (unit, runtime, properties, String::new()))
        };
        let Ok((unit, runtime, properties, mode)) = call else {
            let _ = conn
                .reply_error(
                    &header,
                    "org.freedesktop.DBus.Error.InvalidArgs",
                    &format!("unexpected signature {signature}"),
                )
                .await;
            continue;
        };
        let known = !unknown.contains(&unit);
        let restart = member == "RestartUnit";
        // Recorded before the answer, so a caller that got its answer sees the call.
        locked(&calls).push(Call {
            member,
            signature,
            unit: unit.clone(),
            runtime,
            properties,
            mode,
        });
        let answer = if !known {
            conn.reply_error(
                &header,
                "org.freedesktop.systemd1.NoSuchUnit",
                &format!("Unit {unit} not loaded."),
            )
            .await
        } else if restart {
            on_restart(&unit);
            let job = zbus::zvariant::ObjectPath::try_from("/org/freedesktop/systemd1/job/1")
                .expect("a valid object path");
            conn.reply(&header, &job).await
        } else {
            conn.reply(&header, &()).await
        };
        if answer.is_err() {
            return;
        }
    }
}
