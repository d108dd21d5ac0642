//! The Helm chart, with the real helm: it lints, renders what a production install
//! needs, carries the same RBAC as deploy/, and once installed into a control plane of
//! its own, the controller and the agents run with the chart's own service-account
//! tokens: a policy rolls out (RBAC is enough), and what they must not do is denied
//! (RBAC is no more than that).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nodemem_testkit::bed::{Bed, BedSpec, Install, PoolSpec};
use serde_json::{json, Value};

use crate::common::repo;

pub(crate) fn helm(args: &[&str]) -> String {
    let bin = nodemem_testkit::binaries::control_plane_binaries().unwrap();
    let out = Command::new(&bin.helm).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "helm {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every object of a multi-document YAML stream.
pub(crate) fn documents(text: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(text)
        .filter_map(|d| Value::deserialize(d).ok())
        .filter(|v| v.is_object())
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// The `--agent-pod` argument the chart passes the controller with these `--set`s.
fn rendered_agent_pod(sets: &[&str]) -> String {
    let chart = repo().join("charts/nodemem");
    let mut args = vec!["template", "nodemem", chart.to_str().unwrap()];
    for set in sets {
        args.extend(["--set", set]);
    }
    let docs = documents(&helm(&args));
    let deployment = find(&docs, "Deployment", "nodemem-controller");
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .find(|a| a.starts_with("--agent-pod="))
        .expect("the chart passes --agent-pod")
        .to_string()
}

/// The agents' values the install test sets, and what its DaemonSet must then hold.
const AGENT_VALUES: [&str; 10] = [
    "agent.logLevel=debug",
    "agent.podLabels.team=platform",
    "agent.podAnnotations.note=chart",
    "agent.resources.limits.memory=128Mi",
    "agent.env[0].name=HTTPS_PROXY",
    "agent.env[0].value=http://proxy:3128",
    "agent.seLinuxOptions.type=spc_t",
    "agent.appArmorProfile.type=Localhost",
    "agent.appArmorProfile.localhostProfile=nodemem-agent",
    "agent.extraArgs[0]=--per-container-metrics",
];

fn deploy_docs() -> Vec<Value> {
    [
        "deploy/agent/rbac.yaml",
        "deploy/agent/admission-policy.yaml",
        "deploy/controller/rbac.yaml",
        "deploy/controller/admission-policy.yaml",
    ]
    .iter()
    .flat_map(|f| documents(&std::fs::read_to_string(repo().join(f)).unwrap()))
    .collect()
}

#[test]
fn the_chart_lints_and_renders_what_production_needs() {
    let chart = repo().join("charts/nodemem");
    let chart = chart.to_str().unwrap();
    let lint = helm(&["lint", "--strict", chart]);
    assert!(lint.contains("0 chart(s) failed"), "{lint}");

    let rendered = helm(&[
        "template",
        "nodemem",
        chart,
        "--namespace",
        "nodemem-system",
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "grafanaDashboard.enabled=true",
        "--set",
        "agent.kubeletConfigDir=/etc/kubernetes/kubelet.conf.d",
        "--set",
        "image.tag=1.2.3",
        "--set",
        "imagePullSecrets[0].name=regcred",
    ]);
    let docs = documents(&rendered);
    let deployment = find(&docs, "Deployment", "nodemem-controller");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "nodemem-controller");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "ghcr.io/nodemem/nodemem:1.2.3");
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for expected in [
        "controller",
        "--namespace=$(POD_NAMESPACE)",
        "--deployment=nodemem-controller",
        "--leader-elect=true",
        // The agents follow the controller's container: the image is named once.
        "--agent-image-from-container=controller",
        "--agent-kubelet-config-dir=/etc/kubernetes/kubelet.conf.d",
        "--agent-state-dir=/var/lib/nodemem",
        "--write-concurrency=64",
        "--event-queue=60000",
        // A private registry: the agents pull with the chart's secrets too.
        "--agent-image-pull-secret=regcred",
        "--agent-pod-security-labels",
        // Every mode by default: an upgrade keeps what policies may ask for.
        "--agent-enforcement-modes=Agent,Kubelet,Observe",
    ] {
        assert!(args.contains(&expected), "{expected} not in {args:?}");
    }
    assert!(
        !args.iter().any(|a| a.starts_with("--agent-image=")),
        "{args:?}"
    );
    assert_eq!(container["name"], "controller");
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "regcred"}]));
    // What the admission policy admits for the agents is the controller's image.
    let admitted = find(&docs, "ConfigMap", "nodemem-agent-admission");
    assert_eq!(
        admitted["data"],
        json!({"image": "ghcr.io/nodemem/nodemem:1.2.3", "stateDir": "/var/lib/nodemem",
            "kubeletConfigDir": "/etc/kubernetes/kubelet.conf.d", "extraHostPaths": "",
            "seLinuxType": ""})
    );
    // The agents' pod settings: the values.yaml defaults, as the controller's own.
    let agent_pod = rendered_agent_pod(&[]);
    let agent_pod: Value =
        serde_json::from_str(agent_pod.strip_prefix("--agent-pod=").unwrap()).unwrap();
    assert_eq!(
        agent_pod["nodeSelector"],
        json!({"kubernetes.io/os": "linux"})
    );
    assert_eq!(agent_pod["tolerations"], json!([{"operator": "Exists"}]));
    assert_eq!(
        agent_pod["resources"]["limits"]["memory"],
        nodemem_controller::agents::pod::DEFAULT_MEMORY_LIMIT
    );
    assert_eq!(
        nodemem_controller::agents::pod::AgentPod::parse(&agent_pod.to_string()),
        Ok(Default::default()),
        "values.yaml's agent defaults are the controller's"
    );
    // Every flag the chart passes is one the controller has.
    let help = Command::new(nodemem_e2e::nodemem())
        .args(["controller", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in args
        .iter()
        .filter_map(|a| a.strip_prefix("--"))
        .map(|a| a.split('=').next().unwrap())
    {
        assert!(
            help.contains(&format!("--{flag}")),
            "the controller has no --{flag}"
        );
    }
    // Fewer modes: the flag carries them; the kubelet's settings without Kubelet are
    // refused by the controller by name, before it connects to anything.
    let observe = documents(&helm(&[
        "template",
        "nodemem",
        chart,
        "--set",
        "agent.enforcementModes={Observe,Agent}",
    ]));
    let observe_args = &find(&observe, "Deployment", "nodemem-controller")["spec"]["template"]
        ["spec"]["containers"][0]["args"];
    assert!(
        observe_args
            .as_array()
            .unwrap()
            .contains(&json!("--agent-enforcement-modes=Observe,Agent")),
        "{observe_args}"
    );
    for (flags, says) in [
        (
            vec!["--agent-enforcement-modes=Agent,Observe", "--agent-kubelet-config-dir=/etc/kubernetes/kubelet.conf.d"],
            "--agent-kubelet-config-dir serves enforcement: Kubelet, which --agent-enforcement-modes (Agent,Observe) does not install",
        ),
        (
            vec!["--agent-enforcement-modes=Agent,Kubelt"],
            "unknown enforcement mode \"Kubelt\": the modes are Agent, Kubelet and Observe",
        ),
    ] {
        let out = Command::new(nodemem_e2e::nodemem())
            .arg("controller")
            .args(&flags)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && said.contains(says), "{flags:?}: {said}");
    }
    // Before an uninstall takes the RBAC away, a pre-delete hook stands the controller
    // down with the controller's own account; its flags are `nodemem stand-down`'s.
    let hook = find(&docs, "Pod", "nodemem-stand-down");
    assert_eq!(
        hook["metadata"]["annotations"]["helm.sh/hook"],
        "pre-delete"
    );
    assert_eq!(hook["spec"]["serviceAccountName"], "nodemem-controller");
    assert_eq!(hook["spec"]["restartPolicy"], "Never");
    assert_eq!(
        hook["spec"]["imagePullSecrets"],
        json!([{"name": "regcred"}])
    );
    let hook_args: Vec<&str> = hook["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        hook_args,
        [
            "stand-down",
            "--namespace=nodemem-system",
            "--deployment=nodemem-controller",
            "--hook-of-release=nodemem",
            "--give-back",
            "--give-back-seconds=180"
        ]
    );
    let help = Command::new(nodemem_e2e::nodemem())
        .args(["stand-down", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--namespace",
        "--deployment",
        "--give-back",
        "--give-back-seconds",
        "--hook-of-release",
    ] {
        assert!(help.contains(flag), "nodemem stand-down has no {flag}");
    }
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(container["resources"]["limits"]["memory"].is_string());
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        find(&docs, "PodDisruptionBudget", "nodemem-controller")["spec"]["minAvailable"],
        1
    );
    find(&docs, "ServiceMonitor", "nodemem-controller");
    // The agents' per-pod series keep the workload's namespace and pod labels.
    let agents = find(&docs, "ServiceMonitor", "nodemem-agent");
    assert_eq!(agents["spec"]["endpoints"][0]["honorLabels"], true);
    find(&docs, "ServiceAccount", "nodemem-agent");
    let vap = find(
        &docs,
        "ValidatingAdmissionPolicy",
        "nodemem-agent-node-scope",
    );
    // The agents' service account by name, in whatever namespace the install is.
    assert_eq!(
        vap["spec"]["matchConditions"][0]["expression"],
        r#"request.userInfo.username.startsWith("system:serviceaccount:") && request.userInfo.username.endsWith(":nodemem-agent")"#
    );
    find(
        &docs,
        "ValidatingAdmissionPolicyBinding",
        "nodemem-agent-node-scope",
    );

    // The dashboard is valid JSON and queries only metrics the binaries export.
    let dashboard = find(&docs, "ConfigMap", "nodemem-dashboard");
    let json: Value =
        serde_json::from_str(dashboard["data"]["nodemem.json"].as_str().unwrap()).unwrap();
    let catalog = std::fs::read_to_string(repo().join("docs/metrics.md")).unwrap();
    let mut queried = 0;
    for panel in json["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for name in expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("nodemem_"))
            {
                let base = name.trim_end_matches("_bucket");
                assert!(
                    catalog.contains(&format!("`{base}`")),
                    "the dashboard queries {name}, which nodemem does not export"
                );
                queried += 1;
            }
        }
    }
    assert!(queried >= 10);

    // The chart's RBAC and admission policy are deploy/'s, with the release namespace.
    let deploy = deploy_docs();
    for (kind, name) in [
        ("ClusterRole", "nodemem-agent"),
        ("ClusterRole", "nodemem-controller"),
        ("Role", "nodemem-controller"),
    ] {
        assert_eq!(
            find(&docs, kind, name)["rules"],
            find(&deploy, kind, name)["rules"],
            "{kind} {name}"
        );
    }
    assert_eq!(
        vap["spec"]["validations"],
        find(
            &deploy,
            "ValidatingAdmissionPolicy",
            "nodemem-agent-node-scope"
        )["spec"]["validations"]
    );
    let policy = "nodemem-controller-agent-daemonset";
    for part in ["validations", "variables", "matchConstraints", "paramKind"] {
        assert_eq!(
            find(&docs, "ValidatingAdmissionPolicy", policy)["spec"][part],
            find(&deploy, "ValidatingAdmissionPolicy", policy)["spec"][part],
            "{policy}: {part}"
        );
    }
    // Off by default: no ServiceMonitor (its CRD may not exist) and no dashboard.
    let plain = documents(&helm(&["template", "nodemem", chart]));
    assert!(!plain.iter().any(|d| d["kind"] == "ServiceMonitor"
        || (d["kind"] == "ConfigMap" && d["metadata"]["name"] == "nodemem-dashboard")));
}

fn kubectl_as(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let bin = nodemem_testkit::binaries::control_plane_binaries().unwrap();
    let out = Command::new(&bin.kubectl)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `helm install` into a control plane of its own, the controller and agents running on
/// the chart's own service-account tokens: a rollout completes, the DaemonSet and Lease
/// are written; `kubectl auth can-i` and the admission policy deny what they must not
/// do; `kubectl apply -k examples/` and no drift after; the chart's `helm uninstall`
/// runs its pre-delete hook (`nodemem stand-down --give-back`, the test playing the
/// kubelet for the hook pod): every node is given back (every memory file of every
/// node's tree reads what it read before nodemem), no NodeMemoryConfig, Lease or agent
/// DaemonSet is left, and every policy is then deleted at once; the chart installs into
/// a control plane whose PodSecurity default is `baseline` (the controller labels its
/// namespace; without it the agents' pods are refused), the agents pull with its
/// `imagePullSecrets`, their DaemonSet is owned by the controller's Deployment; the
/// chart's agent values (resources, log level, labels, annotations, env) reach the
/// DaemonSet the controller builds, and its defaults are the controller's own (issue
/// 43); the uninstall takes back the PodSecurity labels the controller set on its
/// namespace and leaves one a person changed (`warn=baseline`) and one of their own.
#[tokio::test]
async fn the_chart_installs_and_its_rbac_is_enough_and_no_more() {
    let spec = BedSpec {
        nodemem: nodemem_e2e::nodemem().into(),
        repo: repo(),
        pools: vec![PoolSpec::new("chart", 2)],
        agent_resync_seconds: 5,
        install: Install::Chart {
            release: "nodemem".into(),
            // The image the chart's admission policy admits for the agents is the
            // controller's --agent-image below: the chart's controller reads it from its
            // own pod (--agent-image-from-container, tests/apiserver/own_image.rs), which
            // the bed's controller process is not.
            args: [
                "controller.replicas=2",
                "image.repository=nodemem",
                "image.tag=chart-test",
            ]
            .iter()
            .chain(AGENT_VALUES.iter())
            .flat_map(|v| ["--set".to_string(), v.to_string()])
            .collect(),
            chart: None,
        },
        controller_args: vec![
            "--namespace=nodemem-system".into(),
            "--deployment=nodemem-controller".into(),
            "--agent-image=nodemem:chart-test".into(),
            "--agent-image-pull-secret=regcred".into(),
            "--agent-pod-security-labels".into(),
            // As the chart's Deployment passes it.
            rendered_agent_pod(&AGENT_VALUES),
        ],
        // A hardened cluster: namespaces without labels get baseline, which refuses
        // the agents (host paths, the host's PID namespace) unless the chart labels
        // its namespace.
        pod_security_default: Some("baseline".into()),
    };
    let mut bed = Bed::start(&spec, &|_| {})
        .await
        .expect("the bed starts with the chart");
    // What the nodes' memory files read before nodemem governs them: an uninstall gives
    // them back.
    let before = memory_files(&bed);
    let admin = bed.admin_kubeconfig().to_path_buf();
    let releases =
        nodemem_testkit::clients::helm(&admin, &["list", "-n", "nodemem-system", "-o", "json"])
            .unwrap();
    let releases: Value = serde_json::from_str(&releases).unwrap();
    assert_eq!(releases[0]["name"], "nodemem");
    assert_eq!(releases[0]["status"], "deployed");

    let policy = repo().join("examples/general/policy.yaml");
    let text = std::fs::read_to_string(&policy)
        .unwrap()
        .replace("nodemem.io/pool: general", "nodemem.io/pool: chart")
        .replace("minReadySeconds: 60", "minReadySeconds: 1");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.yaml");
    std::fs::write(&file, text).unwrap();
    bed.kubectl(&["apply", "-f", file.to_str().unwrap()])
        .unwrap();

    // The rollout completes: the controller wrote configs, status, Events, its Lease and
    // the agent DaemonSet; each agent read its node and pods and wrote its config's
    // status; all with the chart's tokens.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(dead) = bed.exited() {
            panic!("{dead}");
        }
        let out = bed
            .kubectl(&["get", "nmp", "general", "-o", "json"])
            .unwrap();
        let p: Value = serde_json::from_str(&out).unwrap();
        let ready = p["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        if ready && p["status"]["readyNodes"] == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the rollout did not complete with the chart's RBAC: {p}\ncontroller:\n{}",
            nodemem_testkit::process::tail(bed.controller_log(), 30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The DaemonSet is written after a decision, not before the rollout's first step:
    // waited for (its write may be retried on the next reconcile).
    let deadline = Instant::now() + Duration::from_secs(30);
    let ds = loop {
        let image = bed.kubectl(&[
            "get",
            "daemonset",
            "nodemem-agent",
            "-n",
            "nodemem-system",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ]);
        match image {
            Ok(image) => break image,
            Err(e) if Instant::now() >= deadline => panic!(
                "no agent DaemonSet: {e}\ncontroller:\n{}",
                nodemem_testkit::process::tail(bed.controller_log(), 30)
            ),
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    };
    assert_eq!(ds, "nodemem:chart-test");
    let pull = bed
        .kubectl(&[
            "get",
            "daemonset",
            "nodemem-agent",
            "-n",
            "nodemem-system",
            "-o",
            "jsonpath={.spec.template.spec.imagePullSecrets[*].name}",
        ])
        .unwrap();
    assert_eq!(pull, "regcred", "the agents pull with the chart's secrets");
    // The chart's agent values, in the DaemonSet the controller built.
    let template = bed
        .kubectl(&[
            "get",
            "daemonset",
            "nodemem-agent",
            "-n",
            "nodemem-system",
            "-o",
            "jsonpath={.spec.template}",
        ])
        .unwrap();
    let template: Value = serde_json::from_str(&template).unwrap();
    let agent = &template["spec"]["containers"][0];
    assert_eq!(
        agent["resources"]["limits"]["memory"], "128Mi",
        "{template}"
    );
    assert_eq!(agent["resources"]["requests"]["memory"], "32Mi");
    let env: Vec<String> = agent["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            format!(
                "{}={}",
                v["name"].as_str().unwrap(),
                v["value"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert!(env.contains(&"RUST_LOG=debug".to_string()), "{env:?}");
    assert!(
        env.contains(&"HTTPS_PROXY=http://proxy:3128".to_string()),
        "{env:?}"
    );
    assert_eq!(template["metadata"]["labels"]["team"], "platform");
    assert_eq!(template["metadata"]["annotations"]["note"], "chart");
    assert_eq!(
        agent["securityContext"]["seLinuxOptions"]["type"], "spc_t",
        "{template}"
    );
    assert_eq!(
        agent["securityContext"]["appArmorProfile"],
        json!({"type": "Localhost", "localhostProfile": "nodemem-agent"}),
        "{template}"
    );
    assert_eq!(
        agent["args"].as_array().unwrap().last().unwrap(),
        "--per-container-metrics",
        "{template}"
    );
    assert_eq!(
        template["spec"]["nodeSelector"]["kubernetes.io/os"],
        "linux"
    );
    assert_eq!(
        template["spec"]["priorityClassName"],
        "system-node-critical"
    );
    // Owned by the controller's Deployment: Argo CD shows the agents under the
    // release's Deployment, and they go with it.
    let owner = bed
        .kubectl(&[
            "get",
            "daemonset",
            "nodemem-agent",
            "-n",
            "nodemem-system",
            "-o",
            "jsonpath={.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}",
        ])
        .unwrap();
    assert_eq!(owner, "Deployment/nodemem-controller");
    // The cluster defaults to baseline: the controller labelled its namespace, and the
    // DaemonSet controller's pods for both nodes were admitted.
    let labels = bed
        .kubectl(&["get", "namespace", "nodemem-system", "-o", "json"])
        .unwrap();
    let labels: Value = serde_json::from_str(&labels).unwrap();
    for mode in ["enforce", "audit", "warn"] {
        assert_eq!(
            labels["metadata"]["labels"][format!("pod-security.kubernetes.io/{mode}")],
            "privileged",
            "{labels}"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pods = bed
            .kubectl(&[
                "get",
                "pods",
                "-n",
                "nodemem-system",
                "-l",
                "app.kubernetes.io/name=nodemem-agent",
                "-o",
                "name",
            ])
            .unwrap();
        if pods.lines().count() == 2 {
            break;
        }
        let refused = bed
            .kubectl(&[
                "get",
                "events",
                "-n",
                "nodemem-system",
                "--field-selector",
                "reason=FailedCreate",
                "-o",
                "jsonpath={.items[*].message}",
            ])
            .unwrap_or_default();
        assert!(
            Instant::now() < deadline,
            "the agents' pods were not created: {pods}; refused: {refused}\nDaemonSet:\n{}\nevents:\n{}\ncontroller:\n{}",
            bed.kubectl(&["get", "daemonset", "-n", "nodemem-system", "-o", "yaml"])
                .unwrap_or_default(),
            bed.kubectl(&["get", "events", "-n", "nodemem-system"])
                .unwrap_or_default(),
            nodemem_testkit::process::tail(bed.controller_log(), 20)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bed.kubectl(&["get", "lease", "nodemem-controller", "-n", "nodemem-system"])
        .unwrap();
    let nmc = bed
        .kubectl(&[
            "get",
            "nmc",
            "chart-1",
            "-o",
            "jsonpath={.status.observedRevision}",
        ])
        .unwrap();
    assert!(!nmc.is_empty());

    // No more than that.
    let controller = bed.controller_kubeconfig().await.unwrap();
    let agent = bed.agent_kubeconfig("chart-1").await.unwrap();
    let mut can: BTreeMap<String, bool> = BTreeMap::new();
    for (who, kubeconfig, args) in [
        (
            "controller",
            &controller,
            vec!["create", "pods", "--subresource=eviction", "-A"],
        ),
        (
            "controller",
            &controller,
            vec!["patch", "nodememorypolicies", "--subresource=status"],
        ),
        ("controller", &controller, vec!["delete", "nodes"]),
        (
            "controller",
            &controller,
            vec!["get", "secrets", "-n", "nodemem-system"],
        ),
        (
            "controller",
            &controller,
            vec!["patch", "nodememorypolicies"],
        ),
        (
            "controller",
            &controller,
            vec!["create", "leases", "-n", "default"],
        ),
        (
            "controller",
            &controller,
            vec!["patch", "namespaces/nodemem-system"],
        ),
        (
            "controller",
            &controller,
            vec!["patch", "namespaces/default"],
        ),
        (
            "agent",
            &agent,
            vec!["patch", "nodememoryconfigs", "--subresource=status"],
        ),
        ("agent", &agent, vec!["create", "nodememoryconfigs"]),
        ("agent", &agent, vec!["patch", "nodes"]),
        ("agent", &agent, vec!["get", "secrets", "-A"]),
    ] {
        let mut full = vec!["auth", "can-i"];
        full.extend(args.iter().copied());
        let (yes, out) = kubectl_as(kubeconfig, &full);
        assert_eq!(yes, out.trim_start().starts_with("yes"), "{out}");
        can.insert(format!("{who} {}", args.join(" ")), yes);
    }
    let expected: BTreeMap<String, bool> = [
        ("controller create pods --subresource=eviction -A", true),
        (
            "controller patch nodememorypolicies --subresource=status",
            true,
        ),
        ("controller delete nodes", false),
        ("controller get secrets -n nodemem-system", false),
        // The handoff finalizer and a spent rollback request (metadata only).
        ("controller patch nodememorypolicies", true),
        ("controller create leases -n default", false),
        // Its own namespace's PodSecurity labels, no other namespace.
        ("controller patch namespaces/nodemem-system", true),
        ("controller patch namespaces/default", false),
        ("agent patch nodememoryconfigs --subresource=status", true),
        ("agent create nodememoryconfigs", false),
        ("agent patch nodes", false),
        ("agent get secrets -A", false),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(can, expected);
    // RBAC lets every agent patch config status; the chart's admission policy keeps each
    // to its own node's.
    let (ok, out) = kubectl_as(
        &agent,
        &[
            "patch",
            "nmc",
            "chart-2",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"lastError":"from chart-1"}}"#,
        ],
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("may only change the NodeMemoryConfig of its own node (chart-1), not chart-2"),
        "{out}"
    );

    // The GitOps tree (it takes over the policy above, releasing the chart pool) applies
    // as is; once the controller has reported on it, `kubectl diff -k` finds nothing.
    let examples = repo().join("examples");
    let examples = examples.to_str().unwrap();
    bed.kubectl(&["apply", "-k", examples]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = bed.kubectl(&["get", "nmp", "-o", "jsonpath={range .items[*]}{.metadata.name}={.status.observedGeneration}/{.metadata.generation} {end}"]).unwrap();
        let seen = out.split_whitespace().filter(|p| {
            let (_, g) = p.split_once('=').unwrap();
            let (a, b) = g.split_once('/').unwrap();
            a == b
        });
        // Every policy of examples/kustomization.yaml (starter, general, numa-database,
        // batch, database, classes' mixed).
        if seen.count() == 6 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the controller did not report on every example: {out}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (no_drift, out) = kubectl_as(&admin, &["diff", "-k", examples]);
    assert!(
        no_drift,
        "kubectl diff -k examples/ after the controller reported:\n{out}"
    );

    // helm uninstall leaves no policy Terminating: its pre-delete hook scales the
    // controller to zero and lets go of every policy before the RBAC goes. No kubelet
    // runs pods here, so the test plays it: it runs the hook pod's command with the
    // pod's service account, stops the controller process once its Deployment is at
    // zero, and reports the hook pod Succeeded.
    // The controller labelled its namespace for the agents; someone changes one of
    // those labels (it is theirs now) and sets one of their own: the uninstall takes
    // back only what is still nodemem's.
    let labels = |bed: &Bed| {
        bed.kubectl(&[
            "get",
            "ns",
            "nodemem-system",
            "-o",
            "jsonpath={.metadata.labels}",
        ])
        .unwrap()
    };
    let before_labels = labels(&bed);
    assert!(
        before_labels.contains("\"pod-security.kubernetes.io/enforce\":\"privileged\""),
        "{before_labels}"
    );
    bed.kubectl(&[
        "label",
        "ns",
        "nodemem-system",
        "pod-security.kubernetes.io/warn=baseline",
        "team=platform",
        "--overwrite",
    ])
    .unwrap();
    uninstall_leaves_no_policy_terminating(&mut bed, &controller).await;
    let after_labels = labels(&bed);
    for gone in [
        "pod-security.kubernetes.io/enforce",
        "pod-security.kubernetes.io/audit",
    ] {
        assert!(!after_labels.contains(gone), "{gone} left: {after_labels}");
    }
    for kept in [
        "\"pod-security.kubernetes.io/warn\":\"baseline\"",
        "\"team\":\"platform\"",
    ] {
        assert!(after_labels.contains(kept), "{kept} taken: {after_labels}");
    }
    uninstall_leaves_nothing_and_gives_every_value_back(&bed, &before);
}

async fn uninstall_leaves_no_policy_terminating(bed: &mut Bed, controller_kubeconfig: &Path) {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, Patch, PatchParams};
    let admin = bed.admin_kubeconfig().to_path_buf();
    let client = bed.client.clone();
    let held = || {
        let out = nodemem_testkit::clients::kubectl(
            &admin,
            &[
                "get",
                "nmp",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name}={.metadata.finalizers}{\"\\n\"}{end}",
            ],
        )
        .unwrap();
        out.lines()
            .filter(|l| l.contains(nodemem_api::HANDOFF_FINALIZER))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert!(
        held().len() >= 5,
        "every policy holds the finalizer: {:?}",
        held()
    );
    // The hook run outside an uninstall of its release (as `helm template | kubectl
    // apply` would at install; here another release's name): refused, nothing changed.
    let refused = std::process::Command::new(nodemem_e2e::nodemem())
        .args([
            "stand-down",
            "--namespace=nodemem-system",
            "--deployment=nodemem-controller",
            "--hook-of-release=other",
            "--give-back",
        ])
        .env("KUBECONFIG", controller_kubeconfig)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(
        said.contains("belongs to Helm release nodemem") && said.contains("nothing was changed"),
        "{said}"
    );
    {
        let deployments: kube::api::Api<Deployment> =
            kube::api::Api::namespaced(client.clone(), "nodemem-system");
        let d = deployments.get("nodemem-controller").await.unwrap();
        assert_eq!(
            d.spec.and_then(|s| s.replicas),
            Some(2),
            "the refused hook scaled"
        );
        assert!(held().len() >= 5, "the refused hook let go of policies");
    }
    let helm_admin = admin.clone();
    let uninstall = std::thread::spawn(move || {
        nodemem_testkit::clients::helm(
            &helm_admin,
            &[
                "uninstall",
                "nodemem",
                "-n",
                "nodemem-system",
                "--timeout",
                "3m",
            ],
        )
    });
    let pods: Api<Pod> = Api::namespaced(client.clone(), "nodemem-system");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "nodemem-system");
    let deadline = Instant::now() + Duration::from_secs(60);
    let hook = loop {
        if let Some(p) = pods.get_opt("nodemem-stand-down").await.unwrap() {
            break p;
        }
        assert!(Instant::now() < deadline, "no pre-delete hook pod");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let args = hook.spec.unwrap().containers[0].args.clone().unwrap();
    let mut command = std::process::Command::new(nodemem_e2e::nodemem())
        .args(&args)
        .env("KUBECONFIG", controller_kubeconfig)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The kubelet stops the controller's pods once the Deployment is at zero.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let d = deployments.get("nodemem-controller").await.unwrap();
        if d.spec.and_then(|s| s.replicas) == Some(0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the hook did not scale the controller to zero"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bed.stop_controller(Duration::from_secs(20));
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = command.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "nodemem stand-down did not finish"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let out = command.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        status.success(),
        "nodemem stand-down: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("let go of the handoff finalizer")
            && stdout.contains("node(s) gave back what nodemem set;")
            && !stdout.contains("did not report in time"),
        "{stdout}"
    );
    pods.patch_status(
        "nodemem-stand-down",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"status": {"phase": "Succeeded"}})),
    )
    .await
    .unwrap();
    let uninstalled = uninstall.join().unwrap();
    assert!(uninstalled.is_ok(), "helm uninstall: {uninstalled:?}");
    assert_eq!(
        held(),
        Vec::<String>::new(),
        "no policy holds the finalizer"
    );
    // With no controller left, deleting every policy completes at once.
    let started = Instant::now();
    bed.kubectl(&["delete", "nmp", "--all", "--wait=true", "--timeout=30s"])
        .unwrap();
    let left = bed.kubectl(&["get", "nmp", "-o", "name"]).unwrap();
    assert!(left.trim().is_empty(), "left Terminating: {left}");
    eprintln!(
        "after helm uninstall every policy deleted in {:.2} s",
        started.elapsed().as_secs_f64()
    );
}

/// Every memory.min, memory.low and memory.high of every node's cgroup tree (path ->
/// value).
fn memory_files(bed: &Bed) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (node, n) in &bed.nodes {
        let root = n.tree.root().to_path_buf();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for e in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = e.path();
                let name = e.file_name().to_string_lossy().to_string();
                if path.is_dir() {
                    dirs.push(path);
                } else if ["memory.min", "memory.low", "memory.high"].contains(&name.as_str()) {
                    let key = format!("{node}:{}", path.strip_prefix(&root).unwrap().display());
                    out.insert(
                        key,
                        std::fs::read_to_string(&path).unwrap().trim().to_string(),
                    );
                }
            }
        }
    }
    out
}

/// After `helm uninstall` (its hook run with --give-back): no NodeMemoryConfig, Lease
/// or agent DaemonSet is left, and every memory file reads what it read before nodemem.
fn uninstall_leaves_nothing_and_gives_every_value_back(
    bed: &Bed,
    before: &BTreeMap<String, String>,
) {
    let left = |args: &[&str]| bed.kubectl(args).unwrap_or_default().trim().to_string();
    assert_eq!(
        left(&["get", "nmc", "-o", "name"]),
        "",
        "NodeMemoryConfigs left"
    );
    // nodemem's own (the harness keeps a DaemonSet of its own for the agents'
    // identities).
    for (kind, name) in [
        ("lease", "nodemem-controller"),
        ("daemonset", "nodemem-agent"),
    ] {
        assert_eq!(
            left(&[
                "get",
                kind,
                name,
                "-n",
                "nodemem-system",
                "--ignore-not-found",
                "-o",
                "name"
            ]),
            "",
            "{kind} {name} left: {}\ncontroller's log on the DaemonSet:\n{}",
            left(&["get", kind, name, "-n", "nodemem-system", "-o", "yaml"]),
            std::fs::read_to_string(bed.controller_log())
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("DaemonSet")
                    || l.contains("stood down")
                    || l.contains("stopping"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    let after = memory_files(bed);
    assert!(before.len() >= 10, "only {} files read", before.len());
    let changed: Vec<String> = before
        .iter()
        .filter(|(path, value)| after.get(*path) != Some(*value))
        .map(|(path, value)| format!("{path}: {value} before, {:?} after", after.get(path)))
        .collect();
    assert!(
        changed.is_empty(),
        "values not given back:\n{}",
        changed.join("\n")
    );
}

/// The chart's `kubeVersion` admits every supported version, v1.38's pre-releases and
/// managed clusters' suffixes included, and refuses what upstream no longer supports,
/// as helm itself judges it (`--kube-version`).
#[test]
fn the_chart_admits_v1_35_to_v1_38_and_their_pre_releases() {
    let chart = repo().join("charts/nodemem");
    let chart = chart.to_str().unwrap();
    let bin = nodemem_testkit::binaries::control_plane_binaries().unwrap();
    let template = |version: &str| {
        Command::new(&bin.helm)
            .args(["template", "nodemem", chart, "--kube-version", version])
            .output()
            .unwrap()
    };
    for admitted in [
        "v1.35.0",
        "v1.36.3",
        "v1.37.2",
        "v1.38.0-alpha.1",
        "v1.38.0-beta.0",
        "v1.38.0-rc.1",
        "v1.38.0",
        "v1.38.1-eks-113cf36",
    ] {
        let out = template(admitted);
        assert!(
            out.status.success(),
            "{admitted}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for refused in ["v1.34.9", "v1.30.0"] {
        let out = template(refused);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("kubeVersion"),
            "{refused}: {stderr}"
        );
    }
}

/// A value misspelt or of the wrong type fails `helm template`, `helm lint` and `helm
/// install` (on the real control plane) with a message that names it: the chart's
/// values.schema.json, which Helm checks before rendering anything.
#[test]
fn the_chart_refuses_misspelt_values_by_name() {
    let chart = repo().join("charts/nodemem");
    let chart = chart.to_str().unwrap();
    let kubeconfig = crate::common::cluster().admin_kubeconfig().to_path_buf();
    let bin = nodemem_testkit::binaries::control_plane_binaries().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (name, values, named) in [
        // YAML's yes is a boolean, not one of auto, on, off.
        ("nri", "agent:\n  nri: yes\n", "nri"),
        (
            "quoted",
            "controller:\n  writeConcurrency: \"64\"\n",
            "writeConcurrency",
        ),
        ("unknown", "agent:\n  nodeSelectr: {}\n", "nodeSelectr"),
        ("group", "controler:\n  replicas: 1\n", "controler"),
        (
            "inside",
            "agent:\n  tolerations: [{operator: Exists, efect: NoSchedule}]\n",
            "efect",
        ),
        ("level", "agent:\n  logLevel: verbose\n", "logLevel"),
        (
            "modes",
            "agent:\n  enforcementModes: [Agent, Kubelt]\n",
            "enforcementModes",
        ),
        (
            "no-mode",
            "agent:\n  enforcementModes: []\n",
            "enforcementModes",
        ),
        (
            "quantity",
            "agent:\n  resources: {limits: {memory: 96MB}}\n",
            "memory",
        ),
        // A flag that reaches into the host is the controller's.
        (
            "extra-arg",
            "agent:\n  extraArgs: [--cgroup-root=/x]\n",
            "extraArgs",
        ),
        (
            "extra-volume",
            "agent:\n  extraVolumes: [{name: state, emptyDir: {}}]\n",
            "extraVolumes",
        ),
        // The runtime's default AppArmor profile forbids the kubelet reader.
        (
            "apparmor-default",
            "agent:\n  appArmorProfile: {type: RuntimeDefault}\n",
            "appArmorProfile",
        ),
        (
            "apparmor-nameless",
            "agent:\n  appArmorProfile: {type: Localhost}\n",
            "appArmorProfile",
        ),
    ] {
        let file = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, values).unwrap();
        let file = file.to_str().unwrap();
        for command in [
            vec!["template", "nodemem", chart, "-f", file],
            vec!["lint", "--strict", chart, "-f", file],
            vec![
                "install",
                "schema-check",
                chart,
                "-f",
                file,
                "--namespace",
                "chart-schema",
                "--create-namespace",
            ],
        ] {
            let out = Command::new(&bin.helm)
                .arg(format!("--kubeconfig={}", kubeconfig.display()))
                .args(&command)
                .output()
                .unwrap();
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                !out.status.success(),
                "helm {} accepted {values:?}",
                command[0]
            );
            assert!(
                said.contains("schema") && said.contains(named),
                "helm {} with {values:?} does not name {named}: {said}",
                command[0]
            );
        }
    }
}

/// An object as compared between deploy/ and the chart: its metadata reduced to name and
/// namespace, and Helm's own labels (`helm.sh/chart`, `app.kubernetes.io/managed-by`)
/// taken out of the labels inside it (a pod template's), numbers as numbers (kustomize
/// writes the CRDs' `1.0` as `1`).
fn comparable(object: &Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Number(n) => *v = json!(n.as_f64()),
            Value::Object(map) => {
                if let Some(Value::Object(labels)) = map.get_mut("labels") {
                    labels.remove("helm.sh/chart");
                    labels.remove("app.kubernetes.io/managed-by");
                }
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut o = object.clone();
    let metadata = json!({"name": o["metadata"]["name"], "namespace": o["metadata"]["namespace"]});
    o["metadata"] = metadata;
    strip(&mut o);
    o
}

/// `deploy/` moved to another namespace and given another image by a kustomization of a
/// team's own (`namespace: other`, one `images:` entry): the image is everywhere it is
/// named (the controller's container, which the agents follow, and the admission
/// ConfigMap) and the old one nowhere; the admission policies still match the agents' and the controller's
/// service accounts (no namespace is named in them), the controller's parameters are
/// read from its own namespace and it runs in the pod's namespace; the one name that
/// cannot follow (the ClusterRole's namespace to label, a resource name) is the only
/// `nodemem-system` left, and docs/operations.md says so.
///
/// An overlay with `namespace: platform-memory` and one `images:` entry over `deploy/`
/// (the image reaches the controller's container and the admission ConfigMap, the old
/// one is nowhere), rendered by the real kubectl: every namespaced object and every
/// service-account subject moves, the admission policies match the service accounts by
/// name in any namespace (no namespace selector, the DaemonSet policy's parameters from
/// the object's own namespace), the controller's `--namespace` is `$(POD_NAMESPACE)`,
/// and the only `nodemem-system` left is the ClusterRole's namespace to label
/// (documented).
#[test]
fn deploy_moved_to_another_namespace_keeps_every_restriction() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(repo().join("deploy"))
        .arg(&base)
        .status()
        .unwrap();
    assert!(copied.success());
    let overlay = dir.path().join("overlay");
    std::fs::create_dir(&overlay).unwrap();
    let digest = format!("sha256:{}", "cd".repeat(32));
    let image = format!("registry.example.com/mirror/nodemem@{digest}");
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: platform-memory\nresources:\n- ../base\nimages:\n- name: ghcr.io/nodemem/nodemem\n  newName: registry.example.com/mirror/nodemem\n  digest: {digest}\n"),
    )
    .unwrap();
    let bin = nodemem_testkit::binaries::control_plane_binaries().unwrap();
    let out = Command::new(&bin.kubectl)
        .args(["kustomize", overlay.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let docs = documents(&text);
    let left: Vec<String> = docs
        .iter()
        .filter(|d| serde_json::to_string(d).unwrap().contains("nodemem-system"))
        .map(|d| {
            format!(
                "{} {}",
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(left, ["ClusterRole nodemem-controller"], "{text}");
    assert!(!text.contains("ghcr.io/nodemem"), "{text}");
    let deployment = find(&docs, "Deployment", "nodemem-controller");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], image.as_str());
    assert!(container["args"]
        .as_array()
        .unwrap()
        .contains(&json!("--agent-image-from-container=controller")));
    assert_eq!(
        find(&docs, "ConfigMap", "nodemem-agent-admission")["data"]["image"],
        image.as_str()
    );
    for d in &docs {
        if d["metadata"]["namespace"].is_string() {
            assert_eq!(d["metadata"]["namespace"], "platform-memory", "{d}");
        }
    }
    // The policies match the service accounts by name in any namespace.
    for policy in docs
        .iter()
        .filter(|d| d["kind"] == "ValidatingAdmissionPolicy")
    {
        for c in policy["spec"]["matchConditions"].as_array().unwrap() {
            let e = c["expression"].as_str().unwrap();
            assert!(
                e.contains(r#"startsWith("system:serviceaccount:")"#)
                    && (e.contains(r#"endsWith(":nodemem-agent")"#)
                        || e.contains(r#"endsWith(":nodemem-controller")"#)),
                "{e}"
            );
        }
        assert!(
            policy["spec"]["matchConstraints"]["namespaceSelector"].is_null(),
            "{policy}"
        );
    }
    let binding = docs
        .iter()
        .find(|d| {
            d["kind"] == "ValidatingAdmissionPolicyBinding"
                && d["metadata"]["name"] == "nodemem-controller-agent-daemonset"
        })
        .unwrap();
    assert!(
        binding["spec"]["paramRef"]["namespace"].is_null(),
        "{binding}"
    );
    // The role bindings name the service accounts in the new namespace.
    for b in docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding")
    {
        for subject in b["subjects"].as_array().unwrap() {
            if subject["kind"] == "ServiceAccount" {
                assert_eq!(subject["namespace"], "platform-memory", "{b}");
            }
        }
    }
    let controller = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let args = &controller["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        args.as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--namespace=$(POD_NAMESPACE)"),
        "{args}"
    );
}

/// `kubectl apply -k deploy/` installs what the chart installs with its defaults (CRDs
/// included): the same objects with the same contents, Helm's labels aside. deploy/ has
/// the Namespace (Helm makes it with --create-namespace) and no uninstall hook (uninstall
/// from deploy/ runs `nodemem stand-down --give-back` first, docs/operations.md).
#[test]
fn the_kustomize_install_in_deploy_is_what_the_chart_renders() {
    let chart = repo().join("charts/nodemem");
    let rendered = documents(&helm(&[
        "template",
        "nodemem",
        chart.to_str().unwrap(),
        "--namespace",
        "nodemem-system",
        "--include-crds",
    ]));
    let bin = nodemem_testkit::binaries::control_plane_binaries().unwrap();
    let out = Command::new(&bin.kubectl)
        .args(["kustomize", repo().join("deploy").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kustomized = documents(&String::from_utf8_lossy(&out.stdout));
    let key = |d: &Value| {
        format!(
            "{} {}",
            d["kind"].as_str().unwrap(),
            d["metadata"]["name"].as_str().unwrap()
        )
    };
    let from_chart: BTreeMap<String, Value> = rendered
        .iter()
        .filter(|d| d["metadata"]["annotations"]["helm.sh/hook"].is_null())
        .map(|d| (key(d), comparable(d)))
        .collect();
    let from_deploy: BTreeMap<String, Value> = kustomized
        .iter()
        .filter(|d| d["kind"] != "Namespace")
        .map(|d| (key(d), comparable(d)))
        .collect();
    assert_eq!(
        from_chart.keys().collect::<Vec<_>>(),
        from_deploy.keys().collect::<Vec<_>>(),
        "the objects"
    );
    for (k, chart_object) in &from_chart {
        assert_eq!(
            chart_object, &from_deploy[k],
            "{k}: the chart's against deploy/'s"
        );
    }
    assert!(from_chart.contains_key("Deployment nodemem-controller"));
    // The real apiserver takes every object as kubectl applies them (admission and
    // validation run; a server-side dry run keeps nothing).
    // Its namespace for real first: a dry run creates none for the objects in it (other
    // tests on this control plane apply the same file).
    let kubeconfig = crate::common::cluster().admin_kubeconfig().to_path_buf();
    let namespace = repo().join("deploy/namespace.yaml");
    nodemem_testkit::clients::kubectl(&kubeconfig, &["apply", "-f", namespace.to_str().unwrap()])
        .unwrap();
    let applied = Command::new(&bin.kubectl)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        // Other tests on this control plane applied some of the same objects with their
        // own field managers: a dry run takes them over without a conflict.
        .args([
            "apply",
            "--server-side",
            "--force-conflicts",
            "--dry-run=server",
            "-k",
        ])
        .arg(repo().join("deploy"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&applied.stdout);
    assert!(
        applied.status.success(),
        "kubectl apply -k deploy/: {said}{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    assert!(
        said.contains("deployment.apps/nodemem-controller serverside-applied (server dry run)"),
        "{said}"
    );
    let namespace = find(&kustomized, "Namespace", "nodemem-system");
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "privileged"
    );
}

/// The roles for people, as the chart renders them, in the shared control plane (under
/// test names: another test's release may own the real ones): Kubernetes' own view and
/// edit take nodemem's rules by aggregation (its controller-manager's clusterrole
/// aggregation), and nodemem-rollout lets its holder steer rollouts and nothing more.
/// The apiserver judges each (`kubectl auth can-i --as`). deploy/ carries the same
/// roles with the same aggregation labels.
///
/// The chart's nodemem-view, nodemem-edit and nodemem-rollout ClusterRoles
/// (deploy/users/rbac.yaml the same, aggregation labels included), applied under test
/// names to the shared control plane: its controller-manager aggregates them into
/// Kubernetes' own view and edit, and the apiserver judges (`kubectl auth can-i --as`):
/// view reads policies, their status and configs and writes nothing; edit writes
/// policies but neither their status nor configs; the rollout role patches policies and
/// configs (pause, resume, rollback, release) and creates and deletes nothing.
#[test]
fn people_get_nodemem_through_view_edit_and_the_rollout_role() {
    let chart = repo().join("charts/nodemem");
    let rendered = documents(&helm(&["template", "nodemem", chart.to_str().unwrap()]));
    let roles: Vec<Value> = rendered
        .iter()
        .filter(|d| {
            d["kind"] == "ClusterRole"
                && ["nodemem-view", "nodemem-edit", "nodemem-rollout"]
                    .contains(&d["metadata"]["name"].as_str().unwrap_or(""))
        })
        .cloned()
        .collect();
    assert_eq!(roles.len(), 3);
    let deploy =
        documents(&std::fs::read_to_string(repo().join("deploy/users/rbac.yaml")).unwrap());
    let aggregation = |d: &Value| -> Vec<String> {
        d["metadata"]["labels"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with("rbac.authorization.k8s.io/aggregate-to-"))
            .map(|(k, v)| format!("{k}={v}"))
            .collect()
    };
    for role in &roles {
        let name = &role["metadata"]["name"];
        let twin = deploy
            .iter()
            .find(|d| &d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("deploy/users/rbac.yaml has no {name}"));
        assert_eq!(aggregation(role), aggregation(twin), "{name}");
        assert_eq!(role["rules"], twin["rules"], "{name}");
    }

    let kubeconfig = crate::common::cluster().admin_kubeconfig().to_path_buf();
    let suffix = format!("t{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let mut manifest = String::new();
    for role in &roles {
        let mut r = role.clone();
        r["metadata"]["name"] = json!(format!(
            "{}-{suffix}",
            r["metadata"]["name"].as_str().unwrap()
        ));
        manifest.push_str(&serde_yaml::to_string(&r).unwrap());
        manifest.push_str("---\n");
    }
    for (user, role) in [
        ("viewer", "view"),
        ("editor", "edit"),
        ("roller", &format!("nodemem-rollout-{suffix}")),
    ] {
        manifest.push_str(&serde_yaml::to_string(&json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("{user}-{suffix}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": format!("{user}-{suffix}")}],
        })).unwrap());
        manifest.push_str("---\n");
    }
    let file = dir.path().join("roles.yaml");
    std::fs::write(&file, &manifest).unwrap();
    let (ok, said) = kubectl_as(&kubeconfig, &["apply", "-f", file.to_str().unwrap()]);
    assert!(ok, "{said}");

    let can = |user: &str, verb: &str, resource: &str| -> bool {
        let as_user = format!("{user}-{suffix}");
        // `kubectl auth can-i VERB RESOURCE/NAME`: a subresource is a flag of its own.
        let mut args = vec!["auth", "can-i", verb, "--as", &as_user];
        match resource.split_once('/') {
            Some((r, sub)) => args.extend([r, "--subresource", sub]),
            None => args.push(resource),
        }
        let (_, said) = kubectl_as(&kubeconfig, &args);
        // "yes" or "no" on stdout; kubectl warns on stderr that the resource is
        // cluster-scoped.
        said.lines().next().map(str::trim) == Some("yes")
    };
    // Aggregation is the controller-manager's: wait until view has taken nodemem's.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(can("viewer", "list", "nodememorypolicies.nodemem.io")
        && can("editor", "create", "nodememorypolicies.nodemem.io"))
    {
        if Instant::now() > deadline {
            let (_, view) = kubectl_as(&kubeconfig, &["get", "clusterrole", "view", "-o", "yaml"]);
            let (_, said) = kubectl_as(
                &kubeconfig,
                &[
                    "auth",
                    "can-i",
                    "list",
                    "nodememorypolicies.nodemem.io",
                    "--as",
                    &format!("viewer-{suffix}"),
                ],
            );
            panic!("view and edit never took nodemem's rules: {said}\n{view}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    for (user, verb, resource, allowed) in [
        ("viewer", "get", "nodememorypolicies.nodemem.io", true),
        ("viewer", "watch", "nodememoryconfigs.nodemem.io", true),
        (
            "viewer",
            "get",
            "nodememorypolicies.nodemem.io/status",
            true,
        ),
        ("viewer", "create", "nodememorypolicies.nodemem.io", false),
        ("viewer", "patch", "nodememorypolicies.nodemem.io", false),
        ("editor", "patch", "nodememorypolicies.nodemem.io", true),
        ("editor", "delete", "nodememorypolicies.nodemem.io", true),
        ("editor", "list", "nodememoryconfigs.nodemem.io", true),
        ("editor", "patch", "nodememoryconfigs.nodemem.io", false),
        (
            "editor",
            "patch",
            "nodememorypolicies.nodemem.io/status",
            false,
        ),
        ("roller", "patch", "nodememorypolicies.nodemem.io", true),
        ("roller", "patch", "nodememoryconfigs.nodemem.io", true),
        ("roller", "create", "nodememorypolicies.nodemem.io", false),
        ("roller", "delete", "nodememorypolicies.nodemem.io", false),
        ("roller", "delete", "nodememoryconfigs.nodemem.io", false),
    ] {
        assert_eq!(
            can(user, verb, resource),
            allowed,
            "{user} {verb} {resource}"
        );
    }
    let (ok, said) = kubectl_as(&kubeconfig, &["delete", "-f", file.to_str().unwrap()]);
    assert!(ok, "{said}");
}

/// nodemem as a dependency of an umbrella chart, as platform teams ship it: the parent's
/// `global` values and `nodemem.enabled` condition pass the schema (which refuses any
/// other unknown key), `global.imageRegistry` mirrors the image, and the values teams
/// set reach what is rendered: a digest pins the image (the agents' too, through the
/// controller's own container, which the agents follow, and the admission ConfigMap), `commonLabels` label every
/// object, the controller's log level, pod metadata, topology spread and security
/// contexts; the ResourceQuota GKE needs for system-node-critical pods is there by
/// default and goes with the value or another priority class.
///
/// The chart as a dependency of a parent chart (its `global` values, any key, and its
/// `nodemem.enabled` condition pass the schema; `enabled=false` renders nothing of
/// nodemem's): `global.imageRegistry` and `image.digest` make the controller's, the
/// agents' (`--agent-image`) and the admission ConfigMap's image
/// `mirror/...@sha256:...`; `commonLabels` label every object; the controller's log
/// level (RUST_LOG), pod annotations, topology spread and security contexts render; the
/// ResourceQuota for system-node-critical pods (GKE) is there by default and not with
/// `agent.criticalPodsQuota=false` or another priority class; a digest that is not one
/// is refused naming it.
#[test]
fn the_chart_is_an_umbrella_charts_dependency_and_takes_the_values_teams_set() {
    let dir = tempfile::tempdir().unwrap();
    let umbrella = dir.path().join("platform");
    std::fs::create_dir_all(umbrella.join("charts")).unwrap();
    std::fs::write(
        umbrella.join("Chart.yaml"),
        "apiVersion: v2\nname: platform\nversion: 1.0.0\ndependencies:\n- name: nodemem\n  version: \">=0.0.0-0\"\n  condition: nodemem.enabled\n",
    )
    .unwrap();
    let copied = Command::new("cp")
        .args(["-r", repo().join("charts/nodemem").to_str().unwrap()])
        .arg(umbrella.join("charts/nodemem"))
        .status()
        .unwrap();
    assert!(copied.success());
    let digest = format!("sha256:{}", "ab".repeat(32));
    std::fs::write(
        umbrella.join("values.yaml"),
        format!(
            "global:\n  imageRegistry: mirror.example.com\n  anythingTheParentHas: {{a: 1}}\nnodemem:\n  enabled: true\n  commonLabels: {{team: platform}}\n  image: {{digest: \"{digest}\"}}\n  controller:\n    logLevel: debug\n    podAnnotations: {{example.com/owner: platform}}\n    topologySpreadConstraints: [{{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}}]\n"
        ),
    )
    .unwrap();
    let docs = documents(&helm(&[
        "template",
        "platform",
        umbrella.to_str().unwrap(),
        "--namespace",
        "nodemem-system",
    ]));
    let image = format!("mirror.example.com/ghcr.io/nodemem/nodemem@{digest}");
    let controller = find(&docs, "Deployment", "nodemem-controller");
    let spec = &controller["spec"]["template"]["spec"];
    assert_eq!(spec["containers"][0]["image"], image.as_str());
    assert!(spec["containers"][0]["args"]
        .as_array()
        .unwrap()
        .contains(&json!("--agent-image-from-container=controller")));
    assert_eq!(spec["containers"][0]["name"], "controller");
    assert_eq!(
        find(&docs, "ConfigMap", "nodemem-agent-admission")["data"]["image"],
        image.as_str()
    );
    assert!(spec["containers"][0]["env"]
        .as_array()
        .unwrap()
        .contains(&json!({"name": "RUST_LOG", "value": "debug"})));
    assert_eq!(
        controller["spec"]["template"]["metadata"]["annotations"]["example.com/owner"],
        "platform"
    );
    assert_eq!(spec["topologySpreadConstraints"][0]["maxSkew"], 1);
    assert_eq!(spec["securityContext"]["runAsUser"], 65532);
    assert_eq!(
        spec["containers"][0]["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    let unlabelled: Vec<String> = docs
        .iter()
        .filter(|d| d["metadata"]["labels"]["team"] != "platform")
        .map(|d| format!("{} {}", d["kind"], d["metadata"]["name"]))
        .collect();
    assert!(
        unlabelled.is_empty(),
        "without commonLabels: {unlabelled:?}"
    );
    let quota = find(&docs, "ResourceQuota", "nodemem-critical-pods");
    assert_eq!(
        quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"],
        json!(["system-node-critical"])
    );

    // The parent's condition off: nothing of nodemem's.
    let off = helm(&[
        "template",
        "platform",
        umbrella.to_str().unwrap(),
        "--set",
        "nodemem.enabled=false",
    ]);
    assert!(!off.contains("nodemem-controller"), "{off}");
    // Without the quota (or with another priority class for the agents), none.
    let chart = repo().join("charts/nodemem");
    for set in [
        "agent.criticalPodsQuota=false",
        "agent.priorityClassName=high",
    ] {
        let docs = documents(&helm(&[
            "template",
            "nodemem",
            chart.to_str().unwrap(),
            "--set",
            set,
        ]));
        assert!(!docs.iter().any(|d| d["kind"] == "ResourceQuota"), "{set}");
    }
    // API Priority and Fairness: the agents' share as set, the schemas' service accounts
    // those of the release's namespace; none with flowControl.enabled=false.
    let flow = documents(&helm(&[
        "template",
        "nodemem",
        chart.to_str().unwrap(),
        "--namespace",
        "platform-memory",
        "--set",
        "flowControl.agentShares=25",
    ]));
    let agents = find(&flow, "PriorityLevelConfiguration", "nodemem-agents");
    assert_eq!(agents["spec"]["limited"]["nominalConcurrencyShares"], 25);
    for name in ["nodemem-agents", "nodemem-controller"] {
        let schema = find(&flow, "FlowSchema", name);
        assert_eq!(
            schema["spec"]["rules"][0]["subjects"][0]["serviceAccount"]["namespace"],
            "platform-memory",
            "{name}"
        );
        assert_eq!(schema["spec"]["priorityLevelConfiguration"]["name"], name);
    }
    let off = documents(&helm(&[
        "template",
        "nodemem",
        chart.to_str().unwrap(),
        "--set",
        "flowControl.enabled=false",
    ]));
    assert!(
        !off.iter().any(|d| d["apiVersion"]
            .as_str()
            .is_some_and(|a| a.starts_with("flowcontrol"))),
        "flowControl.enabled=false"
    );
    // A digest that is not one is refused by the schema, naming it.
    let bin = nodemem_testkit::binaries::control_plane_binaries().unwrap();
    let out = Command::new(&bin.helm)
        .args([
            "template",
            "nodemem",
            chart.to_str().unwrap(),
            "--set",
            "image.digest=latest",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("digest"));
}
