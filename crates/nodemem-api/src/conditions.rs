//! Status conditions as both of nodemem's writers (the controller on policies, the
//! agents on configs) build them: a condition stamped with the generation and the time,
//! its transition time kept while its status stays, and statuses compared without
//! those times (a status whose only change is a time is not written again).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A condition whose status is True when `ok`, at `now` for the object's `generation`.
pub fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if ok { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time: now.clone(),
    }
}

/// The transition time of `previous`'s condition of the same type and status, when
/// there is one: the condition has not transitioned. Returns whether it was kept.
pub fn keep_transition_time(c: &mut Condition, previous: &[Condition]) -> bool {
    match previous
        .iter()
        .find(|p| p.type_ == c.type_ && p.status == c.status)
    {
        Some(p) => {
            c.last_transition_time = p.last_transition_time.clone();
            true
        }
        None => false,
    }
}

/// Every condition's transition time cleared, for comparing statuses by what they say.
pub fn without_transition_times(conditions: &mut [Condition]) {
    for c in conditions {
        c.last_transition_time = Time(Default::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap())
    }

    #[test]
    fn a_condition_keeps_its_time_while_its_status_stays_and_takes_the_new_one_on_a_change() {
        let previous = [
            condition("Ready", true, "Done", "m".into(), Some(1), &at(100)),
            condition("Degraded", false, "Fine", "m".into(), Some(1), &at(100)),
        ];
        let mut same = condition("Ready", true, "Other", "n".into(), Some(2), &at(200));
        assert!(keep_transition_time(&mut same, &previous));
        assert_eq!(same.last_transition_time, at(100));
        assert_eq!(
            (same.reason.as_str(), same.observed_generation),
            ("Other", Some(2))
        );
        let mut flipped = condition("Degraded", true, "Broken", "m".into(), Some(2), &at(200));
        assert!(!keep_transition_time(&mut flipped, &previous));
        assert_eq!(flipped.last_transition_time, at(200));
        let mut new = condition("Accepted", false, "Invalid", "m".into(), None, &at(200));
        assert!(!keep_transition_time(&mut new, &previous));
        assert_eq!(new.status, "False");
        assert_eq!(new.last_transition_time, at(200));
    }

    #[test]
    fn statuses_compared_without_times_differ_only_in_what_they_say() {
        let mut a = vec![condition(
            "Ready",
            true,
            "Done",
            "m".into(),
            Some(1),
            &at(1),
        )];
        let mut b = vec![condition(
            "Ready",
            true,
            "Done",
            "m".into(),
            Some(1),
            &at(2),
        )];
        assert_ne!(a, b);
        without_transition_times(&mut a);
        without_transition_times(&mut b);
        assert_eq!(a, b);
    }
}
