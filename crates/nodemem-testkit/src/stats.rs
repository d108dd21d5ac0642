//! Figures of measured samples, as the benches and the real-node tier report them.

/// The `p` quantile (0..=1) of `sorted` (ascending, not empty), nearest rank.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> T {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_ranks() {
        let samples: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&samples, 0.0), 1);
        assert_eq!(percentile(&samples, 0.5), 51);
        assert_eq!(percentile(&samples, 0.99), 99);
        assert_eq!(percentile(&samples, 1.0), 100);
        assert_eq!(percentile(&[7], 0.99), 7);
    }
}
