//! What an install writes beside the controller's `--agent-*` flags for the admission
//! policy that narrows the controller to its own agent DaemonSet
//! (`deploy/controller/admission-policy.yaml`, `nodemem-controller-agent-daemonset`):
//! the ConfigMap `nodemem-agent-admission` with the agents' image, state directory and
//! kubelet drop-in directory, as the chart renders it from the same values. A test
//! that runs the controller itself writes it from the controller's arguments, as an
//! installer would.

use std::path::Path;

use crate::error::Error;

/// The ConfigMap the policy reads its parameters from.
pub const AGENT_ADMISSION: &str = "nodemem-agent-admission";
/// The controller's default `--agent-state-dir`.
const DEFAULT_STATE_DIR: &str = "/var/lib/nodemem";

/// The value of `--flag` in `args` (`--flag value` or `--flag=value`).
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let mut found = None;
    for (i, a) in args.iter().enumerate() {
        if a == name {
            found = args.get(i + 1).map(String::as_str);
        } else if let Some(v) = a.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
            found = Some(v);
        }
    }
    found
}

/// The ConfigMap for a controller run with `args` in `namespace`; None when it deploys
/// no agents (no `--agent-image`: a bed's controller is a process, given the image
/// the chart's controller would read from its own pod).
pub fn agent_admission(namespace: &str, args: &[String]) -> Option<serde_json::Value> {
    let image = flag(args, "--agent-image")?;
    let state_dir = flag(args, "--agent-state-dir").unwrap_or(DEFAULT_STATE_DIR);
    let kubelet_config_dir = flag(args, "--agent-kubelet-config-dir").unwrap_or("");
    // The agents' pod settings: their extra host paths and SELinux type.
    let pod: serde_json::Value = flag(args, "--agent-pod")
        .and_then(|p| serde_json::from_str(p).ok())
        .unwrap_or_default();
    let extra_host_paths: Vec<&str> = pod["extraVolumes"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter_map(|v| v["hostPath"]["path"].as_str())
                .collect()
        })
        .unwrap_or_default();
    let selinux_type = pod["seLinuxOptions"]["type"].as_str().unwrap_or("");
    Some(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": AGENT_ADMISSION, "namespace": namespace},
        "data": {"image": image, "stateDir": state_dir, "kubeletConfigDir": kubelet_config_dir,
            "extraHostPaths": extra_host_paths.join(","), "seLinuxType": selinux_type},
    }))
}

/// Writes [`agent_admission`] with kubectl (server-side apply, as an install would);
/// nothing when the controller deploys no agents.
pub fn write_agent_admission(
    kubeconfig: &Path,
    namespace: &str,
    args: &[String],
) -> Result<(), Error> {
    let Some(config_map) = agent_admission(namespace, args) else {
        return Ok(());
    };
    let dir = tempfile::tempdir().map_err(|e| Error::Setup(format!("a temporary file: {e}")))?;
    let file = dir.path().join("agent-admission.json");
    std::fs::write(&file, config_map.to_string())
        .map_err(|e| Error::Setup(format!("{}: {e}", file.display())))?;
    crate::clients::kubectl(
        kubeconfig,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=nodemem-install",
            "-f",
            file.to_str().unwrap_or_default(),
        ],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parameters_follow_the_controllers_flags() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            agent_admission("ns", &args(&["controller", "--tick-seconds", "1"])),
            None
        );
        let c = agent_admission(
            "ns",
            &args(&["--agent-image", "a:1", "--agent-kubelet-config-dir=/etc/k"]),
        )
        .unwrap();
        assert_eq!(c["metadata"]["namespace"], "ns");
        assert_eq!(c["data"]["image"], "a:1");
        assert_eq!(c["data"]["stateDir"], DEFAULT_STATE_DIR);
        assert_eq!(c["data"]["kubeletConfigDir"], "/etc/k");
        let c = agent_admission(
            "ns",
            &args(&["--agent-image=b:2", "--agent-state-dir", "/s"]),
        )
        .unwrap();
        assert_eq!(
            (c["data"]["image"].as_str(), c["data"]["stateDir"].as_str()),
            (Some("b:2"), Some("/s"))
        );
        assert_eq!(c["data"]["kubeletConfigDir"], "");
    }
}
