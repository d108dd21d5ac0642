//! How long an agent keeps its values after its config goes (issue 44, item 8). A
//! config deleted out of band (`kubectl delete nmc --all`, a prune, a script) is written
//! again by the controller at once (a repair); an agent that gave back in that moment
//! would leave its node without nodemem's memory.min and memory.low until then. So the
//! values stay for [`GRACE`] after the config goes; a config back within it is
//! enforced as if it had never gone, and one still gone is given back. A config the
//! controller deletes on purpose with its values still on the node (a rollback to no
//! config, `kubectl nodemem release --now`) is marked first
//! ([`nodemem_api::GIVE_BACK_ANNOTATION`]) and given back at once (issue 58: the grace
//! had to outlast the controller's write backoff, and the deletions it means are not
//! to wait that long). Pure: times are given.

use std::time::{Duration, Instant};

/// Time for the controller to write a deleted config again: it does within a second or
/// two, and while its writes fail it tries again at most
/// [`nodemem_api::WRITE_BACKOFF_CAP`] later (`nodemem-controller`'s backoff).
pub const GRACE: Duration = nodemem_api::DELETED_CONFIG_GRACE;

// The grace outlasts the controller's longest wait between writes, with room.
const _: () = assert!(GRACE.as_secs() >= nodemem_api::WRITE_BACKOFF_CAP.as_secs() + 10);

/// Whether the agent enforced a config, and since when it has none.
#[derive(Debug, Default)]
pub struct Grace {
    enforcing: bool,
    gone_since: Option<Instant>,
}

/// What a pass without a config does.
#[derive(Debug, PartialEq, Eq)]
pub enum Gone {
    /// Give back what nodemem set (nothing was enforced, or the grace is over).
    GiveBack,
    /// Keep the values `left` longer; `first`: the config has just gone (the caller
    /// arranges a pass when the grace ends).
    Wait { left: Duration, first: bool },
}

impl Grace {
    /// A pass with a config.
    pub fn present(&mut self) {
        self.enforcing = true;
        self.gone_since = None;
    }

    /// A pass without a config at `now`; `on_purpose`: the config went marked to be
    /// given back at once.
    pub fn absent(&mut self, now: Instant, on_purpose: bool) -> Gone {
        if !self.enforcing || on_purpose {
            *self = Grace::default();
            return Gone::GiveBack;
        }
        let first = self.gone_since.is_none();
        let since = *self.gone_since.get_or_insert(now);
        let waited = now.saturating_duration_since(since);
        if waited >= GRACE {
            *self = Grace::default();
            return Gone::GiveBack;
        }
        Gone::Wait {
            left: GRACE - waited,
            first,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_stay_for_the_grace_then_go_and_a_config_back_in_time_is_as_if_never_gone() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut g = Grace::default();
        // Never enforced (a start without a config): give back at once.
        assert_eq!(g.absent(t0, false), Gone::GiveBack);
        g.present();
        assert_eq!(
            g.absent(t0, false),
            Gone::Wait {
                left: GRACE,
                first: true
            }
        );
        assert_eq!(
            g.absent(t0 + s(4), false),
            Gone::Wait {
                left: GRACE - s(4),
                first: false
            }
        );
        // Re-created within the grace: enforced again, and a later deletion starts over.
        g.present();
        assert_eq!(
            g.absent(t0 + s(6), false),
            Gone::Wait {
                left: GRACE,
                first: true
            }
        );
        assert_eq!(g.absent(t0 + s(6) + GRACE, false), Gone::GiveBack);
        // Given back: no more waiting until a config is enforced again.
        assert_eq!(g.absent(t0 + GRACE * 3, false), Gone::GiveBack);
    }

    #[test]
    fn a_config_deleted_on_purpose_is_given_back_at_once_even_within_a_grace() {
        let t0 = Instant::now();
        let mut g = Grace::default();
        g.present();
        assert_eq!(g.absent(t0, true), Gone::GiveBack);
        // Enforced again, then gone by hand: the grace again.
        g.present();
        assert!(matches!(
            g.absent(t0, false),
            Gone::Wait { first: true, .. }
        ));
        // A mark seen during that grace (the config written again, marked, deleted)
        // gives back at once.
        assert_eq!(g.absent(t0 + Duration::from_secs(1), true), Gone::GiveBack);
    }
}
