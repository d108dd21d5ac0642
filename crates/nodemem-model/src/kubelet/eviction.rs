//! The kubelet's `memory.available` hard eviction threshold, as its configuration
//! states it (`evictionHard`), and in bytes as the kubelet counts it.
//!
//! From `pkg/kubelet/eviction/helpers.go` (`parseThresholdStatement`,
//! `parsePercentage`) and `eviction/api/types.go` (`GetThresholdQuantity`): a
//! percentage is parsed as a float32 fraction, `0%` and `100%` mean no threshold, and
//! its bytes are `int64(float64(capacity) * float64(fraction))`; a quantity must be
//! positive. `status.allocatable` subtracts the bytes; the kubelet's memory.high ceiling
//! does not (`NodeMemoryFacts::kubelet_allocatable`).

use crate::quantity::Quantity;

/// A `memory.available` threshold as written.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MemoryEviction {
    /// No threshold: an `evictionHard` map without `memory.available`, or `0%` /
    /// `100%`, which the kubelet ignores.
    None,
    /// An amount of memory.
    Bytes(i64),
    /// A fraction of the node's memory capacity, as the kubelet's float32.
    Fraction(f32),
}

/// Why a `memory.available` eviction threshold cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvictionError {
    /// Neither a quantity nor a percentage.
    #[error("memory.available {0:?}: not a quantity or a percentage")]
    Unreadable(String),
    /// A percentage outside 0 % to 100 %.
    #[error("memory.available {0:?}: a percentage must be within 0% and 100%")]
    PercentOutOfRange(String),
    /// Zero or negative.
    #[error("memory.available {0:?}: the threshold must be positive")]
    NotPositive(String),
}

impl MemoryEviction {
    /// Reads a threshold as the kubelet does.
    pub fn parse(text: &str) -> Result<Self, EvictionError> {
        if let Some(number) = text.strip_suffix('%') {
            if text == "0%" || text == "100%" {
                return Ok(MemoryEviction::None);
            }
            // strconv.ParseFloat(s, 32): the float32 nearest the decimal.
            let percent: f32 = number
                .parse()
                .map_err(|_| EvictionError::Unreadable(text.to_string()))?;
            let fraction = percent / 100.0;
            if !(0.0..=1.0).contains(&fraction) {
                return Err(EvictionError::PercentOutOfRange(text.to_string()));
            }
            return Ok(MemoryEviction::Fraction(fraction));
        }
        let q = Quantity::parse(text).map_err(|_| EvictionError::Unreadable(text.to_string()))?;
        if q <= Quantity::ZERO {
            return Err(EvictionError::NotPositive(text.to_string()));
        }
        Ok(MemoryEviction::Bytes(q.value()))
    }

    /// The threshold in bytes on a node of `capacity` bytes; None for a fraction when
    /// the capacity is not known.
    pub fn bytes(&self, capacity: Option<i64>) -> Option<i64> {
        match *self {
            MemoryEviction::None => Some(0),
            MemoryEviction::Bytes(b) => Some(b),
            MemoryEviction::Fraction(f) => capacity.map(|c| (c as f64 * f as f64) as i64),
        }
    }

    /// The amount, when the threshold is one (the KEP-1769 sum rule needs a fixed
    /// amount; a fraction is left to the kubelet).
    pub fn quantity(&self) -> Option<Quantity> {
        match *self {
            MemoryEviction::None => Some(Quantity::ZERO),
            MemoryEviction::Bytes(b) => Some(Quantity::from_units(b)),
            MemoryEviction::Fraction(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: i64 = 1 << 30;

    #[test]
    fn quantities_and_percentages_read_as_the_kubelet_reads_them() {
        assert_eq!(
            MemoryEviction::parse("100Mi"),
            Ok(MemoryEviction::Bytes(100 << 20))
        );
        assert_eq!(MemoryEviction::parse("0%"), Ok(MemoryEviction::None));
        assert_eq!(MemoryEviction::parse("100%"), Ok(MemoryEviction::None));
        assert_eq!(
            MemoryEviction::parse("5%"),
            Ok(MemoryEviction::Fraction(0.05))
        );
        for (bad, reason) in [
            ("abc", "Unreadable"),
            ("5x%", "Unreadable"),
            ("101%", "PercentOutOfRange"),
            ("-1%", "PercentOutOfRange"),
            ("0", "NotPositive"),
            ("-1Mi", "NotPositive"),
        ] {
            let e = MemoryEviction::parse(bad).unwrap_err();
            assert!(format!("{e:?}").starts_with(reason), "{bad}: {e:?}");
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn a_percentage_is_resolved_against_capacity_with_the_kubelets_float32() {
        let five = MemoryEviction::parse("5%").unwrap();
        // float32(5)/100 is a little above 0.05: the kubelet's bytes are a little above
        // the exact 5 % (figures from the kubelet's own arithmetic, run in Go).
        assert_eq!(five.bytes(Some(8 * GI)), Some(429_496_736));
        assert_ne!(five.bytes(Some(8 * GI)), Some(8 * GI / 20));
        assert_eq!(five.bytes(None), None);
        assert_eq!(five.quantity(), None, "a fraction has no fixed amount");
        let ten = MemoryEviction::parse("10%").unwrap();
        assert_eq!(ten.bytes(Some(16 * GI)), Some(1_717_986_944));
        let odd = MemoryEviction::parse("7.5%").unwrap();
        assert_eq!(odd.bytes(Some(3 * GI)), Some(241_591_920));
        assert_eq!(MemoryEviction::None.bytes(None), Some(0));
        assert_eq!(
            MemoryEviction::parse("100Mi").unwrap().bytes(None),
            Some(100 << 20)
        );
    }
}
