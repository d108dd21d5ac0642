//! A count of nodes or a percentage of a pool (`3` or `"25%"`), as in Deployment's
//! `maxUnavailable`.

use std::borrow::Cow;
use std::fmt;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// A count or a percentage, as the spec writes it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IntOrPercent {
    /// A number of nodes.
    Int(i64),
    /// A percentage of the pool, such as `"25%"`.
    Percent(String),
}

impl Default for IntOrPercent {
    fn default() -> Self {
        IntOrPercent::Int(1)
    }
}

impl fmt::Display for IntOrPercent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrPercent::Int(i) => write!(f, "{i}"),
            IntOrPercent::Percent(p) => f.write_str(p),
        }
    }
}

impl IntOrPercent {
    /// Resolves against a pool of `total` nodes, rounding percentages up, as
    /// Kubernetes does for maxUnavailable-style fields that must make progress.
    pub fn resolve(&self, total: u32) -> Result<u32, String> {
        match self {
            IntOrPercent::Int(i) if *i >= 0 => Ok((*i).min(u32::MAX as i64) as u32),
            IntOrPercent::Int(i) => Err(format!("must not be negative, found {i}")),
            IntOrPercent::Percent(p) => {
                let n: u64 = p
                    .strip_suffix('%')
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n <= 100)
                    .ok_or_else(|| {
                        format!("must be an integer or a percentage from 0% to 100%, found {p:?}")
                    })?;
                Ok(((total as u64 * n).div_ceil(100)) as u32)
            }
        }
    }
}

impl JsonSchema for IntOrPercent {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "IntOrPercent".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "x-kubernetes-int-or-string": true,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-validations": [{
                "rule": "type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",
                "message": "must be a non-negative integer or a percentage from 0% to 100%"
            }]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_counts_and_percentages() {
        assert_eq!(IntOrPercent::Int(2).resolve(10), Ok(2));
        assert_eq!(IntOrPercent::Percent("25%".into()).resolve(10), Ok(3));
        assert_eq!(IntOrPercent::Percent("0%".into()).resolve(10), Ok(0));
        assert_eq!(IntOrPercent::Percent("100%".into()).resolve(7), Ok(7));
        assert!(IntOrPercent::Percent("101%".into()).resolve(7).is_err());
        assert!(IntOrPercent::Percent("ten".into()).resolve(7).is_err());
        assert!(IntOrPercent::Int(-1).resolve(7).is_err());
    }
}
