//! What the status says of the node's kubelet: where its configuration was read
//! (`status.node.kubelet`), whether it could be (`KubeletConfigRead`), and whether its
//! version is one nodemem's rules were checked against (`KubeletSupported`). Pure.

use nodemem_api::config::KubeletFacts;
use nodemem_apply::kubelet::{KubeletSettings, KubeletUnread};
use nodemem_model::kubelet::gates::removed_among;
use nodemem_model::kubelet::version::{
    KubeletSupport, KubeletVersion, NEWEST_TESTED, OLDEST_SUPPORTED,
};

/// The kubelet as a pass read it.
#[derive(Clone, Copy, Debug, Default)]
pub struct KubeletRead<'a> {
    /// What was read (or assumed, when `unread`).
    pub settings: Option<&'a KubeletSettings>,
    /// Why it could not be read.
    pub unread: Option<&'a KubeletUnread>,
    /// The Node's kubelet version.
    pub version: Option<KubeletVersion>,
}

impl KubeletRead<'_> {
    /// `status.node.kubelet`.
    pub fn facts(&self) -> Option<KubeletFacts> {
        let version = self.version.map(|v| v.to_string());
        let read = self.unread.is_none_or(|u| u.kept_last);
        let Some(k) = self.settings.filter(|_| read) else {
            return version.map(|v| KubeletFacts {
                version: Some(v),
                ..KubeletFacts::default()
            });
        };
        let o = &k.origin;
        Some(KubeletFacts {
            version,
            process: o
                .process
                .as_ref()
                .map(|(pid, cmd)| format!("{cmd} (pid {pid})")),
            config: o.config.clone(),
            drop_ins: o.drop_ins.iter().take(64).cloned().collect(),
            flags: o.flags.iter().take(64).cloned().collect(),
            ignored: o.ignored.iter().take(16).map(ToString::to_string).collect(),
            removed_gates: removed_among(k.feature_gates.iter().map(String::as_str))
                .iter()
                .map(|g| {
                    format!(
                        "{} (removed in v{}.{})",
                        g.name, g.removed_in.major, g.removed_in.minor
                    )
                })
                .collect(),
        })
    }

    /// `KubeletConfigRead`: (ok, reason, message).
    pub fn read_condition(&self) -> (bool, &'static str, String) {
        if let Some(u) = self.unread {
            let stands_in = match (u.kept_last, self.settings) {
                (true, Some(k)) => format!(
                    "nodemem keeps what it last read ({})",
                    k.origin.sources().join(", ")
                ),
                _ => "nodemem assumes a kubelet configuration that names nothing (evictionHard memory.available 100Mi, no reservations, the MemoryQoS gate at its default for the version)".to_string(),
            };
            return (
                false,
                u.reason,
                format!(
                    "{}; {stands_in}, and enforcement: Kubelet refuses",
                    u.message
                ),
            );
        }
        let Some(k) = self.settings else {
            return (
                false,
                "NotReadYet",
                "the kubelet's configuration is read on the first whole-node pass".to_string(),
            );
        };
        let o = &k.origin;
        let mut parts = vec![match &o.config {
            Some(c) => c.clone(),
            None => "no --config file (the kubelet's built-in defaults)".to_string(),
        }];
        if let Some(dir) = &o.config_dir {
            parts.push(format!("{} drop-in(s) from {dir}", o.drop_ins.len()));
        }
        if !o.flags.is_empty() {
            parts.push(format!("flags {}", o.flags.join(" ")));
        }
        let mut message = format!("{}: {}", o.who(), parts.join("; "));
        message.push_str(&removed_gates_note(&k.feature_gates));
        (true, "Read", message)
    }

    /// `KubeletSupported`: (ok, reason, message); None while the version is unknown.
    pub fn support_condition(&self) -> Option<(bool, &'static str, String)> {
        let v = self.version?;
        let range = format!("{OLDEST_SUPPORTED} to {NEWEST_TESTED}");
        Some(match v.support() {
            KubeletSupport::Tested if v.on_a_real_node() => (
                true,
                "Tested",
                format!("kubelet {v} is within the versions nodemem's rules are checked against ({range})"),
            ),
            KubeletSupport::Tested => (
                true,
                "Tested",
                format!("kubelet {v} is within the versions nodemem's rules are checked against ({range}): its minor version against the kubelet's own code run as a library over generated pods; the real node of that version waits for its modules to be served"),
            ),
            KubeletSupport::OlderThanSupported => (
                false,
                "OlderThanSupported",
                format!("kubelet {v} is older than {OLDEST_SUPPORTED}, the oldest version in upstream support and nodemem's tests ({range}); nodemem applies the rules it has for it unchecked: upgrade the kubelet"),
            ),
            KubeletSupport::NewerThanTested => (
                false,
                "NewerThanTested",
                format!("kubelet {v} is newer than {NEWEST_TESTED}, the newest nodemem's rules are checked against ({range}); nodemem applies {NEWEST_TESTED}'s rules unchecked: upgrade nodemem"),
            ),
        })
    }
}

/// What an upgrade would meet: the gates the kubelet's configuration names that a
/// later kubelet no longer registers (it refuses to start on them); empty when none.
fn removed_gates_note(named: &[String]) -> String {
    let removed = removed_among(named.iter().map(String::as_str));
    let Some(first) = removed.first() else {
        return String::new();
    };
    let names: Vec<&str> = removed.iter().map(|g| g.name).collect();
    format!(
        "; it names the feature gate(s) {} that kubelet v{}.{} removed: a kubelet of that version refuses to start with them, so take them out of its configuration before upgrading",
        names.join(", "),
        first.removed_in.major,
        first.removed_in.minor
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemem_apply::kubelet::KubeletOrigin;

    #[test]
    fn a_configuration_naming_a_gate_v1_38_removed_says_so_before_the_upgrade() {
        let settings = KubeletSettings {
            feature_gates: vec!["MemoryQoS".into(), "NodeSwap".into()],
            ..KubeletSettings::default()
        };
        let read = KubeletRead {
            settings: Some(&settings),
            unread: None,
            version: KubeletVersion::parse("v1.37.2").ok(),
        };
        let (ok, reason, message) = read.read_condition();
        assert!(ok && reason == "Read", "{message}");
        assert!(
            message.contains("NodeSwap that kubelet v1.38 removed"),
            "{message}"
        );
        // And in the status's facts, which `kubectl nodemem explain` lists.
        assert_eq!(
            read.facts().unwrap().removed_gates,
            ["NodeSwap (removed in v1.38)"]
        );
        let clean = KubeletSettings {
            feature_gates: vec!["MemoryQoS".into()],
            ..KubeletSettings::default()
        };
        let (_, _, message) = KubeletRead {
            settings: Some(&clean),
            ..read
        }
        .read_condition();
        assert!(!message.contains("removed"), "{message}");
        let facts = KubeletRead {
            settings: Some(&clean),
            ..read
        }
        .facts();
        assert!(facts.unwrap().removed_gates.is_empty());
    }

    fn v(t: &str) -> Option<KubeletVersion> {
        Some(KubeletVersion::parse(t).unwrap())
    }

    #[test]
    fn a_kubelet_read_from_its_process_names_its_files_and_flags() {
        let settings = KubeletSettings {
            origin: KubeletOrigin {
                process: Some((812, "kubelet".into())),
                config: Some("/etc/kubernetes/kubelet/config.json".into()),
                config_dir: Some("/etc/kubernetes/kubelet/config.json.d".into()),
                drop_ins: vec!["/etc/kubernetes/kubelet/config.json.d/40-nodeadm.conf".into()],
                flags: vec!["--feature-gates=MemoryQoS=true".into()],
                memory_manager_state: None,
                ignored: vec![nodemem_apply::kubelet::IgnoredKubelet {
                    pid: 4100,
                    command: "kubelet".into(),
                    why: "runs in a pod's cgroup (/kubepods/besteffort/pod1/ab)".into(),
                }],
            },
            ..KubeletSettings::default()
        };
        let read = KubeletRead {
            settings: Some(&settings),
            unread: None,
            version: v("v1.35.4"),
        };
        let (ok, reason, message) = read.read_condition();
        assert!(ok && reason == "Read");
        assert_eq!(message, "kubelet (pid 812): /etc/kubernetes/kubelet/config.json; 1 drop-in(s) from /etc/kubernetes/kubelet/config.json.d; flags --feature-gates=MemoryQoS=true");
        let facts = read.facts().unwrap();
        assert_eq!(facts.process.as_deref(), Some("kubelet (pid 812)"));
        assert_eq!(facts.version.as_deref(), Some("v1.35.4"));
        assert_eq!(facts.drop_ins.len(), 1);
        assert_eq!(facts.flags, ["--feature-gates=MemoryQoS=true"]);
        assert_eq!(
            facts.ignored,
            ["kubelet (pid 4100): runs in a pod's cgroup (/kubepods/besteffort/pod1/ab)"]
        );
    }

    #[test]
    fn a_kubelet_that_cannot_be_read_says_why_and_what_is_assumed() {
        let assumed = KubeletSettings::default();
        let why = KubeletUnread {
            reason: "NoKubeletProcess",
            message: "no kubelet process under /host/proc".to_string(),
            kept_last: false,
        };
        let read = KubeletRead {
            settings: Some(&assumed),
            unread: Some(&why),
            version: v("v1.37.2"),
        };
        let (ok, reason, message) = read.read_condition();
        assert!(!ok);
        assert_eq!(reason, "NoKubeletProcess");
        assert!(message.starts_with("no kubelet process under /host/proc; nodemem assumes"));
        assert!(message.ends_with("enforcement: Kubelet refuses"));
        assert!(message.contains("names nothing"), "{message}");
        let facts = read.facts().unwrap();
        assert_eq!(
            (facts.process, facts.config, facts.version.as_deref()),
            (None, None, Some("v1.37.2")),
            "nothing read is shown as read"
        );
    }

    /// A drop-in added since the kubelet started that it would refuse: what was read
    /// before stays (nodemem does not forget a kubelet that writes values itself).
    #[test]
    fn a_reading_that_fails_later_keeps_the_last_one_and_says_so() {
        let last = KubeletSettings {
            origin: KubeletOrigin {
                process: Some((9, "kubelet".into())),
                config: Some("/var/lib/kubelet/config.yaml".into()),
                ..Default::default()
            },
            ..KubeletSettings::default()
        };
        let why = KubeletUnread {
            reason: "NotAKubeletConfiguration",
            message: "/etc/kubernetes/kubelet.conf.d/50-x.conf: not a KubeletConfiguration: no apiVersion/kind".into(),
            kept_last: true,
        };
        let read = KubeletRead {
            settings: Some(&last),
            unread: Some(&why),
            version: v("v1.36.3"),
        };
        let (ok, reason, message) = read.read_condition();
        assert!(!ok && reason == "NotAKubeletConfiguration");
        assert!(
            message.contains("nodemem keeps what it last read (/var/lib/kubelet/config.yaml)"),
            "{message}"
        );
        assert_eq!(
            read.facts().unwrap().config.as_deref(),
            Some("/var/lib/kubelet/config.yaml"),
            "what is kept is shown"
        );
    }

    #[test]
    fn versions_outside_the_tested_range_are_named() {
        let cond = |t: &str| {
            KubeletRead {
                version: v(t),
                ..Default::default()
            }
            .support_condition()
            .unwrap()
        };
        assert_eq!(cond("v1.36.3").1, "Tested");
        let (ok, reason, message) = cond("v1.33.1");
        assert!(!ok && reason == "OlderThanSupported");
        assert!(
            message.contains("v1.33.1 is older than v1.35.0"),
            "{message}"
        );
        let (ok, reason, message) = cond("v1.38.0-beta.0");
        assert!(ok && reason == "Tested", "{message}");
        assert!(message.contains("as a library"), "{message}");
        assert!(!cond("v1.37.2").2.contains("as a library"));
        let (ok, reason, _) = cond("v1.39.0");
        assert!(!ok && reason == "NewerThanTested");
        assert_eq!(KubeletRead::default().support_condition(), None);
    }
}
