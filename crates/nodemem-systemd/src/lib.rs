//! systemd's D-Bus API, for the two calls nodemem needs on
//! `org.freedesktop.systemd1.Manager`: `SetUnitProperties(name, runtime, properties)`,
//! which records the values as the unit's (a runtime drop-in under
//! /run/systemd/system.control, kept across `daemon-reload`) and writes them into its
//! cgroup (why nodemem must: the apply crate's `units`); and `RestartUnit(name, mode)`,
//! with which the agent restarts the kubelet under `enforcement: Kubelet` as
//! `systemctl restart` would, from its pod and without entering the host's namespaces.
//!
//! systemd is reached as runc reaches it (libcontainer/cgroups/systemd, go-systemd's
//! `NewWithContext`): the system bus first, then systemd's private socket, which
//! answers root without a bus daemon. Both are checked by the caller's credentials:
//! uid 0 is allowed to manage units (sd-bus, `sd_bus_query_sender_privilege`), so the
//! agent needs no capability for it.

//!
//! Like youki's systemd client, it knows unit names and property names and types, and
//! nothing of what they mean: the agent says which properties stand for which files.

use std::path::{Path, PathBuf};
use std::time::Duration;

use zbus::zvariant::Value;

#[cfg(any(test, feature = "fake"))]
pub mod fake;

/// How long systemd may take to connect or to answer one call. It answers in
/// milliseconds; a systemd busy reloading takes longer, and a call that outlives this
/// is retried on the next pass (the file was written meanwhile).
pub const TIMEOUT: Duration = Duration::from_secs(10);

const DESTINATION: &str = "org.freedesktop.systemd1";
const PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const NO_SUCH_UNIT: &str = "org.freedesktop.systemd1.NoSuchUnit";

/// Where systemd listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BusAddress {
    /// The system bus (dbus-daemon's socket).
    SystemBus(PathBuf),
    /// systemd's own socket: peer to peer, root only, no bus daemon needed.
    Private(PathBuf),
}

impl BusAddress {
    /// The host's two sockets, under the directory its `/run` is mounted at, in the
    /// order runc tries them.
    pub fn host(run: &Path) -> [BusAddress; 2] {
        [
            BusAddress::SystemBus(run.join("dbus/system_bus_socket")),
            BusAddress::Private(run.join("systemd/private")),
        ]
    }

    fn path(&self) -> &Path {
        match self {
            BusAddress::SystemBus(p) | BusAddress::Private(p) => p,
        }
    }
}

impl std::fmt::Display for BusAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BusAddress::SystemBus(p) => write!(f, "the system bus at {}", p.display()),
            BusAddress::Private(p) => write!(f, "systemd's private socket at {}", p.display()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    #[error("cannot reach systemd through {address}: {reason}")]
    Connect { address: String, reason: String },
    #[error("systemd did not set {properties} on {unit}: {reason}")]
    SetProperties {
        unit: String,
        properties: String,
        /// The D-Bus error name systemd answered with, if it answered.
        error_name: Option<String>,
        reason: String,
    },
    #[error("systemd did not restart {unit}: {reason}")]
    Restart {
        unit: String,
        error_name: Option<String>,
        reason: String,
    },
}

impl SystemdError {
    /// systemd does not know the unit: its cgroup was removed meanwhile (the pod or
    /// container ended), which is not a failure.
    /// Not an answer from systemd: the connection is gone (systemd re-executed, the bus
    /// restarted), and a new one is needed.
    pub fn is_connection_lost(&self) -> bool {
        matches!(
            self,
            SystemdError::SetProperties {
                error_name: None,
                ..
            } | SystemdError::Restart {
                error_name: None,
                ..
            }
        )
    }

    pub fn is_no_such_unit(&self) -> bool {
        matches!(
            self,
            SystemdError::SetProperties { error_name: Some(n), .. }
                | SystemdError::Restart { error_name: Some(n), .. } if n == NO_SUCH_UNIT
        )
    }
}

/// A connection to systemd.
#[derive(Debug)]
pub struct Systemd {
    conn: zbus::Connection,
    address: String,
    p2p: bool,
}

impl Systemd {
    /// Connects to the first address that answers; every failure when none does.
    pub async fn connect_any(addresses: &[BusAddress]) -> Result<Self, Vec<SystemdError>> {
        let mut failures = Vec::new();
        for a in addresses {
            match Systemd::connect(a).await {
                Ok(s) => return Ok(s),
                Err(e) => failures.push(e),
            }
        }
        Err(failures)
    }

    pub async fn connect(address: &BusAddress) -> Result<Self, SystemdError> {
        let failed = |reason: String| SystemdError::Connect {
            address: address.to_string(),
            reason,
        };
        let stream = tokio::time::timeout(TIMEOUT, tokio::net::UnixStream::connect(address.path()))
            .await
            .map_err(|_| failed(format!("no answer within {TIMEOUT:?}")))?
            .map_err(|e| failed(e.to_string()))?;
        Systemd::over(
            stream,
            matches!(address, BusAddress::Private(_)),
            address.to_string(),
        )
        .await
        .map_err(|e| failed(e.to_string()))
    }

    /// A connection over `stream`: a bus (authenticate, then Hello) or, with `p2p`,
    /// systemd itself.
    pub async fn over(
        stream: tokio::net::UnixStream,
        p2p: bool,
        address: String,
    ) -> Result<Self, zbus::Error> {
        let mut builder = zbus::connection::Builder::unix_stream(stream).method_timeout(TIMEOUT);
        if p2p {
            builder = builder.p2p();
        }
        let conn = tokio::time::timeout(TIMEOUT, builder.build())
            .await
            .map_err(|_| zbus::Error::Failure(format!("no answer within {TIMEOUT:?}")))??;
        Ok(Systemd { conn, address, p2p })
    }

    /// Where this connection goes, for messages.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Sets `update`'s properties on its unit, for this boot (`runtime`, as runc does:
    /// the kubelet and the runtime recreate the units after a reboot).
    pub async fn set(&self, update: &UnitProperties) -> Result<(), SystemdError> {
        let properties: Vec<(&str, Value<'_>)> = update
            .properties
            .iter()
            .map(|(name, v)| (name.as_str(), dbus_value(v)))
            .collect();
        self.call(
            "SetUnitProperties",
            &(update.unit.as_str(), true, properties),
        )
        .await
        .map(drop)
        .map_err(|e| SystemdError::SetProperties {
            unit: update.unit.clone(),
            properties: describe(&update.properties),
            error_name: error_name(&e),
            reason: e.to_string(),
        })
    }

    /// Queues a restart of `unit` (mode `replace`, as `systemctl restart`) and returns
    /// the job's object path. systemd answers once the job is queued, not done: the
    /// caller watches for the unit's new process.
    pub async fn restart_unit(&self, unit: &str) -> Result<String, SystemdError> {
        let failed = |e: zbus::Error| SystemdError::Restart {
            unit: unit.to_string(),
            error_name: error_name(&e),
            reason: e.to_string(),
        };
        let reply = self
            .call("RestartUnit", &(unit, "replace"))
            .await
            .map_err(failed)?;
        let job: zbus::zvariant::OwnedObjectPath = reply.body().deserialize().map_err(failed)?;
        Ok(job.to_string())
    }

    /// A method of systemd's Manager object (no destination on systemd's own socket:
    /// there is no bus to route it).
    async fn call<B>(&self, member: &str, body: &B) -> Result<zbus::Message, zbus::Error>
    where
        B: zbus::export::serde::Serialize + zbus::zvariant::DynamicType,
    {
        let destination = (!self.p2p).then_some(DESTINATION);
        self.conn
            .call_method(destination, PATH, Some(MANAGER), member, body)
            .await
    }
}

/// The D-Bus error name systemd answered with; None when it did not answer.
fn error_name(e: &zbus::Error) -> Option<String> {
    match e {
        zbus::Error::MethodError(name, _, _) => Some(name.to_string()),
        _ => None,
    }
}

/// A unit property's value, typed as systemd's D-Bus API types it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PropertyValue {
    /// `t`; `u64::MAX` is systemd's "infinity".
    U64(u64),
    /// `ay`.
    Bytes(Vec<u8>),
}

/// Properties to set on one unit, by their D-Bus names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitProperties {
    pub unit: String,
    pub properties: Vec<(String, PropertyValue)>,
}

fn dbus_value(v: &PropertyValue) -> Value<'static> {
    match v {
        PropertyValue::U64(n) => Value::U64(*n),
        PropertyValue::Bytes(bytes) => Value::from(bytes.clone()),
    }
}

/// `MemoryMin=1048576 MemoryHigh=infinity`, as systemctl shows them.
pub fn describe(properties: &[(String, PropertyValue)]) -> String {
    properties
        .iter()
        .map(|(name, v)| match v {
            PropertyValue::U64(u64::MAX) => format!("{name}=infinity"),
            PropertyValue::U64(n) => format!("{name}={n}"),
            PropertyValue::Bytes(bytes) => format!("{name}={bytes:?}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::fake::{Call, FakeSystemd};
    use zbus::zvariant::OwnedValue;

    fn update() -> UnitProperties {
        UnitProperties {
            unit: "kubepods-burstable.slice".into(),
            properties: vec![
                ("MemoryLow".into(), PropertyValue::U64(64 << 20)),
                ("MemoryHigh".into(), PropertyValue::U64(u64::MAX)),
                ("AllowedMemoryNodes".into(), PropertyValue::Bytes(vec![2])),
            ],
        }
    }

    #[tokio::test]
    async fn set_unit_properties_goes_out_with_systemds_signature_and_types() {
        let dir = tempfile::tempdir().unwrap();
        let fake = FakeSystemd::listen(&dir.path().join("systemd/private"), &[]).unwrap();
        let systemd = Systemd::connect_any(&BusAddress::host(dir.path()))
            .await
            .unwrap();
        assert!(
            systemd.address().contains("private"),
            "{}",
            systemd.address()
        );
        systemd.set(&update()).await.unwrap();
        let calls = fake.calls();
        let [Call {
            member,
            signature,
            unit,
            runtime,
            properties,
            ..
        }] = &calls[..]
        else {
            panic!("one call: {calls:?}");
        };
        assert_eq!(member, "SetUnitProperties");
        assert_eq!(signature, "sba(sv)");
        assert_eq!(unit, "kubepods-burstable.slice");
        assert!(*runtime, "for this boot, as runc sets them");
        let mut got: BTreeMap<String, OwnedValue> = properties
            .iter()
            .map(|(k, v)| (k.clone(), v.try_clone().unwrap()))
            .collect();
        assert_eq!(got.len(), 3, "{got:?}");
        let mut take = |name: &str| got.remove(name).unwrap_or_else(|| panic!("{name}"));
        let low = take("MemoryLow");
        assert_eq!(low.value_signature().to_string(), "t");
        assert_eq!(u64::try_from(low).unwrap(), 64 << 20);
        assert_eq!(u64::try_from(take("MemoryHigh")).unwrap(), u64::MAX);
        let nodes = take("AllowedMemoryNodes");
        assert_eq!(nodes.value_signature().to_string(), "ay");
        assert_eq!(Vec::<u8>::try_from(nodes).unwrap(), vec![2]);
    }

    #[tokio::test]
    async fn systemds_refusal_names_the_unit_the_values_and_its_error() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("systemd/private");
        let _fake = FakeSystemd::listen(&socket, &["kubepods-burstable.slice"]).unwrap();
        let systemd = Systemd::connect(&BusAddress::Private(socket))
            .await
            .unwrap();
        let err = systemd.set(&update()).await.unwrap_err();
        assert!(err.is_no_such_unit(), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("kubepods-burstable.slice")
                && text.contains("MemoryLow=67108864")
                && text.contains("MemoryHigh=infinity"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn restart_unit_goes_out_as_systemctl_restart_and_returns_the_job() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("systemd/private");
        let fake = FakeSystemd::listen(&socket, &["absent.service"]).unwrap();
        let systemd = Systemd::connect(&BusAddress::Private(socket))
            .await
            .unwrap();
        let job = systemd.restart_unit("kubelet.service").await.unwrap();
        assert!(job.starts_with("/org/freedesktop/systemd1/job/"), "{job}");
        let calls = fake.calls();
        let [Call {
            member,
            signature,
            unit,
            mode,
            ..
        }] = &calls[..]
        else {
            panic!("one call: {calls:?}");
        };
        assert_eq!(
            (
                member.as_str(),
                signature.as_str(),
                unit.as_str(),
                mode.as_str()
            ),
            ("RestartUnit", "ss", "kubelet.service", "replace")
        );
        let err = systemd.restart_unit("absent.service").await.unwrap_err();
        assert!(err.is_no_such_unit(), "{err:?}");
        assert!(
            err.to_string().contains("did not restart absent.service"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn an_absent_socket_is_a_connect_error_for_each_address() {
        let dir = tempfile::tempdir().unwrap();
        let failures = Systemd::connect_any(&BusAddress::host(dir.path()))
            .await
            .unwrap_err();
        assert_eq!(failures.len(), 2);
        assert!(failures[0].to_string().contains("system bus"));
        assert!(failures[1].to_string().contains("systemd's private socket"));
    }
}
