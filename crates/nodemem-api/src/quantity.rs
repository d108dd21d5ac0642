//! A Kubernetes quantity field as users write it (`512Mi` or `536870912`), kept as
//! text and parsed by `nodemem_model::Quantity`.

use std::borrow::Cow;
use std::fmt;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A Kubernetes quantity: an optional sign, digits with an optional fraction, then a
/// binary (Ki..Ei) or decimal (m, k, M, G, ...) suffix or an exponent. The sign is
/// part of the syntax so that a negative quantity gets its own message ("must not be
/// negative", a rule of the schema) instead of the pattern.
pub const QUANTITY_PATTERN: &str = r"^[+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// A quantity as the spec writes it (`"512Mi"`), kept as text and parsed when read.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QuantityString(pub String);

impl QuantityString {
    /// A quantity from its text, unparsed.
    pub fn new(text: impl Into<String>) -> Self {
        QuantityString(text.into())
    }

    /// The quantity's value, or why its text is not one.
    pub fn parse(&self) -> Result<nodemem_model::Quantity, nodemem_model::quantity::QuantityError> {
        nodemem_model::Quantity::parse(&self.0)
    }
}

impl fmt::Display for QuantityString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for QuantityString {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for QuantityString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = QuantityString;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a quantity such as 512Mi or an integer number of bytes")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(QuantityString(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(QuantityString(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(QuantityString(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(QuantityString(v.to_string()))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl JsonSchema for QuantityString {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Quantity".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "x-kubernetes-int-or-string": true,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            // Bounds the CEL cost estimate (the apiserver rejects CRDs whose rules
            // could cost too much on unbounded strings); real quantities are short.
            "maxLength": 64,
            "x-kubernetes-validations": [{
                "rule": "type(self) == int ? self >= 0 : !self.startsWith('-')",
                "message": "must not be negative"
            }],
        })
    }
}
