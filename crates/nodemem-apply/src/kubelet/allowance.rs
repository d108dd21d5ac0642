//! What the kubelet reader answers for (issue 59): only what nodemem reads or writes of
//! the host kubelet's files, as the kubelet's own command line names them. A request for
//! anything else (the node's kubeconfigs and keys beside the kubelet's configuration,
//! another process's files, a path that climbs with `..`) is refused, so that code
//! running in the agent gains nothing from the reader's capability but the kubelet's
//! configuration, which the agent reads anyway.

use std::path::{Component, Path};

use nodemem_model::node::kubelet_dropin::{DROPIN_FILE, LEGACY_DROPIN_FILES};

use super::access::Request;
use super::Reachable;

/// The requests the reader answers: those on `reachable`'s files, and the writes of
/// nodemem's drop-in and the Memory Manager's state file where `writes` (the agent runs
/// with `enforcement: Kubelet` allowed).
#[derive(Clone, Debug, Default)]
pub struct Allowance {
    /// The files the reader may read.
    pub reachable: Reachable,
    /// Whether it may write nodemem's drop-in and the Memory Manager's state file.
    pub writes: bool,
}

impl Allowance {
    /// Ok when the reader may carry out `request`; else why not.
    pub fn permits(&self, proc_root: &Path, request: &Request) -> Result<(), String> {
        for path in request.paths() {
            if path
                .components()
                .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
            {
                return Err(format!("{} climbs with . or ..", path.display()));
            }
        }
        if let Request::Link { path } = request {
            return if is_mount_namespace(proc_root, path) {
                Ok(())
            } else {
                Err(format!("{} is not a process's ns/mnt", path.display()))
            };
        }
        if request.writes() && !self.writes {
            return Err(
                "this agent does not write the kubelet's files (no enforcement: Kubelet)".into(),
            );
        }
        let r = &self.reachable;
        if r.process_dir.as_os_str().is_empty() {
            return Err("no host kubelet is known".into());
        }
        let allowed = match request {
            Request::Read { path } => self.readable(path),
            Request::List { path } => self.listable(path),
            Request::Identity { path } => self.listable(path) || self.readable(path),
            Request::Write { path, .. } => self.dropin(path),
            Request::Rename { from, to } => self.legacy_dropin(from) && self.dropin(to),
            Request::Remove { path } => {
                self.dropin(path) || self.legacy_dropin(path) || *path == r.memory_manager_state
            }
            Request::Link { .. } => unreachable!("answered above"),
        };
        if allowed {
            Ok(())
        } else {
            Err(format!(
                "not a file the host kubelet ({}) names for what nodemem does with it",
                r.process_dir.display()
            ))
        }
    }

    fn readable(&self, path: &Path) -> bool {
        let r = &self.reachable;
        let has = |ext: &[&str]| {
            path.extension()
                .is_some_and(|e| ext.iter().any(|x| e == *x))
        };
        r.config.as_deref() == Some(path)
            || r.k3s_config.as_deref() == Some(path)
            || r.config_dir
                .as_deref()
                .is_some_and(|d| path.starts_with(d) && path != d && has(&["conf"]))
            || self
                .k3s_dropins()
                .is_some_and(|d| path.parent() == Some(d.as_path()) && has(&["yaml", "yml"]))
    }

    fn listable(&self, path: &Path) -> bool {
        self.reachable
            .config_dir
            .as_deref()
            .is_some_and(|d| path.starts_with(d))
            || self.k3s_dropins().as_deref() == Some(path)
    }

    fn k3s_dropins(&self) -> Option<std::path::PathBuf> {
        self.reachable
            .k3s_config
            .as_ref()
            .map(|c| format!("{}.d", c.display()).into())
    }

    fn dropin(&self, path: &Path) -> bool {
        self.reachable
            .config_dir
            .as_deref()
            .is_some_and(|d| path == d.join(DROPIN_FILE))
    }

    fn legacy_dropin(&self, path: &Path) -> bool {
        self.reachable
            .config_dir
            .as_deref()
            .is_some_and(|d| LEGACY_DROPIN_FILES.iter().any(|n| path == d.join(n)))
    }
}

/// `<proc_root>/<pid>/ns/mnt`.
fn is_mount_namespace(proc_root: &Path, path: &Path) -> bool {
    let Ok(rest) = path.strip_prefix(proc_root) else {
        return false;
    };
    let parts: Vec<_> = rest.components().collect();
    matches!(parts.as_slice(),
        [Component::Normal(pid), Component::Normal(ns), Component::Normal(mnt)]
            if pid.to_str().is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                && *ns == "ns" && *mnt == "mnt")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn kubeadm(writes: bool) -> Allowance {
        let root = PathBuf::from("/host/proc/7/root");
        Allowance {
            reachable: Reachable {
                process_dir: "/host/proc/7".into(),
                config: Some(root.join("var/lib/kubelet/config.yaml")),
                config_dir: Some(root.join("etc/kubernetes/kubelet.conf.d")),
                memory_manager_state: root.join("var/lib/kubelet/memory_manager_state"),
                k3s_config: None,
            },
            writes,
        }
    }

    fn asks(a: &Allowance, request: Request) -> Result<(), String> {
        a.permits(Path::new("/host/proc"), &request)
    }

    fn read(path: &str) -> Request {
        Request::Read { path: path.into() }
    }

    #[test]
    fn the_kubelets_configuration_is_read_and_nothing_beside_it() {
        let a = kubeadm(false);
        for ok in [
            "/host/proc/7/root/var/lib/kubelet/config.yaml",
            "/host/proc/7/root/etc/kubernetes/kubelet.conf.d/10-site.conf",
            "/host/proc/7/root/etc/kubernetes/kubelet.conf.d/sub/20-x.conf",
        ] {
            assert_eq!(asks(&a, read(ok)), Ok(()), "{ok}");
        }
        for refused in [
            // The kubelet's client key and kubeconfig sit beside its configuration.
            "/host/proc/7/root/var/lib/kubelet/pki/kubelet-client-current.pem",
            "/host/proc/7/root/etc/kubernetes/kubelet.conf",
            "/host/proc/7/root/etc/kubernetes/admin.conf",
            "/host/proc/7/root/etc/shadow",
            "/host/proc/7/root/etc/kubernetes/kubelet.conf.d/../admin.conf",
            "/host/proc/7/root/etc/kubernetes/kubelet.conf.d/notes.txt",
            // Another process's view of the same paths.
            "/host/proc/8/root/var/lib/kubelet/config.yaml",
            "/host/proc/1/mem",
            "/host/proc/7/environ",
        ] {
            assert!(asks(&a, read(refused)).is_err(), "{refused}");
        }
        assert_eq!(
            asks(
                &a,
                Request::List {
                    path: "/host/proc/7/root/etc/kubernetes/kubelet.conf.d".into()
                }
            ),
            Ok(())
        );
        assert!(asks(
            &a,
            Request::List {
                path: "/host/proc/7/root/etc/kubernetes".into()
            }
        )
        .is_err());
    }

    #[test]
    fn any_processs_mount_namespace_is_read_and_no_other_link() {
        let a = kubeadm(false);
        let link = |p: &str| Request::Link { path: p.into() };
        assert_eq!(asks(&a, link("/host/proc/1/ns/mnt")), Ok(()));
        assert_eq!(asks(&a, link("/host/proc/4242/ns/mnt")), Ok(()));
        assert!(asks(&a, link("/host/proc/1/ns/net")).is_err());
        assert!(asks(&a, link("/host/proc/1/exe")).is_err());
        assert!(asks(&a, link("/host/proc/self/ns/mnt")).is_err());
        assert!(asks(&a, link("/host/proc/1/root/ns/mnt")).is_err());
    }

    #[test]
    fn writes_are_nodemems_drop_in_and_the_memory_managers_state_under_kubelet_enforcement_only() {
        let dir = "/host/proc/7/root/etc/kubernetes/kubelet.conf.d";
        let ours = PathBuf::from(dir).join(DROPIN_FILE);
        let legacy = PathBuf::from(dir).join(LEGACY_DROPIN_FILES[0]);
        let state = PathBuf::from("/host/proc/7/root/var/lib/kubelet/memory_manager_state");
        let write = |p: &Path| Request::Write {
            path: p.to_path_buf(),
            text: "x".into(),
            mode: 0o644,
        };
        let remove = |p: &Path| Request::Remove {
            path: p.to_path_buf(),
        };
        let rename = Request::Rename {
            from: legacy.clone(),
            to: ours.clone(),
        };
        let observe = kubeadm(false);
        for r in [write(&ours), remove(&ours), remove(&state), rename.clone()] {
            assert!(asks(&observe, r.clone()).is_err(), "{r:?}");
        }
        let kubelet = kubeadm(true);
        for r in [
            write(&ours),
            remove(&ours),
            remove(&legacy),
            remove(&state),
            rename,
        ] {
            assert_eq!(asks(&kubelet, r.clone()), Ok(()), "{r:?}");
        }
        for r in [
            write(&PathBuf::from(dir).join("10-site.conf")),
            write(&state),
            remove(Path::new("/host/proc/7/root/var/lib/kubelet/config.yaml")),
            Request::Rename {
                from: PathBuf::from(dir).join("10-site.conf"),
                to: ours,
            },
        ] {
            assert!(asks(&kubelet, r.clone()).is_err(), "{r:?}");
        }
    }

    #[test]
    fn k3s_configuration_and_its_drop_ins_are_read() {
        let a = Allowance {
            reachable: Reachable {
                process_dir: "/host/proc/9".into(),
                config: None,
                config_dir: None,
                memory_manager_state: "/host/proc/9/root/var/lib/kubelet/memory_manager_state"
                    .into(),
                k3s_config: Some("/host/proc/9/root/etc/rancher/k3s/config.yaml".into()),
            },
            writes: false,
        };
        assert_eq!(
            asks(&a, read("/host/proc/9/root/etc/rancher/k3s/config.yaml")),
            Ok(())
        );
        assert_eq!(
            asks(
                &a,
                read("/host/proc/9/root/etc/rancher/k3s/config.yaml.d/10.yaml")
            ),
            Ok(())
        );
        assert!(asks(&a, read("/host/proc/9/root/etc/rancher/k3s/k3s.yaml")).is_err());
        assert!(asks(
            &a,
            read("/host/proc/9/root/etc/rancher/k3s/config.yaml.d/a/b.yaml")
        )
        .is_err());
    }

    #[test]
    fn without_a_host_kubelet_nothing_but_mount_namespaces_is_answered() {
        let a = Allowance::default();
        assert!(asks(&a, read("/host/proc/7/root/var/lib/kubelet/config.yaml")).is_err());
        assert_eq!(
            asks(
                &a,
                Request::Link {
                    path: "/host/proc/1/ns/mnt".into()
                }
            ),
            Ok(())
        );
    }
}
