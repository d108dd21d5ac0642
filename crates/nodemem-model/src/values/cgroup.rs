//! Desired values of cgroup v2 interface files, keyed by file name.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Memory QoS's hard protection.
pub const MEMORY_MIN: &str = "memory.min";
/// Memory QoS's best-effort protection.
pub const MEMORY_LOW: &str = "memory.low";
/// The throttling limit the factor sets.
pub const MEMORY_HIGH: &str = "memory.high";
/// The hard limit, the runtime's (shown, never written by nodemem).
pub const MEMORY_MAX: &str = "memory.max";
/// The NUMA nodes a cgroup's memory may come from (Static Memory Manager).
pub const CPUSET_MEMS: &str = "cpuset.mems";

/// The value of one cgroup file: a byte count, the literal `max`, or free text such
/// as a `cpuset.mems` list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CgroupValue {
    /// A byte count.
    Bytes(i64),
    /// Text as the kernel takes it: `max`, a NUMA node list.
    Text(String),
}

impl CgroupValue {
    /// The literal `max`: no limit.
    pub fn max() -> Self {
        CgroupValue::Text("max".to_string())
    }

    /// The byte count, None for text.
    pub fn bytes(&self) -> Option<i64> {
        match self {
            CgroupValue::Bytes(b) => Some(*b),
            CgroupValue::Text(_) => None,
        }
    }

    /// The text the kernel accepts for this value.
    pub fn render(&self) -> String {
        match self {
            CgroupValue::Bytes(b) => b.to_string(),
            CgroupValue::Text(t) => t.clone(),
        }
    }
}

impl fmt::Display for CgroupValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

/// The files a [`CgroupValues`] can hold, in name order (the JSON order).
pub const FILES: [&str; 5] = [CPUSET_MEMS, MEMORY_HIGH, MEMORY_LOW, MEMORY_MAX, MEMORY_MIN];

/// Files nodemem sets on one cgroup, by file name; a file that is absent is left
/// alone. A fixed slot per known file instead of a map: a node has thousands of
/// cgroups and the node computation runs on every event, so values cost no allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupValues {
    slots: [Option<CgroupValue>; FILES.len()],
}

fn slot(file: &str) -> Option<usize> {
    FILES.iter().position(|f| *f == file)
}

impl CgroupValues {
    /// No value for any file.
    pub fn new() -> Self {
        CgroupValues::default()
    }

    /// Sets `file` (one of [`FILES`]); any other name is not a file nodemem manages
    /// and is ignored.
    pub fn insert(&mut self, file: &str, value: CgroupValue) -> Option<CgroupValue> {
        debug_assert!(slot(file).is_some(), "{file} is not a file nodemem sets");
        slot(file).and_then(|i| self.slots[i].replace(value))
    }

    /// The value of `file`, if set.
    pub fn get(&self, file: &str) -> Option<&CgroupValue> {
        slot(file).and_then(|i| self.slots[i].as_ref())
    }

    /// Unsets `file`, returning its value.
    pub fn remove(&mut self, file: &str) -> Option<CgroupValue> {
        slot(file).and_then(|i| self.slots[i].take())
    }

    /// Whether `file` has a value.
    pub fn contains_key(&self, file: &str) -> bool {
        self.get(file).is_some()
    }

    /// Files with a value, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &CgroupValue)> + '_ {
        FILES
            .iter()
            .zip(&self.slots)
            .filter_map(|(f, v)| v.as_ref().map(|v| (*f, v)))
    }

    /// The files with a value, in name order.
    pub fn keys(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.iter().map(|(f, _)| f)
    }

    /// How many files have a value.
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Whether no file has a value.
    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }
}

impl<'a> IntoIterator for &'a CgroupValues {
    type Item = (&'static str, &'a CgroupValue);
    type IntoIter = Box<dyn Iterator<Item = Self::Item> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl<'f> FromIterator<(&'f str, CgroupValue)> for CgroupValues {
    fn from_iter<I: IntoIterator<Item = (&'f str, CgroupValue)>>(iter: I) -> Self {
        let mut values = CgroupValues::new();
        for (f, v) in iter {
            values.insert(f, v);
        }
        values
    }
}

impl Serialize for CgroupValues {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.len()))?;
        for (f, v) in self.iter() {
            map.serialize_entry(f, v)?;
        }
        map.end()
    }
}

/// Sets `file` to `bytes`.
pub fn set_bytes(values: &mut CgroupValues, file: &'static str, bytes: i64) {
    values.insert(file, CgroupValue::Bytes(bytes));
}

/// What rolling back Memory QoS writes to a cgroup nodemem managed (KEP-2570:
/// memory.min and memory.low reset to 0, memory.high to max). memory.max belongs to
/// the runtime and is not touched.
pub fn memory_qos_reset() -> CgroupValues {
    let mut values = CgroupValues::new();
    set_bytes(&mut values, MEMORY_MIN, 0);
    set_bytes(&mut values, MEMORY_LOW, 0);
    values.insert(MEMORY_HIGH, CgroupValue::max());
    values
}
