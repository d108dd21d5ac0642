//! An agent newer than the installed NodeMemoryConfig CRD (Helm never upgrades CRDs; an
//! upgrade that rolled the agents before `kubectl apply` of the release's CRDs): the
//! apiserver refuses a server-side apply that sets a status field the CRD does not
//! declare, and the whole status would be lost with it: the node would never report,
//! and its pool's rollout would wait for it. The refused fields are named in the
//! apiserver's message; the agent writes its status without them (and says so), as the
//! apiserver would have pruned them from an update.

use serde_json::Value;

/// The fields (paths of keys, such as `status.node.kubelet`) an apiserver's message
/// refuses as not declared in the CRD's schema. Paths with list selectors are not
/// taken (nothing is removed for them).
pub fn undeclared_fields(message: &str) -> Vec<Vec<String>> {
    const SAID: &str = ": field not declared in schema";
    let mut paths = Vec::new();
    let mut rest = message;
    while let Some(at) = rest.find(SAID) {
        let before = &rest[..at];
        let start = before
            .rfind(|c: char| c.is_whitespace())
            .map_or(0, |i| i + 1);
        let path = &before[start..];
        if let Some(path) = path.strip_prefix('.') {
            if !path.contains(['[', ']']) && !path.is_empty() {
                paths.push(path.split('.').map(str::to_string).collect());
            }
        }
        rest = &rest[at + SAID.len()..];
    }
    paths
}

/// Removes each path from `object`; true when one was there.
pub fn strip(object: &mut Value, paths: &[Vec<String>]) -> bool {
    let mut removed = false;
    for path in paths {
        let Some((last, parents)) = path.split_last() else {
            continue;
        };
        // A JSON pointer to the parent (RFC 6901 escapes).
        let pointer: String = parents
            .iter()
            .map(|k| format!("/{}", k.replace('~', "~0").replace('/', "~1")))
            .collect();
        let parent = object.pointer_mut(&pointer).and_then(Value::as_object_mut);
        removed |= parent.and_then(|o| o.remove(last)).is_some();
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The apiserver's words for an apply naming a field an older CRD lacks
    /// (structured-merge-diff's error through the apply handler), one or several.
    #[test]
    fn the_refused_fields_are_read_from_the_apiservers_message() {
        let one = "failed to create typed patch object (nodemem.io/v1alpha1, Kind=NodeMemoryConfig) /up-1: .status.node.kubelet: field not declared in schema";
        assert_eq!(
            undeclared_fields(one),
            [vec!["status".to_string(), "node".into(), "kubelet".into()]]
        );
        let two = "failed to create typed patch object (nodemem.io/v1alpha1, Kind=NodeMemoryConfig) /n: errors:\n  .status.relief: field not declared in schema\n  .status.node.kubelet: field not declared in schema";
        assert_eq!(undeclared_fields(two).len(), 2);
        assert!(undeclared_fields("the object has been modified").is_empty());
        assert!(undeclared_fields(
            ".status.conditions[type=\"X\"].y: field not declared in schema"
        )
        .is_empty());
    }

    #[test]
    fn stripping_removes_only_what_is_named() {
        let mut patch = json!({"status": {"node": {"kubelet": {"version": "v1.37.2"}, "pageSize": 4096}, "revision": "r"}});
        let paths = undeclared_fields(".status.node.kubelet: field not declared in schema");
        assert!(strip(&mut patch, &paths));
        assert_eq!(
            patch,
            json!({"status": {"node": {"pageSize": 4096}, "revision": "r"}})
        );
        assert!(!strip(&mut patch, &paths), "nothing left to remove");
        assert!(!strip(
            &mut patch,
            &[vec!["status".into(), "absent".into(), "x".into()]]
        ));
    }
}
