//! What users type, run as they would: the test bed's own kubectl, and what a process
//! costs (for the benchmarks).

use std::path::Path;
use std::process::Command;

use crate::binaries::control_plane_binaries;
use crate::Error;

/// Runs `kubectl --kubeconfig=KUBECONFIG ARGS...`; its stdout, or its stderr as the error.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> Result<String, Error> {
    let bin = control_plane_binaries()?;
    let out = Command::new(&bin.kubectl)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args)
        .output()
        .map_err(|e| Error::Setup(format!("cannot run {}: {e}", bin.kubectl.display())))?;
    if !out.status.success() {
        return Err(Error::Api(format!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `helm --kubeconfig KUBECONFIG ARGS...`; its stdout, or its stderr as the error.
pub fn helm(kubeconfig: &Path, args: &[&str]) -> Result<String, Error> {
    let bin = control_plane_binaries()?;
    let out = Command::new(&bin.helm)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args)
        .output()
        .map_err(|e| Error::Setup(format!("cannot run {}: {e}", bin.helm.display())))?;
    if !out.status.success() {
        return Err(Error::Api(format!(
            "helm {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A process's CPU time (utime + stime, clock ticks) and resident memory (KiB).
pub fn cpu_ticks_and_rss_kib(pid: u32) -> Result<(u64, u64), Error> {
    let read = |file: &str| {
        let path = format!("/proc/{pid}/{file}");
        std::fs::read_to_string(&path).map_err(|e| Error::Setup(format!("{path}: {e}")))
    };
    let stat = read("stat")?;
    let bad = || Error::Setup(format!("/proc/{pid}/stat: unexpected format"));
    // Fields are counted after the command's closing parenthesis (it may hold spaces).
    let after = stat
        .get(stat.rfind(')').ok_or_else(bad)? + 2..)
        .ok_or_else(bad)?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .ok_or_else(bad)
    };
    let ticks = field(11)? + field(12)?;
    let rss = read("status")?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Error::Setup(format!("/proc/{pid}/status: no VmRSS")))?;
    Ok((ticks, rss))
}

/// Creates a pod, retrying for up to 30 s while its namespace's default ServiceAccount
/// is not there yet (the controller-manager creates it just after the namespace, and
/// admission refuses pods until then).
pub async fn create_pod(
    api: &kube::Api<k8s_openapi::api::core::v1::Pod>,
    pod: &k8s_openapi::api::core::v1::Pod,
) -> Result<k8s_openapi::api::core::v1::Pod, Error> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match api.create(&kube::api::PostParams::default(), pod).await {
            Ok(p) => return Ok(p),
            Err(kube::Error::Api(s))
                if s.message.contains("serviceaccount") && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(e) => {
                return Err(Error::Api(format!(
                    "create pod {}: {e}",
                    pod.metadata.name.as_deref().unwrap_or("")
                )))
            }
        }
    }
}

/// The Events (events.k8s.io/v1) in `namespace` with `reason` about the object named
/// `name`; none when the list fails (a check retries).
pub async fn events_about(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    reason: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    let events: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(client.clone(), namespace);
    events
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let (_, rss) = super::cpu_ticks_and_rss_kib(std::process::id()).unwrap();
        assert!(rss > 0);
        assert!(super::cpu_ticks_and_rss_kib(u32::MAX).is_err());
    }
}
