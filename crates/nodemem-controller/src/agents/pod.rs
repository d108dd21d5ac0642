//! What a platform team sets on the agents' pods (the chart's `agent.*` values, passed
//! to the controller as one JSON document in `--agent-pod`): resources, placement,
//! priority, metadata, log level, environment, SELinux options, AppArmor profile, extra
//! agent flags and extra volumes. Parsed strictly (a field this
//! version does not know is an error naming it, not a setting silently dropped) and
//! merged into the DaemonSet the controller builds.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, AppArmorProfile, EnvVar, ResourceRequirements, SELinuxOptions, Toleration, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The agents' log level (their RUST_LOG).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Error,
    Warn,
    #[default]
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    fn directive(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// The agents' pod settings. Every field is optional in the JSON; an absent one takes
/// the default below (the chart's values.yaml states the same defaults).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AgentPod {
    pub resources: ResourceRequirements,
    /// ANDed with where the policies place agents. Default: Linux nodes only (a policy
    /// with an empty selector must not place agents on Windows nodes).
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity is ANDed with the policies' placement; the rest (preferred
    /// terms, pod affinity) is kept as given.
    pub affinity: Option<Affinity>,
    /// Default: every taint (pools may be tainted; the agent must run wherever its
    /// policy applies).
    pub tolerations: Vec<Toleration>,
    /// Empty: none.
    pub priority_class_name: String,
    pub pod_annotations: BTreeMap<String, String>,
    pub pod_labels: BTreeMap<String, String>,
    pub log_level: LogLevel,
    /// After the agent's own variables.
    pub env: Vec<EnvVar>,
    /// How many nodes' agents a DaemonSet change restarts at once (a count, or a
    /// percentage of the nodes): an agent's restart leaves its values in place, so the
    /// bound is about the apiserver's load and how fast a new agent version reaches
    /// every node.
    pub max_unavailable: IntOrString,
    /// The agent container's SELinux options (an SELinux-enforcing node's remedy, e.g.
    /// `type: spc_t`, docs/operations.md); None: the runtime's default.
    pub se_linux_options: Option<SELinuxOptions>,
    /// The agent container's AppArmor profile: None is `Unconfined`; a `Localhost`
    /// profile a team loads on its nodes may take its place. `RuntimeDefault` is
    /// refused: the runtime's default profile allows ptrace reads of its own containers
    /// only, and the agent's kubelet reader must open the kubelet's root.
    pub app_armor_profile: Option<AppArmorProfile>,
    /// More agent flags, each `--flag` or `--flag=value` and one of [`EXTRA_ARGS`].
    pub extra_args: Vec<String>,
    /// More volumes for the agent's pod (a kubelet configuration file where a layout
    /// keeps it, for `--kubelet-config`), none named as one of the controller's own.
    pub extra_volumes: Vec<Volume>,
    /// Where the agent mounts them; each names one of `extra_volumes`.
    pub extra_volume_mounts: Vec<VolumeMount>,
}

/// The agent's flags `extraArgs` may add: tuning, and the kubelet's files where a
/// layout keeps them. Paths into the host, identity, enforcement and the runtime's
/// hooks are the controller's (each has its own chart value, or follows the policies),
/// so any other flag is refused by name. `nodemem`'s tests hold each against the
/// agent's own command line.
pub const EXTRA_ARGS: [&str; 10] = [
    "--per-container-metrics",
    "--per-container-metrics-cap",
    "--status-refresh-seconds",
    "--resync-seconds",
    "--observe-seconds",
    "--log-format",
    "--kubelet-config",
    "--kubelet-memory-manager-state",
    "--kubelet-restart-timeout-seconds",
    "--topology-manager-scope",
];

/// The volumes the controller gives the agent's pod (some only in some modes).
pub const OWN_VOLUMES: [&str; 10] = [
    "cgroup",
    "containerd-tasks",
    "crio-containers",
    "dbus",
    "kubelet-config-dir",
    "nri",
    "proc",
    "state",
    "sys",
    "systemd",
];

/// The agent's memory limit: see BENCHMARKS.md ("The agent's memory at 110, 250 and
/// 500 pods") for the peak it holds with a margin.
pub const DEFAULT_MEMORY_LIMIT: &str = "96Mi";

impl Default for AgentPod {
    fn default() -> Self {
        let quantities = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.to_string(),
                            k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.to_string()),
                        )
                    })
                    .collect(),
            )
        };
        AgentPod {
            resources: ResourceRequirements {
                requests: quantities(&[("cpu", "10m"), ("memory", "32Mi")]),
                limits: quantities(&[("memory", DEFAULT_MEMORY_LIMIT)]),
                ..Default::default()
            },
            node_selector: BTreeMap::from([("kubernetes.io/os".into(), "linux".into())]),
            affinity: None,
            tolerations: vec![Toleration {
                operator: Some("Exists".into()),
                ..Default::default()
            }],
            priority_class_name: "system-node-critical".into(),
            pod_annotations: BTreeMap::new(),
            pod_labels: BTreeMap::new(),
            log_level: LogLevel::Info,
            env: Vec::new(),
            max_unavailable: IntOrString::String("10%".into()),
            se_linux_options: None,
            app_armor_profile: None,
            extra_args: Vec::new(),
            extra_volumes: Vec::new(),
            extra_volume_mounts: Vec::new(),
        }
    }
}

/// `Unconfined`, or `Localhost` with its profile's name (what the kubelet's validation
/// asks of each: `localhostProfile` with Localhost and only with it).
fn check_app_armor(p: &AppArmorProfile) -> Result<(), String> {
    match (p.type_.as_str(), p.localhost_profile.as_deref()) {
        ("Unconfined", None) => Ok(()),
        ("Localhost", Some(name)) if !name.trim().is_empty() => Ok(()),
        ("Localhost", _) => Err(
            "--agent-pod: appArmorProfile of type Localhost names its profile (localhostProfile: the name loaded on the nodes)".into(),
        ),
        ("Unconfined", Some(_)) => Err(
            "--agent-pod: appArmorProfile takes localhostProfile with type Localhost only".into(),
        ),
        ("RuntimeDefault", _) => Err(
            "--agent-pod: appArmorProfile may not be RuntimeDefault: the runtime's default profile allows ptrace reads of its own containers only, and the agent's kubelet reader opens the kubelet's root (docs/operations.md, AppArmor); give Unconfined or a Localhost profile".into(),
        ),
        (other, _) => Err(format!(
            "--agent-pod: appArmorProfile type must be Unconfined or Localhost, not {other:?}"
        )),
    }
}

/// Labels the DaemonSet selects its pods by and says who manages them with.
pub const OWN_LABELS: [&str; 2] = ["app.kubernetes.io/name", "app.kubernetes.io/managed-by"];
/// Variables the controller sets on the agent itself.
pub const OWN_ENV: [&str; 3] = ["NODE_NAME", "POD_NAME", "RUST_LOG"];

/// What the apiserver takes for a DaemonSet's maxUnavailable, less the zero it refuses
/// (`ValidateRollingUpdateDaemonSet`): a count from 1, or a percentage from 1% to 100%.
fn max_unavailable_is_valid(v: &IntOrString) -> bool {
    match v {
        IntOrString::Int(n) => *n >= 1,
        IntOrString::String(s) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<u32>().ok())
            .is_some_and(|p| (1..=100).contains(&p)),
    }
}

impl AgentPod {
    /// Parses `--agent-pod`: JSON, every field known (inside Kubernetes' own types
    /// too), no label or variable the controller sets itself.
    pub fn parse(text: &str) -> Result<AgentPod, String> {
        let given: Value =
            serde_json::from_str(text).map_err(|e| format!("--agent-pod is not JSON: {e}"))?;
        if !given.is_object() {
            return Err(format!("--agent-pod must be a JSON object, not {given}"));
        }
        let mut pod: AgentPod =
            serde_json::from_value(given.clone()).map_err(|e| format!("--agent-pod: {e}"))?;
        // `affinity: {}` (the chart's default) is no affinity.
        if pod
            .affinity
            .as_ref()
            .is_some_and(|a| *a == Affinity::default())
        {
            pod.affinity = None;
        }
        // `seLinuxOptions: {}` (the chart's default) is none.
        if pod
            .se_linux_options
            .as_ref()
            .is_some_and(|o| *o == SELinuxOptions::default())
        {
            pod.se_linux_options = None;
        }
        // `appArmorProfile: {}` (the chart's default) is none: Unconfined.
        if pod
            .app_armor_profile
            .as_ref()
            .is_some_and(|p| *p == AppArmorProfile::default())
        {
            pod.app_armor_profile = None;
        }
        let read = serde_json::to_value(&pod).expect("serializable");
        if let Some(path) = lost_field(&given, &read, "") {
            return Err(format!("--agent-pod: unknown field {path}"));
        }
        if let Some(k) = OWN_LABELS.iter().find(|k| pod.pod_labels.contains_key(**k)) {
            return Err(format!(
                "--agent-pod: podLabels may not set {k} (the DaemonSet selects its pods by it)"
            ));
        }
        if let Some(v) = pod.env.iter().find(|v| OWN_ENV.contains(&v.name.as_str())) {
            return Err(format!(
                "--agent-pod: env may not set {} (the agent's own; the log level is logLevel)",
                v.name
            ));
        }
        pod.check_extras()?;
        if !max_unavailable_is_valid(&pod.max_unavailable) {
            return Err(format!(
                "--agent-pod: maxUnavailable must be a count of at least 1 or a percentage from 1% to 100%, not {}",
                serde_json::to_string(&pod.max_unavailable).expect("serializable")
            ));
        }
        Ok(pod)
    }

    /// `extraArgs` are agent flags a team may set, `extraVolumes` are named apart from
    /// the controller's, and each of `extraVolumeMounts` mounts one of them.
    fn check_extras(&self) -> Result<(), String> {
        for arg in &self.extra_args {
            let flag = arg.split('=').next().unwrap_or_default();
            if !flag.starts_with("--") {
                return Err(format!(
                    "--agent-pod: extraArgs takes flags (--flag or --flag=value), not {arg:?}"
                ));
            }
            if !EXTRA_ARGS.contains(&flag) {
                return Err(format!(
                    "--agent-pod: extraArgs may not set {flag}: the agent's host access, identity and enforcement are the controller's; extraArgs takes {}",
                    EXTRA_ARGS.join(", ")
                ));
            }
        }
        if let Some(o) = &self.se_linux_options {
            if o.user.is_some() || o.role.is_some() || o.level.is_some() {
                return Err(
                    "--agent-pod: seLinuxOptions takes a type only (the admission policy admits the install's type and no other option)".into(),
                );
            }
        }
        if let Some(p) = &self.app_armor_profile {
            check_app_armor(p)?;
        }
        if let Some(v) = self.extra_volumes.iter().find(|v| {
            v.host_path
                .as_ref()
                .is_none_or(|h| !h.path.starts_with('/') || h.path.contains(','))
                || serde_json::to_value(Volume {
                    name: v.name.clone(),
                    host_path: v.host_path.clone(),
                    ..Default::default()
                })
                .ok()
                    != serde_json::to_value(v).ok()
        }) {
            return Err(format!(
                "--agent-pod: extraVolumes {} must be a hostPath volume with an absolute path and nothing else (the admission policy admits the install's host paths only)",
                v.name
            ));
        }
        if let Some(v) = self
            .extra_volumes
            .iter()
            .find(|v| OWN_VOLUMES.contains(&v.name.as_str()))
        {
            return Err(format!(
                "--agent-pod: extraVolumes may not name a volume {} (the controller's own)",
                v.name
            ));
        }
        if let Some(m) = self
            .extra_volume_mounts
            .iter()
            .find(|m| !self.extra_volumes.iter().any(|v| v.name == m.name))
        {
            return Err(format!(
                "--agent-pod: extraVolumeMounts mounts {}, which is not one of extraVolumes",
                m.name
            ));
        }
        Ok(())
    }

    /// The agent container's AppArmor profile, as the DaemonSet carries it.
    pub fn app_armor(&self) -> Value {
        match &self.app_armor_profile {
            Some(p) => json!(p),
            None => json!({"type": "Unconfined"}),
        }
    }

    /// [`AgentPod::parse`], boxed (the controller's arguments stay small).
    pub fn parse_boxed(text: &str) -> Result<Box<AgentPod>, String> {
        AgentPod::parse(text).map(Box::new)
    }

    /// The container's environment: the agent's own variables, then the given ones.
    pub fn env(&self) -> Vec<Value> {
        let mut env = vec![
            json!({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}),
            json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
            json!({"name": "RUST_LOG", "value": self.log_level.directive()}),
        ];
        env.extend(self.env.iter().map(to_value));
        env
    }

    /// The pod's labels: the given ones, then the controller's own (which win).
    pub fn labels(&self, own: &Value) -> Value {
        let mut labels = to_value(&self.pod_labels);
        if let (Some(all), Some(own)) = (labels.as_object_mut(), own.as_object()) {
            all.extend(own.clone());
        }
        labels
    }

    /// The given affinity with its required node affinity ANDed with the policies'
    /// (`placement`, as built from the policies; `{}` for every node).
    pub fn affinity(&self, placement: &Value) -> Value {
        let mut affinity = self.affinity.as_ref().map(to_value).unwrap_or(json!({}));
        let terms = |a: &Value| -> Option<Vec<Value>> {
            a["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                .as_array()
                .cloned()
        };
        let combined = match (terms(placement), terms(&affinity)) {
            (None, None) => return affinity,
            (Some(p), None) => p,
            (None, Some(u)) => u,
            (Some(p), Some(u)) => p
                .iter()
                .flat_map(|p| u.iter().map(move |u| both(p, u)))
                .collect(),
        };
        affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
            json!({"nodeSelectorTerms": combined});
        affinity
    }
}

/// One node selector term that holds where both do (Kubernetes ANDs the requirements
/// within a term).
fn both(a: &Value, b: &Value) -> Value {
    let mut term = json!({});
    for key in ["matchExpressions", "matchFields"] {
        let all: Vec<Value> = [a, b]
            .iter()
            .flat_map(|t| t[key].as_array().cloned().unwrap_or_default())
            .collect();
        if !all.is_empty() {
            term[key] = Value::Array(all);
        }
    }
    term
}

fn to_value(v: &impl Serialize) -> Value {
    serde_json::to_value(v).expect("serializable")
}

/// The first field of `given` (a path such as `.resources.limit`) that `read` does not
/// hold: Kubernetes' types skip fields they do not know, which would drop a misspelt
/// setting without a word. Nulls and empty values count as absent.
fn lost_field(given: &Value, read: &Value, at: &str) -> Option<String> {
    match given {
        Value::Object(fields) => fields.iter().find_map(|(k, v)| {
            let path = format!("{at}.{k}");
            match read.get(k) {
                None if empty(v) => None,
                None => Some(path),
                Some(r) => lost_field(v, r, &path),
            }
        }),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, v)| {
            let path = format!("{at}[{i}]");
            match read.get(i) {
                None => Some(path),
                Some(r) => lost_field(v, r, &path),
            }
        }),
        _ => None,
    }
}

fn empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(o) => o.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_given_is_the_defaults() {
        assert_eq!(AgentPod::parse("{}").unwrap(), AgentPod::default());
        let d = AgentPod::default();
        assert_eq!(d.node_selector["kubernetes.io/os"], "linux");
        assert_eq!(to_value(&d.tolerations), json!([{"operator": "Exists"}]));
        assert_eq!(
            to_value(&d.resources),
            json!({"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "96Mi"}})
        );
    }

    #[test]
    fn every_field_is_read() {
        let given = json!({
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "200Mi"}},
            "nodeSelector": {"kubernetes.io/os": "linux", "pool": "a"},
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [{"key": "z", "operator": "Exists"}]}}]}},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "priorityClassName": "ops-critical",
            "podAnnotations": {"a": "1"},
            "podLabels": {"team": "platform"},
            "logLevel": "debug",
            "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
            "maxUnavailable": 5,
            "seLinuxOptions": {"type": "spc_t"},
            "appArmorProfile": {"type": "Localhost", "localhostProfile": "nodemem-agent"},
            "extraArgs": ["--per-container-metrics", "--status-refresh-seconds=30"],
            "extraVolumes": [{"name": "kubelet-file", "hostPath": {"path": "/etc/kubelet.yaml", "type": "File"}}],
            "extraVolumeMounts": [{"name": "kubelet-file", "mountPath": "/host/kubelet.yaml", "readOnly": true}],
        });
        let pod = AgentPod::parse(&given.to_string()).unwrap();
        assert_eq!(to_value(&pod), given);
    }

    #[test]
    fn a_misspelt_or_reserved_setting_is_refused_by_name() {
        let err = |j: Value| AgentPod::parse(&j.to_string()).unwrap_err();
        assert!(err(json!({"nri": true})).contains("unknown field `nri`"));
        // Inside Kubernetes' own types, which would skip it.
        assert_eq!(
            err(json!({"resources": {"limit": {"memory": "1Gi"}}})),
            "--agent-pod: unknown field .resources.limit"
        );
        assert_eq!(
            err(json!({"tolerations": [{"operator": "Exists", "efect": "NoSchedule"}]})),
            "--agent-pod: unknown field .tolerations[0].efect"
        );
        assert!(err(json!({"logLevel": "verbose"})).contains("unknown variant `verbose`"));
        assert!(err(json!({"podLabels": {"app.kubernetes.io/name": "x"}}))
            .contains("podLabels may not set app.kubernetes.io/name"));
        assert!(err(json!({"env": [{"name": "RUST_LOG", "value": "x"}]}))
            .contains("env may not set RUST_LOG"));
        assert!(err(json!([])).contains("--agent-pod"));
        for bad in [
            json!(0),
            json!("0%"),
            json!("101%"),
            json!("ten"),
            json!(-1),
        ] {
            assert!(
                err(json!({"maxUnavailable": bad})).contains("maxUnavailable must be"),
                "{bad}"
            );
        }
        assert!(AgentPod::parse(r#"{"maxUnavailable": "25%"}"#).is_ok());
        // Extra flags: only the agent's tuning; volumes apart from the controller's.
        assert!(err(json!({"extraArgs": ["--cgroup-root=/x"]}))
            .contains("extraArgs may not set --cgroup-root"));
        assert!(err(json!({"extraArgs": ["per-container-metrics"]}))
            .contains("takes flags (--flag or --flag=value)"));
        assert!(
            err(json!({"extraVolumes": [{"name": "state", "hostPath": {"path": "/x"}}]}))
                .contains("may not name a volume state")
        );
        assert!(
            err(json!({"extraVolumes": [{"name": "scratch", "emptyDir": {}}]}))
                .contains("extraVolumes scratch must be a hostPath volume")
        );
        assert!(
            err(json!({"seLinuxOptions": {"type": "spc_t", "level": "s0"}}))
                .contains("seLinuxOptions takes a type only")
        );
        assert!(
            err(json!({"extraVolumeMounts": [{"name": "cgroup", "mountPath": "/x"}]}))
                .contains("mounts cgroup, which is not one of extraVolumes")
        );
        assert!(err(json!({"seLinuxOptions": {"typ": "spc_t"}}))
            .contains("unknown field .seLinuxOptions.typ"));
        // AppArmor: Unconfined or a Localhost profile by name, never the runtime's default.
        assert!(err(json!({"appArmorProfile": {"type": "RuntimeDefault"}}))
            .contains("may not be RuntimeDefault"));
        assert!(err(json!({"appArmorProfile": {"type": "Localhost"}}))
            .contains("Localhost names its profile"));
        assert!(
            err(json!({"appArmorProfile": {"type": "Localhost", "localhostProfile": " "}}))
                .contains("Localhost names its profile")
        );
        assert!(
            err(json!({"appArmorProfile": {"type": "Unconfined", "localhostProfile": "x"}}))
                .contains("localhostProfile with type Localhost only")
        );
        assert!(err(json!({"appArmorProfile": {"type": "unconfined"}}))
            .contains("must be Unconfined or Localhost, not \"unconfined\""));
        assert!(err(json!({"appArmorProfile": {"typ": "Unconfined"}}))
            .contains("unknown field .appArmorProfile.typ"));
        let unconfined = AgentPod::parse(r#"{"appArmorProfile": {"type": "Unconfined"}}"#).unwrap();
        assert_eq!(unconfined.app_armor(), json!({"type": "Unconfined"}));
        // The chart's default `{}` is Unconfined.
        let default = AgentPod::parse(r#"{"appArmorProfile": {}}"#).unwrap();
        assert_eq!(default.app_armor_profile, None);
        assert_eq!(default.app_armor(), json!({"type": "Unconfined"}));
        assert!(AgentPod::parse("{").unwrap_err().contains("not JSON"));
        // Empty values are not settings lost.
        assert!(AgentPod::parse(r#"{"affinity": null, "env": []}"#).is_ok());
    }

    fn required(terms: Value) -> Value {
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}})
    }

    #[test]
    fn required_node_affinity_holds_with_the_policies_placement() {
        let pool = |p: &str| json!({"matchExpressions": [{"key": "pool", "operator": "In", "values": [p]}]});
        let placement = required(json!([pool("a"), pool("b")]));
        // Nothing given: the policies' placement.
        assert_eq!(AgentPod::default().affinity(&placement), placement);
        assert_eq!(AgentPod::default().affinity(&json!({})), json!({}));
        let arch =
            json!({"matchExpressions": [{"key": "arch", "operator": "In", "values": ["arm64"]}]});
        let given = AgentPod {
            affinity: Some(
                serde_json::from_value(json!({
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [arch]},
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 5, "preference": {"matchExpressions": [{"key": "z", "operator": "Exists"}]}}]},
                    "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}))
                .unwrap(),
            ),
            ..AgentPod::default()
        };
        let got = given.affinity(&placement);
        // Each pool's term and the given term at once.
        let and = |p: &str| {
            json!({"matchExpressions": [
                {"key": "pool", "operator": "In", "values": [p]},
                {"key": "arch", "operator": "In", "values": ["arm64"]}]})
        };
        assert_eq!(
            got["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
            json!({"nodeSelectorTerms": [and("a"), and("b")]})
        );
        assert_eq!(
            got["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"],
            5
        );
        assert!(got.get("podAntiAffinity").is_some());
        // A node kept for its config (a field term) keeps the given requirement too.
        let old =
            json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]});
        let got = given.affinity(&required(json!([old])));
        assert_eq!(
            got["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"],
            json!([{"matchExpressions": arch["matchExpressions"], "matchFields": old["matchFields"]}])
        );
        // Every node (no placement): the given terms alone.
        let got = given.affinity(&json!({}));
        assert_eq!(
            got["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"],
            json!([arch])
        );
    }

    #[test]
    fn the_controllers_own_labels_and_variables_come_first_and_win() {
        let pod = AgentPod {
            pod_labels: BTreeMap::from([("team".into(), "p".into())]),
            env: vec![EnvVar {
                name: "X".into(),
                value: Some("1".into()),
                ..Default::default()
            }],
            log_level: LogLevel::Warn,
            ..AgentPod::default()
        };
        let own = json!({"app.kubernetes.io/name": "nodemem-agent"});
        assert_eq!(
            pod.labels(&own),
            json!({"team": "p", "app.kubernetes.io/name": "nodemem-agent"})
        );
        let names: Vec<String> = pod
            .env()
            .iter()
            .map(|v| {
                format!(
                    "{}={}",
                    v["name"].as_str().unwrap(),
                    v["value"].as_str().unwrap_or("<ref>")
                )
            })
            .collect();
        assert_eq!(
            names,
            ["NODE_NAME=<ref>", "POD_NAME=<ref>", "RUST_LOG=warn", "X=1"]
        );
    }
}
