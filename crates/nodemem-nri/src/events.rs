//! The events a plugin subscribes to, as the bit mask of ConfigureResponse: event `e`
//! is bit `e - 1` (containerd/nri pkg/api/event.go).

use crate::api::Event;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Events(i32);

impl Events {
    pub fn of(events: &[Event]) -> Self {
        Events(
            events
                .iter()
                .filter(|e| **e != Event::Unknown && **e != Event::Last)
                .fold(0, |mask, e| mask | 1 << (*e as i32 - 1)),
        )
    }

    pub fn mask(self) -> i32 {
        self.0
    }

    pub fn contains(self, event: Event) -> bool {
        event != Event::Unknown && self.0 & (1 << (event as i32 - 1)) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_follow_the_event_numbers() {
        // RUN_POD_SANDBOX = 1 -> bit 0, CREATE_CONTAINER = 4 -> bit 3,
        // UPDATE_CONTAINER = 8 -> bit 7 (NRI's EventMask).
        let e = Events::of(&[
            Event::RunPodSandbox,
            Event::CreateContainer,
            Event::UpdateContainer,
        ]);
        assert_eq!(e.mask(), 0b1000_1001);
        assert!(e.contains(Event::CreateContainer));
        assert!(!e.contains(Event::StopContainer));
        assert_eq!(Events::of(&[Event::Unknown, Event::Last]).mask(), 0);
    }
}
