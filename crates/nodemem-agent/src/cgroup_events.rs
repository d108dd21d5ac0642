//! New cgroups as the in-cluster agent learns of them: the kubepods tree watched on a
//! thread of its own (inotify reads block), and for each new container cgroup which
//! pod and container it is, from the runtime's record (`runtime_record`), read at once
//! on that thread, while the runtime is still starting the container.

use std::time::Instant;

use futures::Stream;
use nodemem_cgroup::watch::{TreeChange, TreeWatcher};
use nodemem_cgroup::CgroupPath;
use nodemem_model::values::cgroup_layout::{container_of_path, CgroupDriver, ContainerId};
use tracing::warn;

use crate::runtime_record::{RecordedContainer, RuntimeRecords};

/// What one read of the tree found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupChanges {
    /// Directories that appeared (relative to the cgroup root).
    pub appeared: Vec<String>,
    /// Containers among them that the runtime's record named.
    pub named: Vec<RecordedContainer>,
    /// Container cgroups whose record was there but not usable (warned).
    pub unusable: usize,
    /// Container cgroups that went away.
    pub gone: Vec<ContainerId>,
    /// When the read returned: reactions are timed from here.
    pub at: Instant,
}

/// Sorts one read's changes; None when nothing in them matters to the agent.
pub fn sort_changes(
    changes: &[TreeChange],
    driver: CgroupDriver,
    records: &RuntimeRecords,
    at: Instant,
) -> Option<CgroupChanges> {
    let mut out = CgroupChanges {
        appeared: Vec::new(),
        named: Vec::new(),
        unusable: 0,
        gone: Vec::new(),
        at,
    };
    for change in changes {
        match change {
            TreeChange::Appeared(p) => {
                out.appeared.push(p.as_str().to_string());
                match records.identify(driver, p.as_str()) {
                    Ok(Some(c)) => out.named.push(c),
                    Ok(None) => {}
                    Err(e) => {
                        out.unusable += 1;
                        warn!(error = %e, "the container runtime's record of a new cgroup is not usable; its pod status decides")
                    }
                }
            }
            TreeChange::Gone(p) => {
                if let Some((_, id)) = container_of_path(driver, p.as_str()) {
                    out.gone.push(id);
                }
            }
        }
    }
    (!out.appeared.is_empty() || !out.gone.is_empty()).then_some(out)
}

/// Watches the kubepods tree under `root` and streams what changed.
/// The kubepods tree could not be watched.
#[derive(Debug, thiserror::Error)]
pub enum CgroupWatchError {
    #[error("cannot watch {}: {source}", path.display())]
    Watch {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the cgroup watcher: {0}")]
    Thread(#[source] std::io::Error),
}

pub fn watch_cgroups(
    root: std::path::PathBuf,
    top: CgroupPath,
    driver: CgroupDriver,
    records: RuntimeRecords,
) -> Result<impl Stream<Item = CgroupChanges> + Send, CgroupWatchError> {
    let mut tree = TreeWatcher::new(&root, &top).map_err(|source| CgroupWatchError::Watch {
        path: root.join(top.as_str()),
        source,
    })?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("cgroup-watch".into())
        .spawn(move || loop {
            match tree.wait() {
                Ok(changes) => {
                    let Some(sorted) = sort_changes(&changes, driver, &records, Instant::now())
                    else {
                        continue;
                    };
                    if tx.send(sorted).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    warn!(error = %e, "watching the cgroup tree failed; the periodic resync still covers new cgroups");
                    return;
                }
            }
        })
        .map_err(CgroupWatchError::Thread)?;
    Ok(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemem_model::pod::qos::QosClass;
    use nodemem_model::values::cgroup_layout::{container_dir, pod_dir};

    const UID: &str = "6a4f2e3b-1c9d-4a5e-8f7b-2d3e4f5a6b7c";

    #[test]
    fn new_containers_are_named_from_their_bundle_and_gone_ones_reported() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("abc");
        std::fs::create_dir_all(&bundle).unwrap();
        std::fs::write(
            bundle.join("config.json"),
            serde_json::to_vec(&serde_json::json!({"annotations": {
                "io.kubernetes.cri.container-type": "container",
                "io.kubernetes.cri.sandbox-uid": UID,
                "io.kubernetes.cri.container-name": "app"}}))
            .unwrap(),
        )
        .unwrap();
        // A record that names another pod: not used, counted.
        std::fs::create_dir_all(dir.path().join("bad")).unwrap();
        std::fs::write(
            dir.path().join("bad/config.json"),
            serde_json::to_vec(&serde_json::json!({"annotations": {
                "io.kubernetes.cri.container-type": "container",
                "io.kubernetes.cri.sandbox-uid": "another-pod",
                "io.kubernetes.cri.container-name": "app"}}))
            .unwrap(),
        )
        .unwrap();
        let records = RuntimeRecords {
            containerd: Some(dir.path().to_path_buf()),
            crio: None,
        };
        let d = CgroupDriver::Systemd;
        let path = |s: &str| CgroupPath::new(s).unwrap();
        let pod = pod_dir(d, QosClass::Burstable, UID);
        let app = container_dir(d, QosClass::Burstable, UID, &ContainerId::containerd("abc"));
        let sandbox = container_dir(d, QosClass::Burstable, UID, &ContainerId::containerd("def"));
        let bad = container_dir(d, QosClass::Burstable, UID, &ContainerId::containerd("bad"));
        let at = Instant::now();
        let sorted = sort_changes(
            &[
                TreeChange::Appeared(path(&pod)),
                TreeChange::Appeared(path(&sandbox)),
                TreeChange::Appeared(path(&app)),
                TreeChange::Appeared(path(&bad)),
                TreeChange::Gone(path(&container_dir(
                    d,
                    QosClass::Burstable,
                    UID,
                    &ContainerId::containerd("old"),
                ))),
            ],
            d,
            &records,
            at,
        )
        .unwrap();
        assert_eq!(sorted.appeared, vec![pod.clone(), sandbox, app, bad]);
        assert_eq!(sorted.unusable, 1);
        assert_eq!(
            sorted.named,
            vec![RecordedContainer {
                pod_uid: UID.into(),
                name: "app".into(),
                id: ContainerId::containerd("abc")
            }]
        );
        assert_eq!(sorted.gone, vec![ContainerId::containerd("old")]);
        // A pod cgroup going away is nothing the agent acts on.
        assert_eq!(
            sort_changes(&[TreeChange::Gone(path(&pod))], d, &records, at),
            None
        );
    }
}
