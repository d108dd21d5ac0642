//! What a container's memory did against the memory.high nodemem would set (issue 19,
//! pure). The agent samples each managed container's working set (memory.current
//! minus inactive file pages) and, where the kernel has it, memory.peak; this keeps,
//! per container, the highest working set seen and how long and how far it stood
//! above the memory.high of the settings (the one written under `enforcement: Agent`,
//! the one that would be under `Observe`). Time is in seconds from any fixed origin.

/// One container's observation since `since`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContainerObservation {
    /// When the first sample was taken.
    pub since: u64,
    /// When the last sample was taken.
    pub last: u64,
    /// The highest working set seen in the samples.
    pub peak_working_set: i64,
    /// The kernel's memory.peak (5.19+), the highest memory.current since the cgroup
    /// was created: it sees between samples, but it counts page cache too, so it is
    /// reported beside the working set and never taken for it.
    pub kernel_peak: Option<i64>,
    /// memory.high events (memory.events `high`) since the first sample: under
    /// enforcement the kernel says when it throttled.
    pub throttle_events: u64,
    /// memory.events `high` at the first sample.
    events_start: Option<u64>,
    /// Seconds the working set stood above memory.high, counted between samples that
    /// both saw it above.
    pub seconds_above_high: u64,
    /// The most the working set stood above memory.high, bytes.
    pub max_excess: i64,
    /// Whether the last sample saw it above.
    above: bool,
    /// Samples taken.
    pub samples: u64,
}

/// One sample of a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Seconds since the epoch.
    pub at: u64,
    /// memory.current less the inactive page cache, bytes.
    pub working_set: i64,
    /// The kernel's memory.peak (5.19+), if read.
    pub peak: Option<i64>,
    /// memory.events `high` (cumulative), if read.
    pub high_events: Option<u64>,
    /// The memory.high of the settings for this container; None when they set none.
    pub memory_high: Option<i64>,
}

impl ContainerObservation {
    /// Adds a sample to the container's figures.
    pub fn record(&mut self, s: Sample) {
        if self.samples == 0 {
            self.since = s.at;
        }
        self.peak_working_set = self.peak_working_set.max(s.working_set);
        if let Some(peak) = s.peak {
            self.kernel_peak = Some(self.kernel_peak.unwrap_or(0).max(peak));
        }
        if let Some(events) = s.high_events {
            let start = *self.events_start.get_or_insert(events);
            self.throttle_events = events.saturating_sub(start);
        }
        let excess = s.memory_high.map_or(0, |high| s.working_set - high);
        let above = excess > 0;
        if above {
            self.max_excess = self.max_excess.max(excess);
            if self.above {
                self.seconds_above_high += s.at.saturating_sub(self.last);
            }
        }
        self.above = above;
        self.last = s.at;
        self.samples += 1;
    }

    /// Whether the settings' memory.high throttled it (or would have): its working
    /// set stood above it at some sample, or the kernel counted memory.high events.
    pub fn would_throttle(&self) -> bool {
        self.max_excess > 0 || self.throttle_events > 0
    }

    /// Seconds observed.
    pub fn observed_seconds(&self) -> u64 {
        self.last.saturating_sub(self.since)
    }
}

/// The containers that stood above memory.high, worst first (the longest above, then
/// the furthest, then the most memory.high events), at most `n`: for status, where
/// space is short.
pub fn worst<'a, K: Ord + Clone + 'a>(
    observations: impl IntoIterator<Item = (&'a K, &'a ContainerObservation)>,
    n: usize,
) -> Vec<(K, ContainerObservation)> {
    let mut throttled: Vec<(K, ContainerObservation)> = observations
        .into_iter()
        .filter(|(_, o)| o.would_throttle())
        .map(|(k, o)| (k.clone(), *o))
        .collect();
    throttled.sort_by(|(ka, a), (kb, b)| {
        (b.seconds_above_high, b.max_excess, b.throttle_events)
            .cmp(&(a.seconds_above_high, a.max_excess, a.throttle_events))
            .then(ka.cmp(kb))
    });
    throttled.truncate(n);
    throttled
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const MI: i64 = 1 << 20;

    fn sample(at: u64, ws_mi: i64, high_mi: Option<i64>) -> Sample {
        Sample {
            at,
            working_set: ws_mi * MI,
            peak: None,
            high_events: None,
            memory_high: high_mi.map(|h| h * MI),
        }
    }

    #[test]
    fn time_above_counts_between_samples_that_both_saw_it_above() {
        let mut o = ContainerObservation::default();
        for s in [
            sample(100, 50, Some(80)),
            sample(110, 90, Some(80)), // above from here
            sample(120, 95, Some(80)), // +10 s
            sample(130, 70, Some(80)), // back under: the 10 s before are not counted
            sample(140, 85, Some(80)),
        ] {
            o.record(s);
        }
        assert_eq!(o.since, 100);
        assert_eq!(o.observed_seconds(), 40);
        assert_eq!(o.seconds_above_high, 10);
        assert_eq!(o.max_excess, 15 * MI);
        assert_eq!(o.peak_working_set, 95 * MI);
        assert!(o.would_throttle());
        assert_eq!(o.samples, 5);
    }

    #[test]
    fn the_kernels_peak_is_kept_apart_and_no_memory_high_throttles_nothing() {
        let mut o = ContainerObservation::default();
        o.record(Sample {
            at: 1,
            working_set: 40 * MI,
            peak: Some(120 * MI),
            high_events: None,
            memory_high: None,
        });
        // memory.peak counts page cache: it is no working set.
        assert_eq!(o.peak_working_set, 40 * MI);
        assert_eq!(o.kernel_peak, Some(120 * MI));
        o.record(sample(2, 500, None));
        assert_eq!(o.peak_working_set, 500 * MI);
        assert_eq!(o.kernel_peak, Some(120 * MI));
        assert!(
            !o.would_throttle(),
            "no memory.high: nothing to stand above"
        );
        assert_eq!(o.seconds_above_high, 0);
    }

    #[test]
    fn memory_high_events_count_from_the_first_sample() {
        let mut o = ContainerObservation::default();
        let at = |t: u64, events: u64| Sample {
            at: t,
            working_set: 70 * MI,
            peak: None,
            high_events: Some(events),
            memory_high: Some(80 * MI),
        };
        o.record(at(0, 12));
        o.record(at(10, 12));
        assert!(
            !o.would_throttle(),
            "events before observation do not count"
        );
        o.record(at(20, 15));
        assert_eq!(o.throttle_events, 3);
        assert!(
            o.would_throttle(),
            "throttled below the line between samples"
        );
        assert_eq!(o.max_excess, 0);
    }

    #[test]
    fn the_worst_are_the_longest_above_then_the_furthest() {
        let mut all: BTreeMap<&str, ContainerObservation> = BTreeMap::new();
        for (name, samples) in [
            (
                "calm",
                vec![sample(0, 10, Some(80)), sample(10, 20, Some(80))],
            ),
            (
                "brief-far",
                vec![sample(0, 200, Some(80)), sample(10, 10, Some(80))],
            ),
            (
                "long",
                vec![sample(0, 90, Some(80)), sample(30, 90, Some(80))],
            ),
            (
                "long-far",
                vec![sample(0, 150, Some(80)), sample(30, 150, Some(80))],
            ),
        ] {
            let mut o = ContainerObservation::default();
            for s in samples {
                o.record(s);
            }
            all.insert(name, o);
        }
        let names: Vec<&str> = worst(all.iter(), 5).into_iter().map(|(k, _)| k).collect();
        assert_eq!(names, ["long-far", "long", "brief-far"]);
        assert_eq!(worst(all.iter(), 1).len(), 1);
    }
}
