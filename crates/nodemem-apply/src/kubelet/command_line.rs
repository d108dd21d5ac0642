//! The kubelet's command line, read as the kubelet reads it (pflag, with `_` in a flag's
//! name read as `-`, v1.37.2 `cmd/kubelet/app/options/options.go`), and k3s's, whose
//! kubelet runs inside the k3s process and takes its flags as `--kubelet-arg`s (k3s
//! `pkg/daemons/agent/agent_linux.go`, `pkg/util/args.go`). Pure: procfs and the
//! files are read by [`super::process`].

use std::collections::BTreeMap;

/// The kubelet's own default `--root-dir`.
pub const DEFAULT_ROOT_DIR: &str = "/var/lib/kubelet";
/// k3s's default `--data-dir`; its kubelet's `--config-dir` is `agent/etc/kubelet.conf.d`
/// under it (k3s v1.32 and later).
pub const K3S_DATA_DIR: &str = "/var/lib/rancher/k3s";
/// k3s's default `--config` (its own configuration, which may hold `kubelet-arg`s).
pub const K3S_CONFIG: &str = "/etc/rancher/k3s/config.yaml";

/// The flags nodemem reads: every kubelet flag that sets a field it reads. All others
/// are left as they are (they decide nothing nodemem computes).
pub const READ_FLAGS: &[&str] = &[
    "feature-gates",
    "eviction-hard",
    "kube-reserved",
    "system-reserved",
    "memory-manager-policy",
    "reserved-memory",
    "cgroup-driver",
];

/// Which process runs the kubelet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubeletHost {
    /// The kubelet binary (kubeadm, EKS, GKE, AKS, RKE2 and most others).
    Kubelet,
    /// k3s (`k3s server` or `k3s agent`): the kubelet runs inside it.
    K3s {
        /// `--data-dir`: its kubelet's drop-in directory is under it.
        data_dir: String,
        /// `--config`: k3s's own configuration file (`kubelet-arg` entries).
        config: String,
    },
}

/// One flag as given: its name (normalized) and value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletFlag {
    /// The flag's name, without dashes.
    pub name: String,
    /// Its value, as given.
    pub value: String,
}

impl std::fmt::Display for KubeletFlag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--{}={}", self.name, self.value)
    }
}

/// What the kubelet's command line says about where its configuration is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletCommandLine {
    /// Which kubelet runs: the kubelet or k3s's agent.
    pub host: KubeletHost,
    /// `--config`, as given (relative to the kubelet's working directory).
    pub config: Option<String>,
    /// `--config-dir`.
    pub config_dir: Option<String>,
    /// `--root-dir` (the Memory Manager's state file is under it).
    pub root_dir: String,
    /// The flags of [`READ_FLAGS`], in the order given: the kubelet applies them over
    /// its files in this order.
    pub flags: Vec<KubeletFlag>,
}

/// Splits a pflag command line (without the program) into (name, value) pairs; a flag
/// without `=` takes the next argument unless that is a flag too (the kubelet has no
/// positional arguments, so a following word is always a value), and always for the
/// flags in `valued` (a value that looks like a flag, as k3s's `--kubelet-arg
/// --max-pods=10`). `--` ends flags.
fn pflag_pairs(args: &[String], valued: &[&str]) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            break;
        }
        let Some(body) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            continue;
        };
        let (name, value) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None if args
                .get(i)
                .is_some_and(|next| !next.starts_with('-') || valued.contains(&body)) =>
            {
                i += 1;
                (body, Some(args[i - 1].clone()))
            }
            None => (body, None),
        };
        // cliflag.WordSepNormalizeFunc: `_` is read as `-`.
        out.push((name.replace('_', "-"), value));
    }
    out
}

impl KubeletCommandLine {
    /// Reads `argv` (the program first) of the process running the kubelet, and for
    /// k3s what its configuration files say (`k3s_files`; read them from the path this
    /// returns in [`KubeletHost::K3s`] with none first).
    pub fn parse(argv: &[String], k3s_files: &K3sFiles) -> KubeletCommandLine {
        let program = argv
            .first()
            .map(|p| p.rsplit('/').next().unwrap_or(p))
            .unwrap_or("");
        if program.starts_with("k3s") {
            return Self::parse_k3s(argv, k3s_files);
        }
        Self::from_kubelet_args(KubeletHost::Kubelet, &argv[argv.len().min(1)..])
    }

    /// The kubelet's own flags.
    fn from_kubelet_args(host: KubeletHost, args: &[String]) -> KubeletCommandLine {
        let mut line = KubeletCommandLine {
            host,
            config: None,
            config_dir: None,
            root_dir: DEFAULT_ROOT_DIR.to_string(),
            flags: Vec::new(),
        };
        for (name, value) in pflag_pairs(args, &[]) {
            let value = value.unwrap_or_else(|| "true".to_string());
            match name.as_str() {
                "config" => line.config = Some(value).filter(|v| !v.is_empty()),
                "config-dir" => line.config_dir = Some(value).filter(|v| !v.is_empty()),
                "root-dir" => line.root_dir = value,
                n if READ_FLAGS.contains(&n) => line.flags.push(KubeletFlag {
                    name: n.to_string(),
                    value,
                }),
                _ => {}
            }
        }
        line
    }

    /// k3s: the kubelet's arguments are k3s's own (`--config-dir` under the data
    /// directory, `--root-dir` when set) followed by every `kubelet-arg`, files' first.
    /// A `kubelet-arg` is `name=value`, with or without `--`; k3s's `+`/`-` suffixes
    /// (append, prepend) are read as the plain flag. The command line's `--data-dir`
    /// wins over the files'.
    fn parse_k3s(argv: &[String], files: &K3sFiles) -> KubeletCommandLine {
        let pairs = pflag_pairs(
            &argv[argv.len().min(1)..],
            &["kubelet-arg", "data-dir", "d", "config", "c"],
        );
        let last = |names: &[&str]| {
            pairs
                .iter()
                .rev()
                .find(|(n, _)| names.contains(&n.as_str()))
                .and_then(|(_, v)| v.clone())
        };
        let data_dir = last(&["data-dir", "d"])
            .or_else(|| files.data_dir.clone())
            .unwrap_or_else(|| K3S_DATA_DIR.to_string());
        let config = last(&["config", "c"]).unwrap_or_else(|| K3S_CONFIG.to_string());
        let mut args = vec![format!(
            "--config-dir={}/agent/etc/kubelet.conf.d",
            data_dir.trim_end_matches('/')
        )];
        let given = pairs
            .iter()
            .filter(|(n, _)| n == "kubelet-arg")
            .filter_map(|(_, v)| v.clone());
        for arg in files.kubelet_args.iter().cloned().chain(given) {
            let arg = arg.trim_start_matches("--");
            let (name, value) = arg.split_once('=').unwrap_or((arg, "true"));
            args.push(format!("--{}={value}", name.trim_end_matches(['+', '-'])));
        }
        Self::from_kubelet_args(KubeletHost::K3s { data_dir, config }, &args)
    }
}

/// What k3s's configuration files (`config.yaml`, then `config.yaml.d/*.yaml` in name
/// order) say of its kubelet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct K3sFiles {
    /// `kubelet-arg` entries, in order.
    pub kubelet_args: Vec<String>,
    /// `data-dir`.
    pub data_dir: Option<String>,
}

impl K3sFiles {
    /// Adds one file's keys: a later file's `kubelet-arg` replaces the earlier ones,
    /// its `kubelet-arg+` appends (k3s `pkg/configfilearg`).
    pub fn add(&mut self, text: &str) -> Result<(), String> {
        let doc: BTreeMap<String, serde_yaml::Value> =
            serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        let list = |v: &serde_yaml::Value| -> Vec<String> {
            match v {
                serde_yaml::Value::Sequence(items) => items
                    .iter()
                    .filter_map(|i| i.as_str().map(String::from))
                    .collect(),
                serde_yaml::Value::String(s) => vec![s.clone()],
                _ => Vec::new(),
            }
        };
        if let Some(v) = doc.get("kubelet-arg") {
            self.kubelet_args = list(v);
        }
        if let Some(v) = doc.get("kubelet-arg+") {
            self.kubelet_args.extend(list(v));
        }
        if let Some(dir) = doc.get("data-dir").and_then(|v| v.as_str()) {
            self.data_dir = Some(dir.to_string());
        }
        Ok(())
    }
}

/// A flag nodemem reads whose value the kubelet would not accept either.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("kubelet flag {flag}: {reason}")]
pub struct FlagError {
    /// The flag, as given.
    pub flag: KubeletFlag,
    /// Why the kubelet would refuse it.
    pub reason: String,
}

/// What the flags set, each as the kubelet's flag type sets it: maps are replaced by a
/// flag's first occurrence and filled by the following ones; feature gates are then
/// merged with the files' by name; `--reserved-memory` appends.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FlagSettings {
    /// `--feature-gates`.
    pub feature_gates: BTreeMap<String, bool>,
    /// `--eviction-hard`.
    pub eviction_hard: Option<BTreeMap<String, String>>,
    /// `--kube-reserved`.
    pub kube_reserved: Option<BTreeMap<String, String>>,
    /// `--system-reserved`.
    pub system_reserved: Option<BTreeMap<String, String>>,
    /// `--memory-manager-policy`.
    pub memory_manager_policy: Option<String>,
    /// In the configuration's shape (`[{numaNode, limits}]`), to compare with it.
    pub reserved_memory: Option<serde_json::Value>,
    /// `--cgroup-driver`.
    pub cgroup_driver: Option<String>,
}

/// Reads `flags` as the kubelet would; the first it would refuse is returned.
pub fn flag_settings(flags: &[KubeletFlag]) -> Result<FlagSettings, FlagError> {
    let mut out = FlagSettings::default();
    for flag in flags {
        let bad = |reason: String| FlagError {
            flag: flag.clone(),
            reason,
        };
        let v = flag.value.as_str();
        match flag.name.as_str() {
            "feature-gates" => {
                for (k, b) in pairs(v, '=').map_err(bad)? {
                    let on = parse_bool(&b)
                        .ok_or_else(|| bad(format!("invalid value of {k}: {b} (not a bool)")))?;
                    out.feature_gates.insert(k, on);
                }
            }
            "eviction-hard" => {
                fill(&mut out.eviction_hard, pairs(v, '<').map_err(bad)?);
            }
            "kube-reserved" => fill(&mut out.kube_reserved, pairs(v, '=').map_err(bad)?),
            "system-reserved" => fill(&mut out.system_reserved, pairs(v, '=').map_err(bad)?),
            "memory-manager-policy" => out.memory_manager_policy = Some(v.to_string()),
            "cgroup-driver" => out.cgroup_driver = Some(v.to_string()),
            "reserved-memory" => {
                let list = out
                    .reserved_memory
                    .get_or_insert_with(|| serde_json::Value::Array(Vec::new()));
                if let serde_json::Value::Array(items) = list {
                    items.extend(reserved_memory(v).map_err(bad)?);
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// `k=v,k=v` (or `k<v` for eviction thresholds), as cliflag's map flags split them.
fn pairs(value: &str, sep: char) -> Result<Vec<(String, String)>, String> {
    value
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.split_once(sep)
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| format!("malformed pair {s:?}, expect string{sep}string"))
        })
        .collect()
}

fn fill(map: &mut Option<BTreeMap<String, String>>, pairs: Vec<(String, String)>) {
    map.get_or_insert_with(BTreeMap::new).extend(pairs);
}

/// Go's strconv.ParseBool.
fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// `0:memory=1Gi,hugepages-1Gi=2Gi;1:memory=2Gi` (pkg/util/flag ReservedMemoryVar).
fn reserved_memory(value: &str) -> Result<Vec<serde_json::Value>, String> {
    let mut out = Vec::new();
    for reservation in value.split(';') {
        let (node, types) = reservation.split_once(':').ok_or_else(|| {
            format!("expected numaNodeID:type=quantity[,type=quantity...], got {reservation}")
        })?;
        let node: i32 = node.parse().map_err(|_| {
            format!("failed to convert the NUMA node ID, expected integer, got {node}")
        })?;
        let mut limits = serde_json::Map::new();
        for limit in types.split(',') {
            let (kind, q) = limit
                .split_once('=')
                .ok_or_else(|| format!("expected type=quantity, got {limit}"))?;
            if kind != "memory" && !kind.starts_with("hugepages-") {
                return Err(format!(
                    "memory type conversion error, unknown type: {kind:?}"
                ));
            }
            nodemem_model::quantity::Quantity::parse(q)
                .map_err(|_| format!("failed to parse the quantity: {q}"))?;
            limits.insert(kind.to_string(), serde_json::Value::String(q.to_string()));
        }
        out.push(serde_json::json!({"numaNode": node, "limits": limits}));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn flags_take_the_next_word_or_their_own_value_and_underscores_read_as_dashes() {
        let line = KubeletCommandLine::parse(
            &argv("/usr/bin/kubelet --config /etc/k.yaml --root_dir=/data/kubelet --v=2 --cgroups-per-qos --feature-gates MemoryQoS=true -- --eviction-hard=x"),
            &K3sFiles::default(),
        );
        assert_eq!(line.config.as_deref(), Some("/etc/k.yaml"));
        assert_eq!(line.config_dir, None);
        assert_eq!(line.root_dir, "/data/kubelet");
        assert_eq!(
            line.flags,
            vec![KubeletFlag {
                name: "feature-gates".into(),
                value: "MemoryQoS=true".into()
            }],
            "after -- nothing is a flag"
        );
    }

    #[test]
    fn map_flags_are_replaced_by_the_first_occurrence_and_filled_by_later_ones() {
        let flags = KubeletCommandLine::parse(
            &argv("kubelet --kube-reserved=cpu=1,memory=1Gi --kube-reserved memory=2Gi --eviction-hard=memory.available<500Mi,nodefs.available<10% --feature-gates=MemoryQoS=true,Foo=F --reserved-memory 0:memory=1Gi --reserved-memory=1:memory=2Gi;2:hugepages-2Mi=4Mi"),
            &K3sFiles::default(),
        )
        .flags;
        let s = flag_settings(&flags).unwrap();
        assert_eq!(
            s.kube_reserved.unwrap().get("memory").map(String::as_str),
            Some("2Gi")
        );
        assert_eq!(
            s.eviction_hard
                .unwrap()
                .get("memory.available")
                .map(String::as_str),
            Some("500Mi")
        );
        assert_eq!(s.feature_gates.get("MemoryQoS"), Some(&true));
        assert_eq!(s.feature_gates.get("Foo"), Some(&false));
        assert_eq!(
            s.reserved_memory.unwrap(),
            serde_json::json!([
                {"numaNode": 0, "limits": {"memory": "1Gi"}},
                {"numaNode": 1, "limits": {"memory": "2Gi"}},
                {"numaNode": 2, "limits": {"hugepages-2Mi": "4Mi"}},
            ])
        );
    }

    #[test]
    fn a_value_the_kubelet_would_refuse_is_named() {
        for (flag, value, says) in [
            (
                "feature-gates",
                "MemoryQoS=yes",
                "invalid value of MemoryQoS: yes",
            ),
            ("eviction-hard", "memory.available=1Gi", "malformed pair"),
            ("kube-reserved", "memory", "malformed pair"),
            ("reserved-memory", "0:cpu=1", "unknown type"),
            ("reserved-memory", "x:memory=1Gi", "NUMA node ID"),
            (
                "reserved-memory",
                "0:memory=lots",
                "failed to parse the quantity: lots",
            ),
        ] {
            let flag = KubeletFlag {
                name: flag.into(),
                value: value.into(),
            };
            let err = flag_settings(std::slice::from_ref(&flag)).unwrap_err();
            assert!(
                err.to_string().contains(says) && err.to_string().contains(&flag.to_string()),
                "{flag}: {err}"
            );
        }
    }

    #[test]
    fn k3s_runs_its_kubelet_with_its_drop_in_directory_and_kubelet_args_files_first() {
        let mut files = K3sFiles::default();
        files
            .add("data-dir: /ignored\nkubelet-arg: [max-pods=10]\n")
            .unwrap();
        files
            .add("kubelet-arg:\n- eviction-hard=memory.available<200Mi\n")
            .unwrap();
        files
            .add("kubelet-arg+: kube-reserved+=memory=1Gi\n")
            .unwrap();
        assert!(files.add("- not a map").is_err());
        let line = KubeletCommandLine::parse(
            &argv("/usr/local/bin/k3s agent -d /data/k3s --kubelet-arg=feature-gates=MemoryQoS=true --kubelet-arg --eviction-hard=memory.available<1Gi"),
            &files,
        );
        assert_eq!(
            line.host,
            KubeletHost::K3s {
                data_dir: "/data/k3s".into(),
                config: K3S_CONFIG.into()
            }
        );
        assert_eq!(
            line.config_dir.as_deref(),
            Some("/data/k3s/agent/etc/kubelet.conf.d")
        );
        let names: Vec<String> = line.flags.iter().map(ToString::to_string).collect();
        assert_eq!(
            names,
            [
                "--eviction-hard=memory.available<200Mi",
                "--kube-reserved=memory=1Gi",
                "--feature-gates=MemoryQoS=true",
                "--eviction-hard=memory.available<1Gi",
            ]
        );
        let s = flag_settings(&line.flags).unwrap();
        assert_eq!(
            s.eviction_hard.unwrap()["memory.available"],
            "1Gi",
            "the command line's arg comes last and wins"
        );
    }
}
