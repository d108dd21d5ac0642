//! A stand-in for systemd's private socket, for tests: it accepts connections at a
//! path, answers `SetUnitProperties` as systemd does (an empty reply, or
//! `org.freedesktop.systemd1.NoSuchUnit` for units it does not know) and records each
//! call with its wire signature. The real systemd is the real node's (tests/real_node).

use std::path::Path;
use std::sync::{Arc, Mutex};

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
}

/// SetUnitProperties' arguments: the unit, runtime, the properties.
type SetUnitProperties = (String, bool, Vec<(String, OwnedValue)>);

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
                let task = tokio::spawn(serve(stream, recorded.clone(), unknown.clone()));
                served.lock().unwrap().push(task);
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
        std::mem::take(&mut self.calls.lock().unwrap())
    }

    /// Closes every connection and the socket: as systemd re-executing does.
    pub fn stop(self) {
        self.accept.abort();
        for c in self.connections.lock().unwrap().drain(..) {
            c.abort();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

async fn serve(
    stream: tokio::net::UnixStream,
    calls: Arc<Mutex<Vec<Call>>>,
    unknown: Arc<Vec<String>>,
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
        let body: Result<SetUnitProperties, _> = msg.body().deserialize();
        let Ok((unit, runtime, properties)) = body else {
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
        // Recorded before the answer, so a caller that got its answer sees the call.
        calls.lock().unwrap().push(Call {
            member,
            signature,
            unit: unit.clone(),
            runtime,
            properties,
        });
        let answer = if known {
            conn.reply(&header, &()).await
        } else {
            conn.reply_error(
                &header,
                "org.freedesktop.systemd1.NoSuchUnit",
                &format!("Unit {unit} not loaded."),
            )
            .await
        };
        if answer.is_err() {
            return;
        }
    }
}
