//! The memory throttling factor, and memory.high computed as the kubelet computes it.
//!
//! The factor is kept as the decimal the user wrote (the shortest decimal that
//! round-trips the float, e.g. `0.9`): that is what nodemem prints, writes into a
//! kubelet drop-in and compares. memory.high, though, is the kubelet's float64
//! expression, operation for operation (`memory_high`): the KEP's formula in exact
//! arithmetic lands one page higher than the kubelet wherever float64 rounding takes
//! the product just under a page boundary (about 0.4 % of Mi-aligned request/limit
//! pairs at factor 0.7), and the kubelet's code wins over the KEP's prose. Exact
//! integers remain for [`ThrottlingFactor::apply_floor`].

use std::fmt;

/// Largest number of decimal places accepted; more would not fit the integer math.
pub const MAX_DECIMALS: u32 = 12;

/// The throttling factor of Memory QoS (KEP-2570, the kubelet's
/// `memoryThrottlingFactor`): memory.high sits at this fraction of the way from a
/// container's request to its limit (or to node allocatable). Kept as an exact decimal
/// (a numerator over a power of ten) so that the policy's `0.9` is 0.9 in every
/// computation; the kubelet's float64 arithmetic is reproduced where it writes the
/// value (`values::memory_qos`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ThrottlingFactor {
    /// factor = numerator / 10^scale
    numerator: u64,
    scale: u32,
}

/// Why a throttling factor was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FactorError {
    /// Not in (0, 1].
    #[error("must be greater than 0 and less than or equal to 1, found {0}")]
    OutOfRange(String),
    /// More decimal places than the exact arithmetic holds.
    #[error("must have at most {MAX_DECIMALS} decimal places, found {0}")]
    TooPrecise(String),
}

impl ThrottlingFactor {
    /// The kubelet's default factor, 0.9.
    pub const DEFAULT: ThrottlingFactor = ThrottlingFactor {
        numerator: 9,
        scale: 1,
    };

    /// The factor a policy's `memoryQoS` sets, from its two fields at once, so that the
    /// API's conversion hands both over and reads neither back: `value`
    /// (`throttlingFactor`) is checked whatever `throttle` says, and kept only when
    /// `throttle` (`memoryHigh: Throttle`); otherwise memory.high is not set.
    pub fn for_memory_high(value: f64, throttle: bool) -> Result<Option<Self>, FactorError> {
        let factor = ThrottlingFactor::from_f64(value)?;
        Ok(throttle.then_some(factor))
    }

    /// Accepts a factor in (0, 1].
    pub fn from_f64(value: f64) -> Result<Self, FactorError> {
        if !(value > 0.0 && value <= 1.0) {
            return Err(FactorError::OutOfRange(value.to_string()));
        }
        // Rust prints the shortest decimal that round-trips, never in exponent form.
        let text = value.to_string();
        let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
        if fraction.len() as u32 > MAX_DECIMALS {
            return Err(FactorError::TooPrecise(text));
        }
        let digits = format!("{whole}{fraction}");
        let numerator: u64 = digits
            .parse()
            .map_err(|_| FactorError::OutOfRange(text.clone()))?;
        Ok(ThrottlingFactor {
            numerator,
            scale: fraction.len() as u32,
        })
    }

    /// The factor as a float, as the kubelet's configuration holds it.
    pub fn as_f64(&self) -> f64 {
        self.numerator as f64 / 10f64.powi(self.scale as i32)
    }

    /// floor(amount * factor) computed exactly; `amount` may be negative.
    pub fn apply_floor(&self, amount: i128) -> i128 {
        (amount * self.numerator as i128).div_euclid(10i128.pow(self.scale))
    }

    fn denominator(&self) -> i128 {
        10i128.pow(self.scale)
    }

    /// memory.high for `request` under `ceiling` (a limit, or node allocatable) as the
    /// kubelet computes it, in float64, for every branch and every version from v1.27
    /// to v1.37 (the same expression in each):
    ///
    /// ```go
    /// int64(math.Floor(float64(request)+(float64(ceiling)-float64(request))*factor)/float64(pageSize)) * pageSize
    /// ```
    ///
    /// v1.37.2 `pkg/kubelet/kuberuntime/kuberuntime_container_linux.go` lines 244-246
    /// (a container's limit) and 251-253 (node allocatable), `pkg/kubelet/cm/helpers_linux.go`
    /// lines 85-87 (`memoryHighForPod`, pod-level resources); v1.36.3 lines 181-183 and
    /// 188-190 of the first. The floor is taken of the bytes, then the quotient by the
    /// page size is truncated by `int64()`; `float` says whether the node's kubelet
    /// rounds the product before the sum (see [`KubeletFloat`]).
    pub fn memory_high(
        &self,
        request: i64,
        ceiling: i64,
        page_size: i64,
        float: KubeletFloat,
    ) -> i64 {
        let (request_f, ceiling_f, factor) = (request as f64, ceiling as f64, self.as_f64());
        let bytes = match float {
            KubeletFloat::Separate => request_f + (ceiling_f - request_f) * factor,
            KubeletFloat::Fused => (ceiling_f - request_f).mul_add(factor, request_f),
        };
        // Go's int64() of a float truncates toward zero, as Rust's `as` does (both
        // saturate only far outside any memory size).
        ((bytes.floor() / page_size as f64) as i64) * page_size
    }

    /// memory.high in exact arithmetic, the KEP's formula taken literally:
    /// `floor((request + factor * (ceiling - request)) / pageSize) * pageSize`. Not what
    /// any kubelet writes (see [`ThrottlingFactor::memory_high`]); kept to show where the
    /// two part.
    pub fn exact_memory_high(&self, request: i64, ceiling: i64, page_size: i64) -> i64 {
        let den = self.denominator();
        let scaled =
            request as i128 * den + (ceiling as i128 - request as i128) * self.numerator as i128;
        let pages = scaled.div_euclid(den * page_size as i128);
        (pages * page_size as i128) as i64
    }
}

/// How the node's kubelet rounds `request + (ceiling - request) * factor`. Go compiles
/// `a + x*y` into one fused multiply-add (a single rounding) where the architecture has
/// one and the compiler may use it: arm64, ppc64le, ppc64, s390x, riscv64 and loong64
/// always (the `useFMA` rules of `cmd/compile/internal/ssa/_gen/*.rules`); amd64 only
/// for GOAMD64=v3 and later, which Kubernetes' release builds (v1) are not. So an arm64
/// node's kubelet can write another page than an amd64 node's for the same inputs; in
/// searches of hundreds of millions of cases that happened only where the request
/// exceeds the ceiling, which no valid pod has (`make kubelet-float` runs such cases
/// through Go's own arm64 code).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KubeletFloat {
    /// The product rounded, then the sum (amd64, and any architecture not known).
    #[default]
    Separate,
    /// One rounding for both (a fused multiply-add).
    Fused,
}

impl KubeletFloat {
    /// By the node's `status.nodeInfo.architecture` (Go's GOARCH); an architecture not
    /// named (or none reported) is taken to round separately, as amd64 does.
    pub fn of_architecture(architecture: Option<&str>) -> Self {
        match architecture {
            Some("arm64" | "ppc64le" | "ppc64" | "s390x" | "riscv64" | "loong64") => {
                KubeletFloat::Fused
            }
            _ => KubeletFloat::Separate,
        }
    }
}

impl Default for ThrottlingFactor {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for ThrottlingFactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.as_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// memoryHigh: Throttle keeps the factor, None drops it; a bad factor is refused
    /// under both (the policy's field is wrong whichever memoryHigh says).
    #[test]
    fn the_factor_for_memory_high_is_checked_whatever_memory_high_says() {
        let half = ThrottlingFactor::from_f64(0.5).unwrap();
        assert_eq!(ThrottlingFactor::for_memory_high(0.5, true), Ok(Some(half)));
        assert_eq!(ThrottlingFactor::for_memory_high(0.5, false), Ok(None));
        for throttle in [true, false] {
            assert_eq!(
                ThrottlingFactor::for_memory_high(1.5, throttle),
                Err(FactorError::OutOfRange("1.5".into()))
            );
        }
    }

    #[test]
    fn accepts_the_valid_range_only() {
        for bad in [0.0, -0.1, 1.5, 1.0000001, f64::NAN, f64::INFINITY] {
            assert!(ThrottlingFactor::from_f64(bad).is_err(), "{bad}");
        }
        for good in [1.0, 0.9, 0.6, 0.01, 0.123456789012] {
            let f = ThrottlingFactor::from_f64(good).unwrap();
            assert_eq!(f.as_f64(), good);
        }
        assert!(matches!(
            ThrottlingFactor::from_f64(0.1234567890123),
            Err(FactorError::TooPrecise(_))
        ));
    }

    #[test]
    fn exact_decimal_math() {
        let f = ThrottlingFactor::from_f64(0.9).unwrap();
        assert_eq!(f, ThrottlingFactor::DEFAULT);
        let mi = 1 << 20;
        assert_eq!(f.exact_memory_high(0, 1000 * mi, mi), 900 * mi);
        assert_eq!(f.apply_floor(10), 9);
        assert_eq!(f.apply_floor(-10), -9);
        assert_eq!(f.apply_floor(-11), -10);
    }

    const MI: i64 = 1 << 20;

    #[test]
    fn the_kubelets_float64_lands_a_page_under_the_exact_formula() {
        // The issue's case: factor 0.7, request 64Mi, limit 1349Mi. Exactly
        // 64Mi + 0.7 * 1285Mi = 1010302976.0 bytes, on a page boundary; float64 gets
        // 1010302975.99..., one page less.
        let f = ThrottlingFactor::from_f64(0.7).unwrap();
        let separate = f.memory_high(64 * MI, 1349 * MI, 4096, KubeletFloat::Separate);
        assert_eq!(separate, 1_010_298_880);
        assert_eq!(f.exact_memory_high(64 * MI, 1349 * MI, 4096), 1_010_302_976);
        // Where both agree (the KEP's examples).
        let f9 = ThrottlingFactor::DEFAULT;
        for float in [KubeletFloat::Separate, KubeletFloat::Fused] {
            assert_eq!(f9.memory_high(0, 1000 * MI, MI, float), 900 * MI);
            assert_eq!(
                f9.memory_high(128 * MI, 256 * MI, 4096, float),
                f9.exact_memory_high(128 * MI, 256 * MI, 4096)
            );
        }
    }

    #[test]
    fn the_architecture_says_whether_go_fused_the_multiply_add() {
        for arch in ["arm64", "ppc64le", "s390x", "riscv64", "loong64"] {
            assert_eq!(
                KubeletFloat::of_architecture(Some(arch)),
                KubeletFloat::Fused
            );
        }
        for arch in [Some("amd64"), Some("386"), Some(""), None] {
            assert_eq!(KubeletFloat::of_architecture(arch), KubeletFloat::Separate);
        }
        // Where one rounding and two part: only, among hundreds of millions of random
        // cases, where the request exceeds the ceiling (no valid pod has a request
        // above its limit), e.g. this one, found by such a search.
        let f = ThrottlingFactor::from_f64(0.8).unwrap();
        assert_eq!(
            f.memory_high(592_168, 118_198, 4096, KubeletFloat::Separate),
            212_992
        );
        assert_eq!(
            f.memory_high(592_168, 118_198, 4096, KubeletFloat::Fused),
            208_896
        );
    }
}
