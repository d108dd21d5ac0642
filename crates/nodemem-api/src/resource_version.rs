//! Which of two versions of one object is newer. Since Kubernetes v1.35 (KEP-5504,
//! comparable resource versions) the resourceVersions the apiserver gives objects of
//! one resource type are decimal integers without leading zeros that clients may
//! compare: a longer one is greater, one of the same length compares digit by digit.
//! A cache that applies both the responses to its own writes and what its watches
//! deliver needs this: a watch can still deliver an older version of an object the
//! cache already holds a newer one of, and must not take the cache back.

use std::cmp::Ordering;

/// How `a` compares with `b`; None when either is not a comparable resourceVersion
/// (another apiserver's form), and the caller cannot tell.
pub fn compare(a: &str, b: &str) -> Option<Ordering> {
    let comparable =
        |v: &str| !v.is_empty() && !v.starts_with('0') && v.bytes().all(|b| b.is_ascii_digit());
    if !comparable(a) || !comparable(b) {
        return None;
    }
    Some(a.len().cmp(&b.len()).then_with(|| a.cmp(b)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn longer_is_newer_then_digit_by_digit() {
        assert_eq!(compare("10", "9"), Some(Ordering::Greater));
        assert_eq!(compare("123", "124"), Some(Ordering::Less));
        assert_eq!(compare("77", "77"), Some(Ordering::Equal));
    }

    #[test]
    fn other_forms_cannot_be_compared() {
        for (a, b) in [
            ("", "1"),
            ("01", "1"),
            ("0", "1"),
            ("1a", "2"),
            ("5", "-1"),
            ("1", " 2"),
        ] {
            assert_eq!(compare(a, b), None, "{a:?} {b:?}");
            assert_eq!(compare(b, a), None, "{b:?} {a:?}");
        }
    }

    proptest! {
        /// The same order as the integers they print.
        #[test]
        fn orders_as_the_integers(a in 1u64.., b in 1u64..) {
            prop_assert_eq!(compare(&a.to_string(), &b.to_string()), Some(a.cmp(&b)));
        }
    }
}
