//! Desired values of cgroup v2 interface files, keyed by file name.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

pub const MEMORY_MIN: &str = "memory.min";
pub const MEMORY_LOW: &str = "memory.low";
pub const MEMORY_HIGH: &str = "memory.high";
pub const MEMORY_MAX: &str = "memory.max";
pub const CPUSET_MEMS: &str = "cpuset.mems";

/// The value of one cgroup file: a byte count, the literal `max`, or free text such
/// as a `cpuset.mems` list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CgroupValue {
    Bytes(i64),
    Text(String),
}

impl CgroupValue {
    pub fn max() -> Self {
        CgroupValue::Text("max".to_string())
    }

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

/// Files nodemem sets on one cgroup; a file that is absent is left alone.
pub type CgroupValues = BTreeMap<String, CgroupValue>;

pub fn set_bytes(values: &mut CgroupValues, file: &str, bytes: i64) {
    values.insert(file.to_string(), CgroupValue::Bytes(bytes));
}

/// What rolling back Memory QoS writes to a cgroup nodemem managed (KEP-2570:
/// memory.min and memory.low reset to 0, memory.high to max). memory.max belongs to
/// the runtime and is not touched.
pub fn memory_qos_reset() -> CgroupValues {
    let mut values = CgroupValues::new();
    set_bytes(&mut values, MEMORY_MIN, 0);
    set_bytes(&mut values, MEMORY_LOW, 0);
    values.insert(MEMORY_HIGH.to_string(), CgroupValue::max());
    values
}
