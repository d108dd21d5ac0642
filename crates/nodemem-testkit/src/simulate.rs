//! Reading what `nodemem simulate -o json` predicts, to compare with what agents wrote.

use std::collections::BTreeMap;

use serde_json::Value;

/// Per (owner, file), the value `simulate -o json` predicts, as the cgroup file shows it.
/// Owners: `kubepods`, `burstable`, `besteffort`, `<namespace>/<pod>` and
/// `<namespace>/<pod>/<container>`.
pub fn predicted_values(sim: &Value) -> BTreeMap<(String, String), String> {
    let mut out = BTreeMap::new();
    let mut put = |owner: String, cgroup: &Value| {
        for (file, v) in cgroup.as_object().into_iter().flatten() {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            out.insert((owner.clone(), file.clone()), text);
        }
    };
    put("kubepods".into(), &sim["kubepods"]);
    put("burstable".into(), &sim["qos"]["burstable"]);
    put("besteffort".into(), &sim["qos"]["besteffort"]);
    for pod in sim["pods"].as_array().into_iter().flatten() {
        let owner = format!(
            "{}/{}",
            pod["namespace"].as_str().unwrap_or_default(),
            pod["name"].as_str().unwrap_or_default()
        );
        put(owner.clone(), &pod["cgroup"]);
        for c in pod["containers"].as_array().into_iter().flatten() {
            put(
                format!("{owner}/{}", c["name"].as_str().unwrap_or_default()),
                &c["cgroup"],
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_and_container_is_keyed_by_owner_and_file() {
        let sim = serde_json::json!({
            "kubepods": {"memory.min": 10},
            "qos": {"burstable": {"memory.low": 5}, "besteffort": {}},
            "pods": [{"namespace": "ns", "name": "p", "cgroup": {"memory.low": 5},
                      "containers": [{"name": "c", "cgroup": {"memory.high": "max"}}]}]
        });
        let v = predicted_values(&sim);
        let get = |o: &str, f: &str| v.get(&(o.to_string(), f.to_string())).cloned();
        assert_eq!(get("kubepods", "memory.min").as_deref(), Some("10"));
        assert_eq!(get("burstable", "memory.low").as_deref(), Some("5"));
        assert_eq!(get("ns/p", "memory.low").as_deref(), Some("5"));
        assert_eq!(get("ns/p/c", "memory.high").as_deref(), Some("max"));
        assert_eq!(v.len(), 4);
    }
}
