//! Which container a new container cgroup belongs to, read from the container
//! runtime's own record the moment the cgroup appears.
//!
//! The kubelet reports a container's ID in the pod's status only after the container
//! has started and its next status sync has run: on the real node that was 7 to 15 s
//! after containerd created the cgroup (BENCHMARKS.md), all of it without nodemem's
//! values. The runtime knows sooner: before runc creates the cgroup, containerd writes
//! the container's OCI spec into its bundle
//! (`core/runtime/v2/bundle.go` NewBundle: `<state>/io.containerd.runtime.v2.task/
//! <namespace>/<id>/config.json`), and its CRI plugin annotates that spec with the
//! pod's UID and the container's name (`internal/cri/annotations`:
//! `io.kubernetes.cri.sandbox-uid`, `io.kubernetes.cri.container-name`,
//! `io.kubernetes.cri.container-type`). CRI-O keeps the same spec at
//! `/run/containers/storage/overlay-containers/<id>/userdata/config.json` with
//! `io.kubernetes.pod.uid`, `io.kubernetes.container.name` and
//! `io.kubernetes.cri-o.ContainerType`.
//!
//! Only the annotations are read. The record must agree with the cgroup's own path (the
//! pod UID in it), or it is not used; the pod status still decides for any container
//! the record does not name.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use nodemem_model::values::cgroup_layout::{
    container_of_path, CgroupDriver, ContainerId, ContainerRuntime,
};

/// A spec larger than this is not read (real ones are tens of KiB).
const MAX_RECORD_BYTES: u64 = 4 << 20;

/// Where each runtime keeps its containers' specs (host directories as the agent
/// sees them); a runtime without one is not read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeRecords {
    /// containerd's task directory for the CRI namespace:
    /// `/run/containerd/io.containerd.runtime.v2.task/k8s.io` on the host.
    pub containerd: Option<PathBuf>,
    /// CRI-O's container directory: `/run/containers/storage/overlay-containers`.
    pub crio: Option<PathBuf>,
}

/// A container cgroup, named by the runtime's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedContainer {
    pub pod_uid: String,
    /// The container's name in the pod spec.
    pub name: String,
    pub id: ContainerId,
}

/// Why a record could not name a container; each says which file and what.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("{path}: {reason}")]
    Unreadable { path: PathBuf, reason: String },
    #[error("{path}: not an OCI spec: {reason}")]
    NotASpec { path: PathBuf, reason: String },
    #[error("{path}: the record names pod {recorded}, the cgroup pod {cgroup}")]
    OtherPod {
        path: PathBuf,
        recorded: String,
        cgroup: String,
    },
}

/// What a spec's annotations say about the container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    Container {
        pod_uid: String,
        name: String,
    },
    /// The pod's sandbox (pause) container: no values of its own.
    Sandbox,
    /// Not a container the CRI made (no pod annotations).
    Unknown,
}

#[derive(serde::Deserialize)]
struct SpecAnnotations {
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// The annotation keys of one runtime: (container type, pod UID, container name).
fn keys(runtime: ContainerRuntime) -> (&'static str, &'static str, &'static str) {
    match runtime {
        ContainerRuntime::Containerd => (
            "io.kubernetes.cri.container-type",
            "io.kubernetes.cri.sandbox-uid",
            "io.kubernetes.cri.container-name",
        ),
        ContainerRuntime::CriO => (
            "io.kubernetes.cri-o.ContainerType",
            "io.kubernetes.pod.uid",
            "io.kubernetes.container.name",
        ),
    }
}

/// Reads what one OCI spec says about its container (pure: the bytes are given).
pub fn parse_record(runtime: ContainerRuntime, spec: &[u8]) -> Result<Recorded, String> {
    let spec: SpecAnnotations = serde_json::from_slice(spec).map_err(|e| e.to_string())?;
    let (kind_key, uid_key, name_key) = keys(runtime);
    let a = &spec.annotations;
    match a.get(kind_key).map(String::as_str) {
        Some("sandbox") => return Ok(Recorded::Sandbox),
        Some("container") => {}
        _ => return Ok(Recorded::Unknown),
    }
    match (a.get(uid_key), a.get(name_key)) {
        (Some(uid), Some(name)) if !uid.is_empty() && !name.is_empty() => Ok(Recorded::Container {
            pod_uid: uid.clone(),
            name: name.clone(),
        }),
        _ => Ok(Recorded::Unknown),
    }
}

impl RuntimeRecords {
    /// The spec file of a container, when its runtime's directory is known. The ID is
    /// alphanumeric (`container_of_path` refuses anything else): it cannot leave it.
    fn spec_path(&self, id: &ContainerId) -> Option<PathBuf> {
        match id.runtime {
            ContainerRuntime::Containerd => {
                Some(self.containerd.as_ref()?.join(&id.id).join("config.json"))
            }
            ContainerRuntime::CriO => Some(
                self.crio
                    .as_ref()?
                    .join(&id.id)
                    .join("userdata")
                    .join("config.json"),
            ),
        }
    }

    /// The container whose cgroup `cgroup_path` (relative to the cgroup root) is. None
    /// when it is not a container cgroup, its runtime's record is not mounted, or the
    /// record names no container (a sandbox); an error when the record exists but
    /// cannot be used.
    pub fn identify(
        &self,
        driver: CgroupDriver,
        cgroup_path: &str,
    ) -> Result<Option<RecordedContainer>, RecordError> {
        let Some((pod_uid, id)) = container_of_path(driver, cgroup_path) else {
            return Ok(None);
        };
        let Some(path) = self.spec_path(&id) else {
            return Ok(None);
        };
        let bytes = match read_bounded(&path) {
            Ok(b) => b,
            // Gone already (a container that failed at once), or a runtime that is
            // not this one: the pod status decides.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(RecordError::Unreadable {
                    path,
                    reason: e.to_string(),
                })
            }
        };
        match parse_record(id.runtime, &bytes) {
            Err(reason) => Err(RecordError::NotASpec { path, reason }),
            Ok(Recorded::Container {
                pod_uid: recorded,
                name,
            }) => {
                if recorded != pod_uid {
                    return Err(RecordError::OtherPod {
                        path,
                        recorded,
                        cgroup: pod_uid,
                    });
                }
                Ok(Some(RecordedContainer { pod_uid, name, id }))
            }
            Ok(Recorded::Sandbox | Recorded::Unknown) => Ok(None),
        }
    }
}

fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_RECORD_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_RECORD_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_RECORD_BYTES} bytes"
        )));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemem_model::pod::qos::QosClass;
    use nodemem_model::values::cgroup_layout::container_dir;
    use serde_json::json;

    const UID: &str = "6a4f2e3b-1c9d-4a5e-8f7b-2d3e4f5a6b7c";

    fn containerd_spec(kind: &str, uid: &str, name: Option<&str>) -> Vec<u8> {
        let mut a = json!({
            "io.kubernetes.cri.container-type": kind,
            "io.kubernetes.cri.sandbox-id": "f00d",
            "io.kubernetes.cri.sandbox-uid": uid,
            "io.kubernetes.cri.sandbox-name": "web-0",
            "io.kubernetes.cri.sandbox-namespace": "shop",
        });
        if let Some(n) = name {
            a["io.kubernetes.cri.container-name"] = json!(n);
        }
        serde_json::to_vec(
            &json!({"ociVersion": "1.2.0", "process": {"args": ["/app"]},
            "linux": {"resources": {"memory": {"limit": 268435456}}}, "annotations": a}),
        )
        .unwrap()
    }

    #[test]
    fn containerd_and_crio_specs_name_the_pod_and_container() {
        assert_eq!(
            parse_record(
                ContainerRuntime::Containerd,
                &containerd_spec("container", UID, Some("app"))
            ),
            Ok(Recorded::Container {
                pod_uid: UID.into(),
                name: "app".into()
            })
        );
        assert_eq!(
            parse_record(
                ContainerRuntime::Containerd,
                &containerd_spec("sandbox", UID, None)
            ),
            Ok(Recorded::Sandbox)
        );
        let crio = serde_json::to_vec(&json!({"annotations": {
            "io.kubernetes.cri-o.ContainerType": "container",
            "io.kubernetes.pod.uid": UID,
            "io.kubernetes.container.name": "sidecar",
        }}))
        .unwrap();
        assert_eq!(
            parse_record(ContainerRuntime::CriO, &crio),
            Ok(Recorded::Container {
                pod_uid: UID.into(),
                name: "sidecar".into()
            })
        );
        // One runtime's keys do not count for the other.
        assert_eq!(
            parse_record(ContainerRuntime::Containerd, &crio),
            Ok(Recorded::Unknown)
        );
        // A container without a name, or a spec without annotations: not named.
        assert_eq!(
            parse_record(
                ContainerRuntime::Containerd,
                &containerd_spec("container", UID, None)
            ),
            Ok(Recorded::Unknown)
        );
        assert_eq!(
            parse_record(ContainerRuntime::Containerd, b"{}"),
            Ok(Recorded::Unknown)
        );
        assert!(parse_record(ContainerRuntime::Containerd, b"{\"annotations\": 3}").is_err());
        assert!(parse_record(ContainerRuntime::Containerd, b"not json").is_err());
    }

    /// Writes a spec where the runtime keeps it (`rel` under the test's directory);
    /// its path.
    fn spec(dir: &Path, rel: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(rel).join("config.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn records(dir: &Path) -> RuntimeRecords {
        RuntimeRecords {
            containerd: Some(dir.join("k8s.io")),
            crio: Some(dir.join("overlay-containers")),
        }
    }

    #[test]
    fn a_cgroup_is_identified_from_its_runtimes_bundle() {
        let dir = tempfile::tempdir().unwrap();
        let r = records(dir.path());
        spec(
            dir.path(),
            "k8s.io/abc123",
            &containerd_spec("container", UID, Some("app")),
        );
        for driver in [CgroupDriver::Systemd, CgroupDriver::Cgroupfs] {
            let path = container_dir(
                driver,
                QosClass::Burstable,
                UID,
                &ContainerId::containerd("abc123"),
            );
            assert_eq!(
                r.identify(driver, &path),
                Ok(Some(RecordedContainer {
                    pod_uid: UID.into(),
                    name: "app".into(),
                    id: ContainerId::containerd("abc123"),
                }))
            );
        }
        spec(
            dir.path(),
            "overlay-containers/def456/userdata",
            &serde_json::to_vec(
                &json!({"annotations": {"io.kubernetes.cri-o.ContainerType": "container",
                "io.kubernetes.pod.uid": UID, "io.kubernetes.container.name": "db"}}),
            )
            .unwrap(),
        );
        let path = container_dir(
            CgroupDriver::Systemd,
            QosClass::Guaranteed,
            UID,
            &ContainerId {
                runtime: ContainerRuntime::CriO,
                id: "def456".into(),
            },
        );
        assert_eq!(
            r.identify(CgroupDriver::Systemd, &path)
                .unwrap()
                .unwrap()
                .name,
            "db"
        );
    }

    #[test]
    fn what_the_record_cannot_name_is_left_to_the_pod_status() {
        let dir = tempfile::tempdir().unwrap();
        let r = records(dir.path());
        let d = CgroupDriver::Systemd;
        let path =
            |i: &str| container_dir(d, QosClass::BestEffort, UID, &ContainerId::containerd(i));
        // Not a container cgroup; no bundle; a sandbox; no runtime directory given.
        assert_eq!(
            r.identify(d, "kubepods.slice/kubepods-besteffort.slice"),
            Ok(None)
        );
        assert_eq!(r.identify(d, &path("gone")), Ok(None));
        spec(
            dir.path(),
            "k8s.io/pause1",
            &containerd_spec("sandbox", UID, None),
        );
        assert_eq!(r.identify(d, &path("pause1")), Ok(None));
        assert_eq!(
            RuntimeRecords::default().identify(d, &path("pause1")),
            Ok(None)
        );
    }

    #[test]
    fn a_record_that_disagrees_or_is_broken_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let r = records(dir.path());
        let d = CgroupDriver::Cgroupfs;
        let other = spec(
            dir.path(),
            "k8s.io/aaa",
            &containerd_spec("container", "another-pod", Some("app")),
        );
        let path = container_dir(d, QosClass::Burstable, UID, &ContainerId::containerd("aaa"));
        let e = r.identify(d, &path).unwrap_err();
        assert_eq!(
            e,
            RecordError::OtherPod {
                path: other,
                recorded: "another-pod".into(),
                cgroup: UID.into()
            }
        );
        assert!(
            e.to_string().contains("the record names pod another-pod"),
            "{e}"
        );
        spec(dir.path(), "k8s.io/bbb", b"{\"annotations\": [");
        let path = container_dir(d, QosClass::Burstable, UID, &ContainerId::containerd("bbb"));
        let e = r.identify(d, &path).unwrap_err();
        assert!(
            matches!(&e, RecordError::NotASpec { path, .. } if path.ends_with("bbb/config.json")),
            "{e}"
        );
    }

    #[test]
    fn a_record_larger_than_the_bound_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let r = records(dir.path());
        let d = CgroupDriver::Systemd;
        // A valid spec padded past the bound: refused before it is parsed.
        let mut big = containerd_spec("container", UID, Some("app"));
        big.pop();
        big.extend(format!(",\"pad\":\"{}\"}}", "x".repeat(MAX_RECORD_BYTES as usize)).bytes());
        let path = spec(dir.path(), "k8s.io/big", &big);
        let cgroup = container_dir(d, QosClass::Burstable, UID, &ContainerId::containerd("big"));
        let e = r.identify(d, &cgroup).unwrap_err();
        assert_eq!(
            e,
            RecordError::Unreadable {
                path,
                reason: format!("larger than {MAX_RECORD_BYTES} bytes")
            }
        );
        // At the bound exactly it is read.
        let mut fits = containerd_spec("container", UID, Some("app"));
        fits.pop();
        let pad = MAX_RECORD_BYTES as usize - fits.len() - ",\"pad\":\"\"}".len();
        fits.extend(format!(",\"pad\":\"{}\"}}", "x".repeat(pad)).bytes());
        assert_eq!(fits.len() as u64, MAX_RECORD_BYTES);
        spec(dir.path(), "k8s.io/fits", &fits);
        let cgroup = container_dir(
            d,
            QosClass::Burstable,
            UID,
            &ContainerId::containerd("fits"),
        );
        assert_eq!(r.identify(d, &cgroup).unwrap().unwrap().name, "app");
    }
}
