//! Relief for a container that memory.high is choking (issue 19, pure): when its
//! memory pressure (PSI `full`, the share of time all its tasks stalled on memory)
//! stays above a threshold for a sustained time while its working set sits at
//! memory.high, memory.high is raised (to its memory.max, or to `max` when it has no
//! limit) for a relief period, then restored. A container that needs relief again
//! within a window is reported instead: relief must not become a way around the
//! settings for good. One state machine per container, fed one reading at a time;
//! time is in seconds from any fixed origin.

/// The policy's relief settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReliefSettings {
    /// PSI `full` (avg10, percent) above which a container is stalled.
    pub full_pressure_percent: u32,
    /// How long it must last before relief.
    pub sustained_seconds: u64,
    /// How long memory.high stays raised.
    pub relief_seconds: u64,
    /// A container that needs relief again within this long after its last relief
    /// ended is reported, not relieved.
    pub repeat_window_seconds: u64,
}

/// One reading of a container.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reading {
    /// Seconds since the epoch.
    pub at: u64,
    /// PSI `full` avg10 of its memory.pressure, percent.
    pub full_avg10: f64,
    /// memory.current less the inactive page cache, bytes.
    pub working_set: i64,
    /// The memory.high the settings give it.
    pub memory_high: i64,
    /// Its memory.max, None without a limit.
    pub memory_max: Option<i64>,
}

impl Reading {
    /// Stalled on memory while its working set sits at memory.high (within 5 %: the
    /// kernel reclaims it back just below the line).
    fn choking(&self, s: &ReliefSettings) -> bool {
        self.full_avg10 > f64::from(s.full_pressure_percent)
            && self.working_set as i128 * 100 >= self.memory_high as i128 * 95
    }
}

/// What to do with the container's memory.high now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing changes.
    Nothing,
    /// Raise memory.high to this (None: `max`) until `until`.
    Relieve {
        /// The raised memory.high (None: `max`).
        to: Option<i64>,
        /// Until when, seconds since the epoch.
        until: u64,
    },
    /// Put the settings' memory.high back.
    Restore {
        /// The settings' memory.high.
        to: i64,
    },
    /// It needs relief again within the repeat window: told, not relieved.
    Report {
        /// When its last relief ended, seconds since the epoch.
        last_relief_ended: u64,
    },
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum State {
    #[default]
    Normal,
    /// Choking since this time.
    Choking {
        since: u64,
    },
    Relieved {
        until: u64,
    },
    /// Reported as needing relief again; quiet until it stops choking.
    Reported,
}

/// One container's relief.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContainerRelief {
    state: State,
    last_relief_ended: Option<u64>,
    /// Reliefs given.
    pub reliefs: u64,
}

impl ContainerRelief {
    /// Whether anything is under way (choking, relieved, or reported and not calm
    /// yet): such a container is read on every tick, a calm one only when the kernel
    /// signals pressure.
    pub fn active(&self) -> bool {
        self.state != State::Normal
    }

    /// Whether memory.high is raised now.
    pub fn relieved(&self) -> bool {
        matches!(self.state, State::Relieved { .. })
    }

    /// The action for reading `r` under `s`, the state moved on.
    pub fn step(&mut self, r: &Reading, s: &ReliefSettings) -> Action {
        match self.state {
            State::Relieved { until } => {
                if r.at < until {
                    return Action::Nothing;
                }
                self.state = State::Normal;
                self.last_relief_ended = Some(r.at);
                Action::Restore { to: r.memory_high }
            }
            State::Reported => {
                if !r.choking(s) {
                    self.state = State::Normal;
                }
                Action::Nothing
            }
            State::Normal | State::Choking { .. } => {
                if !r.choking(s) {
                    self.state = State::Normal;
                    return Action::Nothing;
                }
                let since = match self.state {
                    State::Choking { since } => since,
                    _ => r.at,
                };
                self.state = State::Choking { since };
                if r.at.saturating_sub(since) < s.sustained_seconds {
                    return Action::Nothing;
                }
                match self.last_relief_ended {
                    Some(ended) if r.at.saturating_sub(ended) < s.repeat_window_seconds => {
                        self.state = State::Reported;
                        Action::Report {
                            last_relief_ended: ended,
                        }
                    }
                    _ => {
                        let until = r.at + s.relief_seconds;
                        self.state = State::Relieved { until };
                        self.reliefs += 1;
                        Action::Relieve {
                            to: r.memory_max,
                            until,
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: i64 = 1 << 20;
    const SETTINGS: ReliefSettings = ReliefSettings {
        full_pressure_percent: 20,
        sustained_seconds: 30,
        relief_seconds: 300,
        repeat_window_seconds: 3600,
    };

    fn reading(at: u64, full: f64, ws_mi: i64) -> Reading {
        Reading {
            at,
            full_avg10: full,
            working_set: ws_mi * MI,
            memory_high: 100 * MI,
            memory_max: Some(200 * MI),
        }
    }

    fn run(c: &mut ContainerRelief, readings: &[Reading]) -> Vec<Action> {
        readings.iter().map(|r| c.step(r, &SETTINGS)).collect()
    }

    #[test]
    fn sustained_choking_is_relieved_for_the_period_then_restored() {
        let mut c = ContainerRelief::default();
        let actions = run(
            &mut c,
            &[
                reading(0, 50.0, 99),
                reading(10, 50.0, 100),
                reading(29, 50.0, 100),
                reading(30, 50.0, 100), // 30 s choking: relieved
                reading(100, 0.0, 150),
                reading(330, 0.0, 150), // the period is over
            ],
        );
        assert_eq!(
            actions,
            [
                Action::Nothing,
                Action::Nothing,
                Action::Nothing,
                Action::Relieve {
                    to: Some(200 * MI),
                    until: 330
                },
                Action::Nothing,
                Action::Restore { to: 100 * MI },
            ]
        );
        assert_eq!(c.reliefs, 1);
        assert!(!c.relieved());
    }

    #[test]
    fn pressure_alone_or_page_cache_alone_is_no_reason() {
        let mut c = ContainerRelief::default();
        // Stalled, but far below memory.high: not memory.high's doing.
        let low: Vec<Reading> = (0..10).map(|i| reading(i * 10, 90.0, 50)).collect();
        assert!(run(&mut c, &low).iter().all(|a| *a == Action::Nothing));
        // At memory.high (page cache filling it) but not stalled.
        let calm: Vec<Reading> = (10..20).map(|i| reading(i * 10, 1.0, 100)).collect();
        assert!(run(&mut c, &calm).iter().all(|a| *a == Action::Nothing));
        // A break in the choking starts the sustained time again.
        let broken = [
            reading(300, 50.0, 100),
            reading(320, 5.0, 100),
            reading(340, 50.0, 100),
            reading(360, 50.0, 100),
        ];
        assert!(run(&mut c, &broken).iter().all(|a| *a == Action::Nothing));
        assert_eq!(
            c.step(&reading(370, 50.0, 100), &SETTINGS),
            Action::Relieve {
                to: Some(200 * MI),
                until: 670
            }
        );
    }

    #[test]
    fn relief_again_within_the_window_is_reported_not_given() {
        let mut c = ContainerRelief::default();
        run(
            &mut c,
            &[
                reading(0, 50.0, 100),
                reading(30, 50.0, 100),
                reading(330, 0.0, 100),
            ],
        );
        assert_eq!(c.reliefs, 1);
        // Chokes again 100 s after its relief ended.
        let again = run(
            &mut c,
            &[
                reading(430, 50.0, 100),
                reading(460, 50.0, 100),
                reading(470, 50.0, 100),
            ],
        );
        assert_eq!(
            again,
            [
                Action::Nothing,
                Action::Report {
                    last_relief_ended: 330
                },
                Action::Nothing
            ]
        );
        assert_eq!(c.reliefs, 1);
        // Once calm and past the window, relief is possible again; without a limit
        // memory.high goes to max.
        c.step(&reading(500, 0.0, 10), &SETTINGS);
        let mut unlimited = reading(4000, 50.0, 100);
        unlimited.memory_max = None;
        c.step(&unlimited, &SETTINGS);
        unlimited.at = 4030;
        assert_eq!(
            c.step(&unlimited, &SETTINGS),
            Action::Relieve {
                to: None,
                until: 4330
            }
        );
        assert_eq!(c.reliefs, 2);
    }
}
