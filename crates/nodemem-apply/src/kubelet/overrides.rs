//! Whether nodemem's drop-in decides what the kubelet runs: the kubelet applies its
//! `--config-dir` drop-ins in name order, each a JSON merge patch over the ones before
//! (v1.37.2 `cmd/kubelet/app/server.go` `mergeKubeletConfigurations`), and then its
//! command-line flags over all of them (`kubeletConfigFlagPrecedence`). A drop-in that
//! sorts after nodemem's (`~site.conf` after `~nodemem.conf`), or a flag such as
//! `--feature-gates=MemoryQoS=false`, sets a field again; the kubelet then runs that
//! value, not nodemem's. Pure: the documents are read by the caller.

use std::fmt;

use serde_json::Value;

use super::command_line::{FlagSettings, KubeletFlag};
use nodemem_model::quantity::Quantity;

/// A field of nodemem's drop-in that the kubelet will run with another value, and what
/// sets it (each drop-in and flag that does, in the kubelet's order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overridden {
    /// As the configuration names it: `featureGates.MemoryQoS`.
    pub field: &'static str,
    /// `drop-in /etc/kubernetes/kubelet.conf.d/zz-site.conf`,
    /// `flag --feature-gates=MemoryQoS=false`.
    pub by: Vec<String>,
}

impl fmt::Display for Overridden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is set again by {}",
            self.field,
            self.by.join(" and ")
        )
    }
}

/// How a flag sets a field.
#[derive(Clone, Copy)]
enum ByFlag {
    /// No flag sets it.
    None,
    /// The flag's map replaces the configuration's whole map (`--kube-reserved`,
    /// `--system-reserved`, `--eviction-hard`): given at all, it decides the field.
    Map(&'static str),
    /// The flag sets this field when it names it (`--feature-gates` merges by key;
    /// `--memory-manager-policy`, `--reserved-memory`).
    Named(&'static str),
}

/// A field nodemem's drop-in may set.
struct Field {
    name: &'static str,
    path: &'static [&'static str],
    flag: ByFlag,
}

const FIELDS: &[Field] = &[
    Field {
        name: "featureGates.MemoryQoS",
        path: &["featureGates", "MemoryQoS"],
        flag: ByFlag::Named("feature-gates"),
    },
    Field {
        name: "memoryThrottlingFactor",
        path: &["memoryThrottlingFactor"],
        flag: ByFlag::None,
    },
    Field {
        name: "memoryReservationPolicy",
        path: &["memoryReservationPolicy"],
        flag: ByFlag::None,
    },
    Field {
        name: "memoryManagerPolicy",
        path: &["memoryManagerPolicy"],
        flag: ByFlag::Named("memory-manager-policy"),
    },
    Field {
        name: "reservedMemory",
        path: &["reservedMemory"],
        flag: ByFlag::Named("reserved-memory"),
    },
    Field {
        name: "kubeReserved.memory",
        path: &["kubeReserved", "memory"],
        flag: ByFlag::Map("kube-reserved"),
    },
    Field {
        name: "systemReserved.memory",
        path: &["systemReserved", "memory"],
        flag: ByFlag::Map("system-reserved"),
    },
    Field {
        name: "evictionHard.memory.available",
        path: &["evictionHard", "memory.available"],
        flag: ByFlag::Map("eviction-hard"),
    },
];

/// What a document says of a field.
#[derive(Debug, PartialEq)]
enum At<'a> {
    /// Not named: the documents before decide.
    Absent,
    /// Removed by a `null` on the way (`featureGates: null` removes every gate).
    Removed,
    Value(&'a Value),
}

fn at<'a>(doc: &'a Value, path: &[&str]) -> At<'a> {
    let mut here = doc;
    for (i, key) in path.iter().enumerate() {
        match here.get(key) {
            None => return At::Absent,
            Some(Value::Null) if i + 1 < path.len() => return At::Removed,
            Some(v) => here = v,
        }
    }
    At::Value(here)
}

/// A value as the kubelet compares it: quantities by their amount (`1Gi` is
/// `1024Mi`), numbers as numbers, the rest as written.
fn normal(v: &Value) -> Value {
    match v {
        Value::String(s) => Quantity::parse(s)
            .map(|q| Value::from(q.value()))
            .unwrap_or_else(|_| v.clone()),
        Value::Number(n) => n.as_f64().map_or_else(|| v.clone(), Value::from),
        Value::Array(items) => Value::Array(items.iter().map(normal).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), normal(v))).collect())
        }
        _ => v.clone(),
    }
}

/// Whether `other` leaves the field at `ours` (a null for a null: both unset).
fn same(ours: &Value, other: &At<'_>) -> bool {
    match other {
        At::Absent => true,
        At::Removed => ours.is_null(),
        At::Value(v) => normal(ours) == normal(v),
    }
}

/// The flags as one configuration document (the shape `FlagSettings` reads them into).
fn flags_document(f: &FlagSettings) -> Value {
    let mut m = serde_json::Map::new();
    if !f.feature_gates.is_empty() {
        m.insert("featureGates".into(), serde_json::json!(f.feature_gates));
    }
    for (key, map) in [
        ("evictionHard", &f.eviction_hard),
        ("kubeReserved", &f.kube_reserved),
        ("systemReserved", &f.system_reserved),
    ] {
        if let Some(map) = map {
            m.insert(key.into(), serde_json::json!(map));
        }
    }
    if let Some(p) = &f.memory_manager_policy {
        m.insert("memoryManagerPolicy".into(), Value::from(p.clone()));
    }
    if let Some(r) = &f.reserved_memory {
        m.insert("reservedMemory".into(), r.clone());
    }
    Value::Object(m)
}

/// The fields of `ours` (nodemem's drop-in) that the drop-ins sorting after it
/// (`later`, named as the kubelet names them, in its order) or the command-line flags
/// set to another value.
pub fn overrides(
    ours: &Value,
    later: &[(String, Value)],
    flags: &[KubeletFlag],
    flag_settings: &FlagSettings,
) -> Vec<Overridden> {
    let flag_doc = flags_document(flag_settings);
    let mut found = Vec::new();
    for field in FIELDS {
        let At::Value(mine) = at(ours, field.path) else {
            continue;
        };
        let mut by: Vec<String> = later
            .iter()
            .filter(|(_, doc)| !same(mine, &at(doc, field.path)))
            .map(|(named, _)| format!("drop-in {named}"))
            .collect();
        let flag_says = match field.flag {
            ByFlag::None => None,
            ByFlag::Map(name) => flags.iter().any(|f| f.name == name).then_some(name),
            ByFlag::Named(name) => {
                matches!(at(&flag_doc, field.path), At::Value(_)).then_some(name)
            }
        };
        if let Some(name) = flag_says {
            let effective = match at(&flag_doc, field.path) {
                At::Absent => At::Removed,
                other => other,
            };
            if !same(mine, &effective) {
                by.extend(
                    flags
                        .iter()
                        .filter(|f| f.name == name)
                        .map(|f| format!("flag {f}")),
                );
            }
        }
        if !by.is_empty() {
            found.push(Overridden {
                field: field.name,
                by,
            });
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn flag(name: &str, value: &str) -> KubeletFlag {
        KubeletFlag {
            name: name.into(),
            value: value.into(),
        }
    }

    fn check(ours: Value, later: &[(&str, Value)], flags: &[KubeletFlag]) -> Vec<String> {
        let later: Vec<(String, Value)> = later
            .iter()
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect();
        let settings = super::super::command_line::flag_settings(flags).unwrap();
        overrides(&ours, &later, flags, &settings)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn ours() -> Value {
        json!({"featureGates": {"MemoryQoS": true}, "memoryThrottlingFactor": 0.8,
            "memoryReservationPolicy": "TieredReservation", "memoryManagerPolicy": "Static",
            "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1Gi"}}],
            "kubeReserved": {"memory": "512Mi"}, "evictionHard": {"memory.available": "100Mi"}})
    }

    #[test]
    fn nothing_after_it_and_no_flag_leaves_every_field_to_nodemem() {
        assert!(check(ours(), &[], &[]).is_empty());
        // The same values again, other keys of the same maps, and other gates.
        let agreeing = json!({"featureGates": {"MemoryQoS": true, "Foo": false},
            "memoryThrottlingFactor": 0.8, "kubeReserved": {"memory": "0.5Gi", "cpu": "1"},
            "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1024Mi"}}]});
        assert!(check(ours(), &[("/d/zz-site.conf", agreeing)], &[]).is_empty());
        let flags = [
            flag("feature-gates", "Foo=true"),
            flag("kube-reserved", "memory=512Mi,cpu=1"),
        ];
        assert!(check(ours(), &[], &flags).is_empty());
    }

    #[test]
    fn a_later_drop_in_is_named_with_each_field_it_sets_again() {
        let site = json!({"featureGates": {"MemoryQoS": false}, "memoryThrottlingFactor": 0.6,
            "evictionHard": {"memory.available": "200Mi"}});
        let removes = json!({"featureGates": null, "memoryThrottlingFactor": null});
        assert_eq!(
            check(
                ours(),
                &[("/d/zz-site.conf", site), ("/d/zzz.conf", removes)],
                &[]
            ),
            [
                "featureGates.MemoryQoS is set again by drop-in /d/zz-site.conf and drop-in /d/zzz.conf",
                "memoryThrottlingFactor is set again by drop-in /d/zz-site.conf and drop-in /d/zzz.conf",
                "evictionHard.memory.available is set again by drop-in /d/zz-site.conf",
            ]
        );
    }

    /// Each flag that decides a field nodemem sets: the gate by key, the policy and
    /// the reserved memory when given, the reserved maps whole (a `--kube-reserved`
    /// without memory removes nodemem's).
    #[test]
    fn each_overriding_flag_is_named() {
        let flags = [
            flag("feature-gates", "MemoryQoS=false"),
            flag("memory-manager-policy", "None"),
            flag("reserved-memory", "0:memory=2Gi"),
            flag("kube-reserved", "cpu=1"),
            flag("eviction-hard", "memory.available<300Mi"),
        ];
        assert_eq!(
            check(ours(), &[], &flags),
            [
                "featureGates.MemoryQoS is set again by flag --feature-gates=MemoryQoS=false",
                "memoryManagerPolicy is set again by flag --memory-manager-policy=None",
                "reservedMemory is set again by flag --reserved-memory=0:memory=2Gi",
                "kubeReserved.memory is set again by flag --kube-reserved=cpu=1",
                "evictionHard.memory.available is set again by flag --eviction-hard=memory.available<300Mi",
            ]
        );
    }

    /// A field nodemem's drop-in does not set is nobody's override.
    #[test]
    fn fields_nodemem_leaves_alone_are_not_checked() {
        let only_gate = json!({"featureGates": {"MemoryQoS": false}});
        let flags = [flag("kube-reserved", "memory=1Gi")];
        let site = json!({"memoryThrottlingFactor": 0.5});
        assert!(check(only_gate, &[("/d/zz.conf", site)], &flags).is_empty());
    }
}
