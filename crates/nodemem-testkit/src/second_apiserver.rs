//! A second kube-apiserver beside the control plane's: the same etcd, certificates and
//! flags on another port, as a highly available control plane runs several behind one
//! address (every managed offering does). With a [`crate::proxy::TcpProxy`] in front
//! standing for the load balancer, a benchmark takes one apiserver out the way a
//! rolling upgrade does and sees what the clients' watches do on the other.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kube::Client;

use crate::binaries::control_plane_binaries;
use crate::control_plane::{
    client_from_kubeconfig, free_port, wait_port, ControlPlane, READY_TIMEOUT,
};
use crate::process::Process;
use crate::Error;

/// The second apiserver, stopped when dropped.
pub struct SecondApiserver {
    process: Process,
    port: u16,
    admin_kubeconfig: PathBuf,
}

impl SecondApiserver {
    /// Starts it with `cp`'s apiserver flags on a free port and waits until its
    /// `/readyz` answers `ok`. Blocking; call it outside an async runtime.
    pub fn start(cp: &ControlPlane) -> Result<SecondApiserver, Error> {
        let port = free_port()?;
        let args: Vec<String> = cp
            .apiserver_args()
            .iter()
            .map(|a| {
                if a.starts_with("--secure-port=") {
                    format!("--secure-port={port}")
                } else {
                    a.clone()
                }
            })
            .collect();
        let bin = control_plane_binaries()?;
        let mut process = Process::spawn(
            "kube-apiserver-2",
            &bin.kube_apiserver,
            &args,
            &cp.dir().join("kube-apiserver-2.log"),
        )?;
        wait_port(&mut process, port)?;
        // The admin's kubeconfig, pointed at this apiserver.
        let admin = std::fs::read_to_string(cp.admin_kubeconfig())
            .map_err(|e| Error::Setup(format!("read the admin kubeconfig: {e}")))?;
        let admin_kubeconfig = cp.dir().join("admin-2.kubeconfig");
        std::fs::write(
            &admin_kubeconfig,
            admin.replace(&cp.server, &format!("https://127.0.0.1:{port}")),
        )
        .map_err(|e| Error::Setup(format!("write {}: {e}", admin_kubeconfig.display())))?;
        let second = SecondApiserver {
            process,
            port,
            admin_kubeconfig,
        };
        second.wait_ready()?;
        Ok(second)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// A kubeconfig with cluster-admin rights on this apiserver.
    pub fn admin_kubeconfig(&self) -> &std::path::Path {
        &self.admin_kubeconfig
    }

    fn wait_ready(&self) -> Result<(), Error> {
        let probe = async {
            let client: Client = client_from_kubeconfig(&self.admin_kubeconfig).await?;
            let deadline = Instant::now() + READY_TIMEOUT;
            loop {
                let req = http::Request::get("/readyz")
                    .body(Vec::new())
                    .map_err(|e| Error::Setup(e.to_string()))?;
                let last = match client.request_text(req).await {
                    Ok(body) if body.trim() == "ok" => return Ok(()),
                    Ok(body) => body,
                    Err(e) => e.to_string(),
                };
                if Instant::now() > deadline {
                    return Err(Error::Setup(format!(
                        "the second apiserver not ready after {}s (last answer: {last}); log:\n{}",
                        READY_TIMEOUT.as_secs(),
                        self.process.log_tail(15)
                    )));
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        };
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("a tokio runtime")
                        .block_on(probe)
                })
                .join()
                .expect("the readiness probe does not panic")
        })
    }
}
