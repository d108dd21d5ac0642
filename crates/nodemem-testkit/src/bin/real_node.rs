//! Starts a test control plane and one real node (qemu, systemd, containerd, the
//! kubelet) for manual use, until Ctrl-C:
//! `cargo run -p nodemem-testkit --bin nodemem-real-node [-- --cgroupfs] [--name NAME]`.
//! Prints the admin kubeconfig and the node's share: a script written to
//! `SHARE/requests/<n>.sh` runs on the node, its output lands in `SHARE/responses/`.

use nodemem_testkit::binaries::control_plane_binaries;
use nodemem_testkit::real_node::{Driver, NodeImage, RealNode, RealNodeSpec};
use nodemem_testkit::ControlPlane;

fn fail(e: impl std::fmt::Display) -> ! {
    eprintln!("error: {e}");
    std::process::exit(1);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut driver = Driver::Systemd;
    let mut name = "real-1".to_string();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--cgroupfs" => driver = Driver::Cgroupfs,
            "--name" => name = args.next().unwrap_or_else(|| fail("--name needs a value")),
            "-h" | "--help" => {
                println!("usage: nodemem-real-node [--cgroupfs] [--name NAME]\nStarts a control plane and a real node joined to it; Ctrl-C stops both.");
                return;
            }
            other => fail(format!("unknown argument {other:?} (see --help)")),
        }
    }
    let mut cp = ControlPlane::start().unwrap_or_else(|e| fail(e));
    cp.start_scheduler().unwrap_or_else(|e| fail(e));
    let bin = control_plane_binaries().unwrap_or_else(|e| fail(e));
    let image = NodeImage::build(&bin.kubelet, None).unwrap_or_else(|e| fail(e));
    let node =
        RealNode::boot(&cp, &image, &RealNodeSpec::new(&name, driver)).unwrap_or_else(|e| fail(e));
    println!("export KUBECONFIG={}", cp.admin_kubeconfig().display());
    println!("node {name}: share {}", node.share().display());
    println!("Ctrl-C stops it.");
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        let _ = tokio::signal::ctrl_c().await;
    });
    drop(node);
    drop(cp);
}
