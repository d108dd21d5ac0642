//! What nodemem reads of the kubelet, in the kubelet's own words: each field nodemem
//! uses, with its `KubeletConfiguration` name and shape, the defaults of the kubelet's
//! version filled in where its file, drop-ins and flags name nothing, as the kubelet's
//! `/configz` prints the configuration it runs. `nodemem agent --print-kubelet` prints
//! it, and the real node holds it against `/configz` for every layout the kubelet is
//! started with (issue 58): where the two differ, nodemem misreads the kubelet.
//! Quantities are whole bytes (the kubelet prints them as written: the tests compare
//! their values).

use nodemem_model::kubelet::defaults::KubeletDefaults;
use nodemem_model::kubelet::eviction::MemoryEviction;
use nodemem_model::kubelet::version::KubeletVersion;
use nodemem_model::kubelet::writes::Named;
use serde_json::{json, Map, Value};

use super::KubeletSettings;

impl KubeletSettings {
    /// The fields nodemem uses as a kubelet of `version` runs them. A field the kubelet
    /// leaves out of `/configz` when unset (`featureGates` not named, no
    /// `reservedMemory`, no reservations, no `memory.available` threshold, a
    /// throttling factor a v1.37 kubelet does not default) is left out here too.
    pub fn as_run(&self, version: KubeletVersion) -> Value {
        let defaults = KubeletDefaults::of(version);
        let mut out = Map::new();
        // /configz prints the gates as named: the default is not among them.
        if let Some(gate) = self.qos.gate {
            out.insert("featureGates".into(), json!({ "MemoryQoS": gate }));
        }
        // A null is removed by the merge patch and the field defaulted again.
        let factor = match self.qos.throttling_factor {
            Named::Value(f) => Some(f),
            Named::Null | Named::Absent => defaults.memory_throttling_factor,
        };
        if let Some(factor) = factor {
            out.insert("memoryThrottlingFactor".into(), json!(factor));
        }
        let policy = self.qos.reservation_policy.as_deref();
        if let Some(policy) = policy.or(defaults.memory_reservation_policy) {
            out.insert("memoryReservationPolicy".into(), json!(policy));
        }
        let manager = self.memory_manager_policy.as_deref();
        out.insert(
            "memoryManagerPolicy".into(),
            json!(manager.unwrap_or(defaults.memory_manager_policy)),
        );
        if let Some(reserved) = self.reserved_memory.as_ref().filter(|r| !is_empty(r)) {
            out.insert("reservedMemory".into(), reserved.clone());
        }
        let driver = self.cgroup_driver.as_deref();
        out.insert(
            "cgroupDriver".into(),
            json!(driver.unwrap_or(defaults.cgroup_driver)),
        );
        for (name, reserved) in [
            ("kubeReserved", &self.reserved.kube_reserved),
            ("systemReserved", &self.reserved.system_reserved),
        ] {
            if let Some(q) = reserved {
                out.insert(name.into(), json!({ "memory": q.to_string() }));
            }
        }
        let threshold = match self.memory_eviction {
            MemoryEviction::None => None,
            MemoryEviction::Bytes(b) => Some(b.to_string()),
            // The kubelet's float32, printed as the percentage it parsed.
            MemoryEviction::Fraction(f) => Some(format!("{}%", f * 100.0)),
        };
        if let Some(threshold) = threshold {
            out.insert(
                "evictionHard".into(),
                json!({ "memory.available": threshold }),
            );
        }
        Value::Object(out)
    }
}

/// An empty list or object, which the kubelet leaves out as unset.
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Null => true,
        _ => false,
    }
}
