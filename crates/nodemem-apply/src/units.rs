//! systemd's record of the values nodemem holds (pure; the agent sends the updates).
//!
//! On a systemd-driver node every QoS slice, pod slice and container scope is a
//! systemd unit. systemd keeps each unit's cgroup settings in its own record and
//! writes all of them into the cgroup again whenever it reloads (`systemctl
//! daemon-reload`) or any property of the unit changes (src/core/cgroup.c,
//! `cgroup_context_apply`; the kubelet changes the QoS slices' CPUWeight every minute).
//! A value written only into the file is gone at the next such event: on the real node
//! the QoS slices lost nodemem's memory.low within 65 s. runc sets cgroup values as
//! unit properties over D-Bus for that reason (libcontainer/cgroups/systemd), then
//! writes the files; nodemem does the same for the files it holds, so systemd's record
//! says what nodemem wrote and every re-apply writes nodemem's value again.
//!
//! [`UnitRecords`] remembers what was sent per unit, so a unit is sent a property only
//! when nodemem's value for it changed (or the agent started: the record may say
//! anything until nodemem has told it once).

use std::collections::{BTreeMap, BTreeSet};

use nodemem_cgroup::parse::{memory_value, range_list, MemoryValue};
use nodemem_model::node::DesiredCgroup;
use nodemem_model::values::cgroup::{CPUSET_MEMS, MEMORY_HIGH, MEMORY_LOW, MEMORY_MIN};

use crate::plan::{Ownership, Write};

/// A unit property that stands for one cgroup file (systemd.resource-control(5)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UnitProperty {
    /// memory.min
    MemoryMin,
    /// memory.low
    MemoryLow,
    /// memory.high
    MemoryHigh,
    /// cpuset.mems
    AllowedMemoryNodes,
}

impl UnitProperty {
    /// The property for a cgroup file nodemem writes; None for files systemd does not
    /// keep.
    pub fn for_file(file: &str) -> Option<Self> {
        match file {
            MEMORY_MIN => Some(UnitProperty::MemoryMin),
            MEMORY_LOW => Some(UnitProperty::MemoryLow),
            MEMORY_HIGH => Some(UnitProperty::MemoryHigh),
            CPUSET_MEMS => Some(UnitProperty::AllowedMemoryNodes),
            _ => None,
        }
    }

    /// Its name on the D-Bus API.
    pub fn name(self) -> &'static str {
        match self {
            UnitProperty::MemoryMin => "MemoryMin",
            UnitProperty::MemoryLow => "MemoryLow",
            UnitProperty::MemoryHigh => "MemoryHigh",
            UnitProperty::AllowedMemoryNodes => "AllowedMemoryNodes",
        }
    }

    /// The cgroup interface file the property stands for.
    pub fn file(self) -> &'static str {
        match self {
            UnitProperty::MemoryMin => MEMORY_MIN,
            UnitProperty::MemoryLow => MEMORY_LOW,
            UnitProperty::MemoryHigh => MEMORY_HIGH,
            UnitProperty::AllowedMemoryNodes => CPUSET_MEMS,
        }
    }
}

/// A property's value as systemd's D-Bus API types it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnitValue {
    /// Memory* (`t`): bytes; `max` is `u64::MAX` (systemd's CGROUP_LIMIT_MAX, "infinity").
    Bytes(u64),
    /// AllowedMemoryNodes (`ay`): a bit mask, node n at bit n % 8 of byte n / 8 (as
    /// systemd's cpu_set_to_dbus and runc's RangeToBits).
    NodeMask(Vec<u8>),
}

impl UnitValue {
    /// The value for `text` written into `property`'s file; None when the text is not
    /// one nodemem writes (it is then not sent: systemd's record keeps what it had).
    pub fn parse(property: UnitProperty, text: &str) -> Option<Self> {
        match property {
            UnitProperty::AllowedMemoryNodes => {
                let nodes = range_list(CPUSET_MEMS, text).ok()?;
                let Some(&last) = nodes.last() else {
                    // Empty means "the parent's": an empty mask, as systemd reads it.
                    return Some(UnitValue::NodeMask(Vec::new()));
                };
                let mut mask = vec![0u8; last as usize / 8 + 1];
                for n in nodes {
                    mask[n as usize / 8] |= 1 << (n % 8);
                }
                Some(UnitValue::NodeMask(mask))
            }
            _ => match memory_value(property.file(), text).ok()? {
                MemoryValue::Bytes(b) => Some(UnitValue::Bytes(b)),
                MemoryValue::Max => Some(UnitValue::Bytes(u64::MAX)),
            },
        }
    }
}

/// The systemd unit a cgroup is, on a systemd-driver node: its last path component
/// when that names a slice or a scope (`kubepods.slice`, `cri-containerd-<id>.scope`).
pub fn unit_name(cgroup: &str) -> Option<&str> {
    let leaf = cgroup.rsplit('/').next()?;
    let stem = leaf
        .strip_suffix(".slice")
        .or_else(|| leaf.strip_suffix(".scope"))?;
    (!stem.is_empty()).then_some(leaf)
}

/// One unit's properties to set, for the cgroup it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitUpdate {
    /// The cgroup (relative to the cgroup root).
    pub cgroup: String,
    /// Its unit (`kubepods-burstable-pod<uid>.slice`, `cri-containerd-<id>.scope`).
    pub unit: String,
    /// The properties to set, by the value nodemem holds.
    pub properties: BTreeMap<UnitProperty, UnitValue>,
}

/// Per unit cgroup, the values nodemem holds there after a pass: what it wrote in this
/// pass (restores included), and for the files it owns and did not need to write, the
/// value it wants (the file already says so). Files whose write failed, vanished or was
/// held back are left out: the file does not hold nodemem's value, and systemd would
/// be told to write what the kernel refused.
pub fn held_values<'a>(
    desired: &[DesiredCgroup<'_>],
    owned: &Ownership,
    applied: impl IntoIterator<Item = &'a Write>,
    not_applied: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BTreeMap<String, BTreeMap<UnitProperty, UnitValue>> {
    let mut out: BTreeMap<String, BTreeMap<UnitProperty, UnitValue>> = BTreeMap::new();
    let mut put = |cgroup: &str, file: &str, text: &str| {
        if unit_name(cgroup).is_none() {
            return;
        }
        let Some(property) = UnitProperty::for_file(file) else {
            return;
        };
        if let Some(value) = UnitValue::parse(property, text) {
            out.entry(cgroup.to_string())
                .or_default()
                .insert(property, value);
        }
    };
    let skipped: BTreeSet<(&str, &str)> = not_applied.into_iter().collect();
    for d in desired {
        for (file, value) in d.managed() {
            if owned.owns(d.path, file) && !skipped.contains(&(d.path, file)) {
                put(d.path, file, &value.render());
            }
        }
    }
    for w in applied {
        put(&w.cgroup, &w.file, &w.new);
    }
    out
}

/// What each unit was last told, by this process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnitRecords {
    sent: BTreeMap<String, BTreeMap<UnitProperty, UnitValue>>,
}

impl UnitRecords {
    /// The properties whose held value differs from what the unit was last told.
    pub fn updates(
        &self,
        held: &BTreeMap<String, BTreeMap<UnitProperty, UnitValue>>,
    ) -> Vec<UnitUpdate> {
        let mut out = Vec::new();
        for (cgroup, values) in held {
            let Some(unit) = unit_name(cgroup) else {
                continue;
            };
            let sent = self.sent.get(cgroup);
            let properties: BTreeMap<UnitProperty, UnitValue> = values
                .iter()
                .filter(|(p, v)| sent.and_then(|s| s.get(p)) != Some(v))
                .map(|(p, v)| (*p, v.clone()))
                .collect();
            if !properties.is_empty() {
                out.push(UnitUpdate {
                    cgroup: cgroup.clone(),
                    unit: unit.to_string(),
                    properties,
                });
            }
        }
        out
    }

    /// The unit took the update.
    pub fn sent(&mut self, update: &UnitUpdate) {
        self.sent
            .entry(update.cgroup.clone())
            .or_default()
            .extend(update.properties.iter().map(|(p, v)| (*p, v.clone())));
    }

    /// A file nodemem had to write again was changed behind its back, perhaps through
    /// systemd (the kubelet and runc set these properties too, and a v1.37 kubelet
    /// resets memory.min/low that way): what the unit was told of it is forgotten, so
    /// the next [`UnitRecords::updates`] tells it again.
    pub fn rewritten(&mut self, cgroup: &str, file: &str) {
        let Some(property) = UnitProperty::for_file(file) else {
            return;
        };
        if let Some(sent) = self.sent.get_mut(cgroup) {
            sent.remove(&property);
        }
    }

    /// Forgets units outside `live` (their cgroup is gone: pod slices and container
    /// scopes are never reused, a new pod or container has a new name).
    pub fn retain(&mut self, live: &BTreeSet<String>) {
        self.sent.retain(|c, _| live.contains(c));
    }

    /// How many cgroups have properties sent.
    pub fn len(&self) -> usize {
        self.sent.len()
    }

    /// Whether none has.
    pub fn is_empty(&self) -> bool {
        self.sent.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::WriteKind;
    use nodemem_model::values::cgroup::{CgroupValue, CgroupValues};

    const POD: &str = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poda.slice";
    const SCOPE: &str = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poda.slice/cri-containerd-c1.scope";

    fn write(cgroup: &str, file: &str, new: &str, kind: WriteKind) -> Write {
        Write {
            cgroup: cgroup.into(),
            file: file.into(),
            old: None,
            new: new.into(),
            kind,
        }
    }

    #[test]
    fn slices_and_scopes_are_units_and_other_cgroups_are_not() {
        assert_eq!(unit_name("kubepods.slice"), Some("kubepods.slice"));
        assert_eq!(unit_name(SCOPE), Some("cri-containerd-c1.scope"));
        assert_eq!(unit_name("kubepods/burstable/poda"), None);
        assert_eq!(unit_name("kubepods/burstable/poda/0123abcd"), None);
        assert_eq!(unit_name("kubepods/.slice"), None);
        assert_eq!(unit_name("system.slice/x.service"), None);
        assert_eq!(unit_name(""), None);
    }

    #[test]
    fn files_map_to_properties_and_values_to_their_dbus_types() {
        for p in [
            UnitProperty::MemoryMin,
            UnitProperty::MemoryLow,
            UnitProperty::MemoryHigh,
            UnitProperty::AllowedMemoryNodes,
        ] {
            assert_eq!(UnitProperty::for_file(p.file()), Some(p));
        }
        assert_eq!(UnitProperty::for_file("memory.max"), None);
        assert_eq!(UnitProperty::for_file("cpu.weight"), None);
        let min = UnitProperty::MemoryMin;
        assert_eq!(
            UnitValue::parse(min, "134217728"),
            Some(UnitValue::Bytes(134217728))
        );
        assert_eq!(
            UnitValue::parse(UnitProperty::MemoryHigh, "max"),
            Some(UnitValue::Bytes(u64::MAX))
        );
        assert_eq!(UnitValue::parse(min, "-1"), None);
        assert_eq!(UnitValue::parse(min, "lots"), None);
        let nodes = UnitProperty::AllowedMemoryNodes;
        assert_eq!(
            UnitValue::parse(nodes, "0"),
            Some(UnitValue::NodeMask(vec![1]))
        );
        assert_eq!(
            UnitValue::parse(nodes, "0-1"),
            Some(UnitValue::NodeMask(vec![3]))
        );
        assert_eq!(
            UnitValue::parse(nodes, "1,9"),
            Some(UnitValue::NodeMask(vec![2, 2]))
        );
        assert_eq!(
            UnitValue::parse(nodes, ""),
            Some(UnitValue::NodeMask(vec![]))
        );
        assert_eq!(UnitValue::parse(nodes, "1-0"), None);
    }

    #[test]
    fn held_values_are_owned_desired_files_and_this_passes_writes_but_not_failed_ones() {
        let mut pod_values = CgroupValues::new();
        pod_values.insert(MEMORY_MIN, CgroupValue::Bytes(64 << 20));
        pod_values.insert(MEMORY_LOW, CgroupValue::Bytes(0));
        let mut scope_values = CgroupValues::new();
        scope_values.insert(MEMORY_HIGH, CgroupValue::Bytes(200 << 20));
        let mut cgroupfs_values = CgroupValues::new();
        cgroupfs_values.insert(MEMORY_MIN, CgroupValue::Bytes(1 << 20));
        let desired = [
            DesiredCgroup {
                path: POD,
                values: &pod_values,
            },
            DesiredCgroup {
                path: SCOPE,
                values: &scope_values,
            },
            DesiredCgroup {
                path: "kubepods/burstable/podb",
                values: &cgroupfs_values,
            },
        ];
        let mut owned = Ownership::default();
        for (c, f) in [
            (POD, MEMORY_MIN),
            (SCOPE, MEMORY_HIGH),
            ("kubepods/burstable/podb", MEMORY_MIN),
        ] {
            owned
                .files
                .entry(c.to_string())
                .or_default()
                .insert(f.to_string(), "0".into());
        }
        // This pass gave back the scope's memory.low and failed on the scope's
        // memory.high; the pod's memory.low is desired but not nodemem's.
        let restored = write(SCOPE, MEMORY_LOW, "0", WriteKind::Restore);
        let failed = write(SCOPE, MEMORY_HIGH, "209715200", WriteKind::Set);
        let held = held_values(
            &desired,
            &owned,
            [&restored],
            [(failed.cgroup.as_str(), failed.file.as_str())],
        );
        let want: BTreeMap<String, BTreeMap<UnitProperty, UnitValue>> = [
            (
                POD.to_string(),
                [(UnitProperty::MemoryMin, UnitValue::Bytes(64 << 20))].into(),
            ),
            (
                SCOPE.to_string(),
                [(UnitProperty::MemoryLow, UnitValue::Bytes(0))].into(),
            ),
        ]
        .into();
        assert_eq!(held, want);
    }

    #[test]
    fn a_unit_is_told_a_value_once_until_it_changes_or_its_file_is_rewritten_and_forgotten_when_gone(
    ) {
        let held = |min: u64| -> BTreeMap<String, BTreeMap<UnitProperty, UnitValue>> {
            [
                (
                    POD.to_string(),
                    [
                        (UnitProperty::MemoryMin, UnitValue::Bytes(min)),
                        (UnitProperty::MemoryLow, UnitValue::Bytes(0)),
                    ]
                    .into(),
                ),
                (
                    "kubepods/burstable/podb".to_string(),
                    [(UnitProperty::MemoryMin, UnitValue::Bytes(1))].into(),
                ),
            ]
            .into()
        };
        let mut records = UnitRecords::default();
        let first = records.updates(&held(10));
        assert_eq!(first.len(), 1, "a cgroupfs path is no unit: {first:?}");
        assert_eq!(first[0].unit, "kubepods-burstable-poda.slice");
        assert_eq!(first[0].properties.len(), 2);
        for u in &first {
            records.sent(u);
        }
        assert!(records.updates(&held(10)).is_empty());
        let changed = records.updates(&held(20));
        assert_eq!(
            changed[0].properties,
            [(UnitProperty::MemoryMin, UnitValue::Bytes(20))].into()
        );
        // Not sent (the call failed): asked again next pass.
        assert_eq!(records.updates(&held(20)), changed);
        // Sent, then its file found changed and written again: told again, that
        // property only.
        for u in &changed {
            records.sent(u);
        }
        assert!(records.updates(&held(20)).is_empty());
        records.rewritten(POD, "memory.min");
        records.rewritten(POD, "memory.max");
        records.rewritten("kubepods.slice", "memory.min");
        assert_eq!(records.updates(&held(20)), changed);
        records.retain(&BTreeSet::new());
        assert!(records.is_empty());
        assert_eq!(records.updates(&held(10)).len(), 1);
    }
}
