//! Starts the test control plane for manual use and keeps it running until Ctrl-C:
//! `cargo run -p nodemem-testkit --bin nodemem-control-plane [-- --crds DIR]`.

use std::path::PathBuf;

use nodemem_testkit::ControlPlane;

fn main() {
    let mut args = std::env::args().skip(1);
    let mut crds: Option<PathBuf> = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--crds" => crds = args.next().map(PathBuf::from),
            "-h" | "--help" => {
                println!("usage: nodemem-control-plane [--crds DIR]\nStarts etcd, kube-apiserver and kube-controller-manager on loopback and prints an admin kubeconfig path; Ctrl-C stops them.");
                return;
            }
            other => {
                eprintln!("error: unknown argument {other:?} (see --help)");
                std::process::exit(2);
            }
        }
    }
    let cp = match ControlPlane::start() {
        Ok(cp) => cp,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    if let Some(dir) = crds {
        let rt = tokio::runtime::Runtime::new().expect("a runtime");
        if let Err(e) = rt.block_on(nodemem_testkit::crds::install_dir(&cp, &dir)) {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
    println!("control plane ready at {}", cp.server);
    println!("export KUBECONFIG={}", cp.admin_kubeconfig().display());
    println!("logs: {}", cp.dir().display());
    println!("Ctrl-C stops it.");
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        let _ = tokio::signal::ctrl_c().await;
    });
    drop(cp);
}
