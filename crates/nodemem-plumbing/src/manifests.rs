//! Reading Kubernetes manifests from YAML files: multi-document streams and `v1 List`s,
//! typed deserialization with the failing field's path, and detection of fields the
//! type does not know (which the apiserver would prune silently).

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use nodemem_api::convert::policy_settings;
use nodemem_api::NodeMemoryPolicy;

use crate::error::CliError;

/// One object from a file, with where it came from for error messages.
pub struct Document {
    /// `file.yaml` or `file.yaml[2]` for the third object of a stream or List.
    pub origin: String,
    pub value: Value,
}

impl Document {
    /// `kind namespace/name` or `kind name`, for messages.
    pub fn describe(&self) -> String {
        let kind = self
            .value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("object");
        let meta = self.value.get("metadata");
        let name = meta
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("<unnamed>");
        match meta
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str)
        {
            Some(ns) => format!("{kind} {ns}/{name}"),
            None => format!("{kind} {name}"),
        }
    }

    pub fn kind(&self) -> Option<&str> {
        self.value.get("kind").and_then(Value::as_str)
    }

    pub fn api_version(&self) -> Option<&str> {
        self.value.get("apiVersion").and_then(Value::as_str)
    }
}

/// Reads every object in a YAML file; `List` objects are flattened into their items.
pub fn read_documents(path: &Path) -> Result<Vec<Document>, CliError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::one(format!("{name}: cannot read: {e}")))?;
    parse_documents(&name, &text)
}

pub fn parse_documents(name: &str, text: &str) -> Result<Vec<Document>, CliError> {
    let mut values = Vec::new();
    for (i, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value: serde_yaml::Value = serde::Deserialize::deserialize(de)
            .map_err(|e| CliError::one(format!("{name}: document {}: invalid YAML: {e}", i + 1)))?;
        if value.is_null() {
            continue; // empty document, e.g. a trailing `---`
        }
        let json = serde_json::to_value(value).map_err(|e| {
            CliError::one(format!(
                "{name}: document {}: not representable as JSON: {e}",
                i + 1
            ))
        })?;
        if !json.is_object() {
            return Err(CliError::one(format!(
                "{name}: document {}: expected a Kubernetes object, found {}",
                i + 1,
                type_name(&json)
            )));
        }
        if json
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k == "List" || k.ends_with("List"))
        {
            let items = json
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            values.extend(items);
        } else {
            values.push(json);
        }
    }
    let many = values.len() > 1;
    Ok(values
        .into_iter()
        .enumerate()
        .map(|(i, value)| Document {
            origin: if many {
                format!("{name}[{i}]")
            } else {
                name.to_string()
            },
            value,
        })
        .collect())
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Deserializes a document into `T`; on failure names the field path. Fields `T` does
/// not know are reported too, since the apiserver would drop them without a word.
pub fn typed<T: DeserializeOwned + Serialize>(doc: &Document) -> Result<T, CliError> {
    let prefix = format!("{}: {}", doc.origin, doc.describe());
    let typed: T = deserialize_with_path(&prefix, doc.value.clone())?;
    let round_trip =
        serde_json::to_value(&typed).map_err(|e| CliError::one(format!("{prefix}: {e}")))?;
    let mut unknown = Vec::new();
    unknown_fields(&doc.value, &round_trip, "", &mut unknown);
    // status is written by controllers; tolerate what older or newer ones put there.
    unknown.retain(|p| !p.starts_with("status"));
    if unknown.is_empty() {
        Ok(typed)
    } else {
        Err(CliError::many(
            unknown
                .into_iter()
                .map(|p| format!("{prefix}: {p}: unknown field"))
                .collect(),
        ))
    }
}

/// Deserializes `value`, naming the failing field's path after `prefix` on error.
pub fn deserialize_with_path<T: DeserializeOwned>(
    prefix: &str,
    value: Value,
) -> Result<T, CliError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if path == "." {
            CliError::one(format!("{prefix}: {inner}"))
        } else {
            CliError::one(format!("{prefix}: {path}: {inner}"))
        }
    })
}

/// Paths present in `input` but absent from `known` (the typed value serialized back).
fn unknown_fields(input: &Value, known: &Value, path: &str, out: &mut Vec<String>) {
    match (input, known) {
        (Value::Object(i), Value::Object(k)) => {
            for (key, value) in i {
                let p = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match k.get(key) {
                    Some(kv) => unknown_fields(value, kv, &p, out),
                    None if value.is_null() => {}
                    None => out.push(p),
                }
            }
        }
        (Value::Array(i), Value::Array(k)) => {
            for (idx, (iv, kv)) in i.iter().zip(k.iter()).enumerate() {
                unknown_fields(iv, kv, &format!("{path}[{idx}]"), out);
            }
        }
        _ => {}
    }
}

#[derive(serde::Deserialize)]
struct SettingsOnly {
    #[serde(rename = "spec")]
    _spec: Option<nodemem_api::NodeSettings>,
}

/// Checks the node settings of a NodeMemoryPolicy or NodeMemoryConfig on their own:
/// serde's `flatten` (which both specs use for them) hides where a value is wrong, so
/// this runs first to keep the field path in the message.
pub fn check_settings(doc: &Document) -> Result<(), CliError> {
    deserialize_with_path::<SettingsOnly>(
        &format!("{}: {}", doc.origin, doc.describe()),
        doc.value.clone(),
    )
    .map(drop)
}

/// A document of kind `kind` as `T`; None (with the problems recorded) when it is of
/// another kind or does not deserialize.
pub fn typed_kind<T: DeserializeOwned + Serialize>(
    doc: &Document,
    kind: &str,
    problems: &mut Vec<String>,
) -> Option<T> {
    if doc.kind() != Some(kind) {
        problems.push(format!(
            "{}: expected kind {kind}, found {}",
            doc.origin,
            doc.kind().unwrap_or("none")
        ));
        return None;
    }
    typed(doc).map_err(|e| problems.extend(e.problems)).ok()
}

/// The pods of a file with what its Namespace documents choose for them (a class by
/// label `nodemem.io/class`, the opt-out), as the agent reads them from its namespace
/// watch: each Pod converted for the node computation, every other kind a problem.
pub fn read_node_pods<'d>(
    docs: &'d [Document],
    problems: &mut Vec<String>,
) -> Vec<(
    &'d Document,
    k8s_openapi::api::core::v1::Pod,
    nodemem_api::k8s::NamespaceChoice,
)> {
    use k8s_openapi::api::core::v1 as core;
    use nodemem_api::k8s::NamespaceChoice;
    let mut namespaces = std::collections::BTreeMap::new();
    for doc in docs.iter().filter(|d| d.kind() == Some("Namespace")) {
        if let Some(ns) = typed_kind::<core::Namespace>(doc, "Namespace", problems) {
            let name = ns.metadata.name.clone().unwrap_or_default();
            namespaces.insert(name, NamespaceChoice::of(ns.metadata.labels.as_ref()));
        }
    }
    let mut out = Vec::new();
    for doc in docs.iter().filter(|d| d.kind() != Some("Namespace")) {
        let Some(pod) = typed_kind::<core::Pod>(doc, "Pod", problems) else {
            continue;
        };
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let choice = namespaces.get(namespace).cloned().unwrap_or_default();
        out.push((doc, pod, choice));
    }
    out
}

/// The policies of a file, each checked as `simulate` checks them (unknown fields,
/// apiVersion and kind, settings); problems are collected.
pub fn read_policies(
    docs: &[Document],
    problems: &mut Vec<String>,
) -> Vec<(NodeMemoryPolicy, nodemem_model::settings::NodeSettings)> {
    if docs.is_empty() {
        problems.push("--policy: the file holds no NodeMemoryPolicy".to_string());
    }
    let mut out = Vec::new();
    for doc in docs {
        if doc.kind() != Some("NodeMemoryPolicy")
            || doc.api_version() != Some("nodemem.io/v1alpha1")
        {
            problems.push(format!(
                "{}: {}: expected apiVersion nodemem.io/v1alpha1 and kind NodeMemoryPolicy",
                doc.origin,
                doc.describe()
            ));
            continue;
        }
        if let Err(e) = check_settings(doc) {
            problems.extend(e.problems);
            continue;
        }
        let policy: NodeMemoryPolicy = match typed(doc) {
            Ok(p) => p,
            Err(e) => {
                problems.extend(e.problems);
                continue;
            }
        };
        if policy.metadata.name.as_deref().unwrap_or("").is_empty() {
            problems.push(format!("{}: metadata.name: must be set", doc.origin));
        }
        match policy_settings(&policy.spec) {
            Ok(settings) => out.push((policy, settings)),
            Err(ps) => problems.extend(
                ps.into_iter()
                    .map(|p| format!("{}: {}: {p}", doc.origin, doc.describe())),
            ),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_lists_and_empty_documents() {
        let text = "---\nkind: Pod\nmetadata: {name: a}\n---\n---\nkind: List\nitems:\n- kind: Pod\n  metadata: {name: b}\n- kind: Pod\n  metadata: {name: c, namespace: x}\n";
        let docs = parse_documents("pods.yaml", text).unwrap();
        let names: Vec<_> = docs.iter().map(|d| d.describe()).collect();
        assert_eq!(names, ["Pod a", "Pod b", "Pod x/c"]);
        assert_eq!(docs[2].origin, "pods.yaml[2]");
    }

    #[test]
    fn bad_yaml_and_scalars_are_reported() {
        let err = parse_documents("f.yaml", "kind: [unclosed").err().unwrap();
        assert!(
            err.problems[0].starts_with("f.yaml: document 1: invalid YAML"),
            "{err}"
        );
        let err = parse_documents("f.yaml", "just a string").err().unwrap();
        assert!(
            err.problems[0].contains("expected a Kubernetes object"),
            "{err}"
        );
    }

    #[test]
    fn unknown_fields_are_named() {
        let input = serde_json::json!({"a": 1, "b": {"c": 2, "typo": 3}, "l": [{"x": 1, "y": 2}], "n": null});
        let known = serde_json::json!({"a": 1, "b": {"c": 2}, "l": [{"x": 1}]});
        let mut out = Vec::new();
        unknown_fields(&input, &known, "", &mut out);
        assert_eq!(out, ["b.typo", "l[0].y"]);
    }
}
