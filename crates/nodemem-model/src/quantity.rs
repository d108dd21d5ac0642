//! Kubernetes resource quantities, parsed exactly as `k8s.io/apimachinery/pkg/api/resource`
//! does: `<sign><digits>[.<digits>]<suffix>` where the suffix is a binary SI suffix
//! (`Ki`..`Ei`), a decimal SI suffix (`n u m "" k M G T P E`) or a decimal exponent
//! (`e3`, `E-2`).
//!
//! The value is kept as an exact integer count of nano-units (the smallest unit a
//! Kubernetes quantity can name), so `100m` CPU and `0.1` CPU compare equal and byte
//! math never goes through floating point. Like `Quantity.Value()`, converting to whole
//! units rounds up.

use std::cmp::Ordering;
use std::fmt;

const NANOS_PER_UNIT: i128 = 1_000_000_000;

/// An exact Kubernetes quantity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity {
    nanos: i128,
}

/// Why a quantity string was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// An empty string.
    #[error("quantity is empty")]
    Empty,
    /// Not a number with a suffix.
    #[error("invalid quantity {0:?}: expected a number with an optional suffix such as 512Mi, 1G, 100m or 1e3")]
    Syntax(String),
    /// A suffix Kubernetes does not know.
    #[error("invalid quantity {0:?}: unknown suffix {1:?} (use Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent)")]
    Suffix(String, String),
    /// More than an i64 of nano-units holds.
    #[error("quantity {0:?} is too large")]
    TooLarge(String),
}

impl Quantity {
    /// The zero quantity.
    pub const ZERO: Quantity = Quantity { nanos: 0 };

    /// A quantity of `value` whole units (bytes for memory).
    pub fn from_units(value: i64) -> Self {
        Quantity {
            nanos: value as i128 * NANOS_PER_UNIT,
        }
    }

    /// Parses a Kubernetes quantity string.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        parse(text)
    }

    /// Whole units, rounded up (`Quantity.Value()`): bytes for memory and hugepages.
    pub fn value(&self) -> i64 {
        div_ceil(self.nanos, NANOS_PER_UNIT) as i64
    }

    /// Thousandths of a unit, rounded up (`Quantity.MilliValue()`): millicores for CPU.
    pub fn milli_value(&self) -> i64 {
        div_ceil(self.nanos, 1_000_000) as i64
    }

    /// Whether it is zero.
    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// Whether it is below zero.
    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// The sum, None on overflow.
    pub fn checked_add(self, other: Quantity) -> Option<Quantity> {
        self.nanos
            .checked_add(other.nanos)
            .map(|nanos| Quantity { nanos })
    }

    /// Saturating sum; quantities are bounded by `i64::MAX` units, so sums of a few
    /// thousand of them cannot reach the `i128` bounds in practice.
    pub fn saturating_add(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(other.nanos),
        }
    }
}

impl fmt::Display for Quantity {
    /// Canonical short form: whole units when exact, otherwise milli- or nano-units.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos % NANOS_PER_UNIT == 0 {
            write!(f, "{}", self.nanos / NANOS_PER_UNIT)
        } else if self.nanos % 1_000_000 == 0 {
            write!(f, "{}m", self.nanos / 1_000_000)
        } else {
            write!(f, "{}n", self.nanos)
        }
    }
}

fn div_ceil(a: i128, b: i128) -> i128 {
    let q = a.div_euclid(b);
    if a.rem_euclid(b) == 0 {
        q
    } else {
        q + 1
    }
}

/// Decimal suffixes as powers of ten, binary suffixes as powers of two.
fn suffix_exponents(suffix: &str) -> Option<(i32, u32)> {
    Some(match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        _ => return None,
    })
}

fn parse(text: &str) -> Result<Quantity, QuantityError> {
    if text.is_empty() {
        return Err(QuantityError::Empty);
    }
    let syntax = || QuantityError::Syntax(text.to_string());
    let too_large = || QuantityError::TooLarge(text.to_string());
    let bytes = text.as_bytes();
    let mut pos = 0;
    let mut negative = false;
    if matches!(bytes[0], b'+' | b'-') {
        negative = bytes[0] == b'-';
        pos = 1;
    }
    let mut mantissa: i128 = 0;
    let mut digits = 0usize;
    let mut fraction_digits = 0i32;
    let mut seen_point = false;
    while pos < bytes.len() {
        match bytes[pos] {
            b'0'..=b'9' => {
                // Digits beyond what i128 can hold are only accepted when they are trailing
                // zeros of a fraction, which change nothing.
                let d = (bytes[pos] - b'0') as i128;
                match mantissa.checked_mul(10).and_then(|m| m.checked_add(d)) {
                    Some(m) => {
                        mantissa = m;
                        if seen_point {
                            fraction_digits += 1;
                        }
                    }
                    None if seen_point && d == 0 => {}
                    None => return Err(too_large()),
                }
                digits += 1;
            }
            b'.' if !seen_point => seen_point = true,
            _ => break,
        }
        pos += 1;
    }
    if digits == 0 {
        return Err(syntax());
    }
    let suffix = &text[pos..];
    let (mut exp10, exp2) = match suffix_exponents(suffix) {
        Some(e) => e,
        None => match suffix.strip_prefix(['e', 'E']) {
            Some(exp) if is_signed_integer(exp) => {
                let e: i32 = exp.parse().map_err(|_| too_large())?;
                (e, 0)
            }
            _ => {
                if suffix.starts_with(|c: char| c.is_ascii_alphabetic()) {
                    return Err(QuantityError::Suffix(text.to_string(), suffix.to_string()));
                }
                return Err(syntax());
            }
        },
    };
    // Scale to nano-units: value * 10^9.
    exp10 = exp10 - fraction_digits + 9;
    let mut numerator = mantissa.checked_mul(1i128 << exp2).ok_or_else(too_large)?;
    let nanos = if exp10 >= 0 {
        let scale = 10i128.checked_pow(exp10 as u32).ok_or_else(too_large)?;
        numerator = numerator.checked_mul(scale).ok_or_else(too_large)?;
        numerator
    } else {
        match 10i128.checked_pow((-exp10) as u32) {
            Some(scale) => div_ceil(numerator, scale),
            // Smaller than a nano-unit: rounds up to one nano-unit, as Kubernetes does.
            None => i128::from(numerator > 0),
        }
    };
    // Kubernetes keeps quantities within int64 units; anything larger is refused here
    // rather than silently saturating later.
    if div_ceil(nanos, NANOS_PER_UNIT) > i64::MAX as i128 {
        return Err(too_large());
    }
    Ok(Quantity {
        nanos: if negative { -nanos } else { nanos },
    })
}

fn is_signed_integer(s: &str) -> bool {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

impl PartialOrd<i64> for Quantity {
    fn partial_cmp(&self, other: &i64) -> Option<Ordering> {
        self.nanos.partial_cmp(&(*other as i128 * NANOS_PER_UNIT))
    }
}

impl PartialEq<i64> for Quantity {
    fn eq(&self, other: &i64) -> bool {
        self.nanos == *other as i128 * NANOS_PER_UNIT
    }
}

/// Formats a byte count for people: the largest binary unit that divides it exactly,
/// otherwise the largest unit it reaches with two decimals (`1.50Gi`).
pub fn format_bytes(bytes: i64) -> String {
    const UNITS: [(&str, i64); 6] = [
        ("Ei", 1 << 60),
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    if bytes == 0 {
        return "0".to_string();
    }
    for (name, size) in UNITS {
        if bytes % size == 0 {
            return format!("{}{}", bytes / size, name);
        }
    }
    for (name, size) in UNITS {
        if bytes.abs() >= size {
            return format!("{:.2}{}", bytes as f64 / size as f64, name);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(s: &str) -> i64 {
        Quantity::parse(s).unwrap().value()
    }

    #[test]
    fn binary_and_decimal_suffixes() {
        let cases = [
            ("0", 0),
            ("1", 1),
            ("1Ki", 1024),
            ("512Mi", 512 << 20),
            ("1Gi", 1 << 30),
            ("1.5Gi", 3 << 29),
            ("2Ti", 2 << 40),
            ("1Pi", 1 << 50),
            ("1Ei", 1 << 60),
            ("1k", 1000),
            ("1M", 1_000_000),
            ("1G", 1_000_000_000),
            ("1T", 1_000_000_000_000),
            ("1P", 1_000_000_000_000_000),
            ("1E", 1_000_000_000_000_000_000),
            ("1e3", 1000),
            ("1E3", 1000),
            ("1.5e3", 1500),
            ("12e+2", 1200),
            ("5.", 5),
            (".5Ki", 512),
            ("+7", 7),
            ("1000Mi", 1000 << 20),
        ];
        for (text, want) in cases {
            assert_eq!(bytes(text), want, "{text}");
        }
    }

    #[test]
    fn fractions_round_up_like_value() {
        // Quantity.Value() rounds up to the next whole unit.
        assert_eq!(bytes("100m"), 1);
        assert_eq!(bytes("1500m"), 2);
        assert_eq!(bytes("0.1"), 1);
        assert_eq!(bytes("1e-3"), 1);
        assert_eq!(bytes("1n"), 1);
        assert_eq!(bytes("1.0000001Ki"), 1025);
        assert_eq!(bytes("1e-40"), 1);
    }

    #[test]
    fn milli_values_compare_exactly() {
        let a = Quantity::parse("100m").unwrap();
        let b = Quantity::parse("0.1").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.milli_value(), 100);
        assert_eq!(Quantity::parse("1").unwrap().milli_value(), 1000);
        assert_eq!(
            Quantity::parse("1Gi").unwrap(),
            Quantity::parse("1073741824").unwrap()
        );
        assert_eq!(
            Quantity::parse("1G").unwrap(),
            Quantity::parse("1000M").unwrap()
        );
        assert!(Quantity::parse("1Gi").unwrap() > Quantity::parse("1G").unwrap());
    }

    #[test]
    fn negative_quantities_parse_and_are_flagged() {
        let q = Quantity::parse("-1Gi").unwrap();
        assert!(q.is_negative());
        assert_eq!(q.value(), -(1 << 30));
    }

    #[test]
    fn invalid_quantities_are_refused_with_a_reason() {
        assert_eq!(Quantity::parse(""), Err(QuantityError::Empty));
        for text in ["abc", "Mi", ".", "1..2", "1 Gi", "--1", "1e", "1e+", "0x10"] {
            assert!(Quantity::parse(text).is_err(), "{text} should be refused");
        }
        assert_eq!(
            Quantity::parse("12X"),
            Err(QuantityError::Suffix("12X".into(), "X".into()))
        );
        assert!(matches!(
            Quantity::parse("1gi"),
            Err(QuantityError::Suffix(..))
        ));
        assert!(matches!(
            Quantity::parse("10Ei"),
            Err(QuantityError::TooLarge(_))
        ));
        assert!(matches!(
            Quantity::parse("1e30"),
            Err(QuantityError::TooLarge(_))
        ));
        assert!(matches!(
            Quantity::parse("99999999999999999999999999999999999999999"),
            Err(QuantityError::TooLarge(_))
        ));
    }

    #[test]
    fn format_bytes_prefers_exact_binary_units() {
        assert_eq!(format_bytes(0), "0");
        assert_eq!(format_bytes(512 << 20), "512Mi");
        assert_eq!(format_bytes(3 << 29), "1536Mi");
        assert_eq!(format_bytes(1000), "1000");
        assert_eq!(format_bytes(943_718_400), "900Mi");
        assert_eq!(format_bytes((1 << 30) + 1), "1.00Gi");
    }

    proptest::proptest! {
        #[test]
        fn whole_byte_counts_round_trip(n in 0i64..i64::MAX / 2) {
            proptest::prop_assert_eq!(Quantity::parse(&n.to_string()).unwrap().value(), n);
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,24}") {
            let _ = Quantity::parse(&s);
        }
    }
}
