//! Workload classes (issue 63): a pool's policy names a few classes, each changing what
//! a workload may choose differently from the pool (its memory.high, whether its
//! request is protected, its proactive reclaim), and a pod picks one with the
//! `nodemem.io/class` annotation, or its namespace with the same label.
//!
//! The rule stays the kubelet's inside a class: a class only hands the formulas other
//! settings ([`WorkloadClass::memory_qos`]), so memory.high is the kubelet's float64 of
//! the node's version with the class's factor. What a class cannot change (the Memory
//! Manager, the node's reservations, the enforcement, the reservation policy that the
//! QoS-class cgroups follow) is refused where the settings are validated.

use crate::feedback::reclaim::{Reclaim, ReclaimMode, ReclaimSettings};
use crate::pod::qos::QosClass;
use crate::values::factor::ThrottlingFactor;
use crate::values::memory_qos::{MemoryQosSettings, ReservationPolicy};

/// The pod annotation, and the namespace label, that choose a class.
pub const CLASS_KEY: &str = "nodemem.io/class";

/// The most classes a policy may name (the CRD's `maxItems`): metrics carry a class
/// label, whose values must stay few.
pub const MAX_CLASSES: usize = 16;

/// A class as the policy names it, with the pool's settings it leaves alone resolved
/// at conversion.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WorkloadClass {
    /// Its name (a DNS label), what pods choose it by.
    pub name: String,
    /// Its memory.high.
    pub memory_high: ClassMemoryHigh,
    /// Whether its requests become memory.min / memory.low.
    pub protection: Protection,
    /// Its proactive reclaim.
    pub reclaim: ClassReclaim,
}

/// What a class does with memory.high.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ClassMemoryHigh {
    /// The pool's throttling factor (or none, if the pool sets no memory.high).
    #[default]
    Pool,
    /// No memory.high on its pods' cgroups.
    Unset,
    /// memory.high from this factor, by the kubelet's formula.
    Factor(ThrottlingFactor),
}

/// Whether a class's requests are protected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Protection {
    /// As the pool's reservation policy says.
    #[default]
    Pool,
    /// No memory.min or memory.low on its pods' cgroups, and its requests are left out
    /// of the QoS-class cgroups' sums (a parent protects what its children ask).
    Unprotected,
}

/// What a class does with proactive reclaim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum ClassReclaim {
    /// As the pool's `reclaim` says.
    #[default]
    Pool,
    /// None on its pods, whatever the pool's.
    Disabled,
    /// Its own mode and pace (on the QoS classes the pool's reclaim names, or
    /// Burstable and BestEffort without one).
    Own {
        /// Observe or Active.
        mode: ReclaimMode,
        /// Its pace and targets.
        settings: ReclaimSettings,
    },
}

impl WorkloadClass {
    /// A class that changes nothing (every field follows the pool).
    pub fn named(name: &str) -> Self {
        WorkloadClass {
            name: name.to_string(),
            memory_high: ClassMemoryHigh::Pool,
            protection: Protection::Pool,
            reclaim: ClassReclaim::Pool,
        }
    }

    /// The Memory QoS settings this class's pods are computed with: the pool's, with
    /// the class's memory.high and protection.
    pub fn memory_qos(&self, pool: &MemoryQosSettings) -> MemoryQosSettings {
        MemoryQosSettings {
            enabled: pool.enabled,
            throttling_factor: match self.memory_high {
                ClassMemoryHigh::Pool => pool.throttling_factor,
                ClassMemoryHigh::Unset => None,
                ClassMemoryHigh::Factor(f) => Some(f),
            },
            reservation_policy: match self.protection {
                Protection::Pool => pool.reservation_policy,
                Protection::Unprotected => ReservationPolicy::None,
            },
        }
    }

    /// The reclaim this class's pods get (None: none), from the pool's.
    pub fn reclaim(&self, pool: Option<&Reclaim>) -> Option<Reclaim> {
        match &self.reclaim {
            ClassReclaim::Pool => pool.cloned(),
            ClassReclaim::Disabled => None,
            ClassReclaim::Own { mode, settings } => Some(Reclaim {
                mode: *mode,
                settings: *settings,
                classes: pool.map_or_else(
                    || vec![QosClass::Burstable, QosClass::BestEffort],
                    |p| p.classes.clone(),
                ),
            }),
        }
    }
}

/// Where a pod's choice of class comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClassSource {
    /// Nothing chose: the pool's own settings.
    #[default]
    Pool,
    /// The pod's own annotation (wins over its namespace's label).
    PodAnnotation,
    /// Its namespace's label.
    NamespaceLabel,
}

impl ClassSource {
    /// As views and status say it.
    pub fn as_str(self) -> &'static str {
        match self {
            ClassSource::Pool => "pool",
            ClassSource::PodAnnotation => "pod annotation",
            ClassSource::NamespaceLabel => "namespace label",
        }
    }
}

/// What a pod asked for, before the node's settings say which classes exist.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum ClassChoice {
    /// No choice: the pool's settings.
    #[default]
    Pool,
    /// `nodemem.io/memory-qos: disabled`: nodemem sets nothing on it but NUMA pinning.
    OptedOut(ClassSource),
    /// `nodemem.io/class: <name>`.
    Named {
        /// The class's name as written.
        name: String,
        /// Where it was written.
        source: ClassSource,
    },
}

/// Whether a pod's or namespace's keys opt out, and which class they name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChoiceKeys<'a> {
    /// `nodemem.io/memory-qos: disabled` is there.
    pub opted_out: bool,
    /// The value of `nodemem.io/class`, if there.
    pub class: Option<&'a str>,
}

impl ClassChoice {
    /// The choice of a pod with these annotations in a namespace with these labels.
    /// The pod's own choice wins over its namespace's; on one object, opting out wins
    /// over a class (the more careful of two contradicting asks). An empty class name
    /// is no choice.
    pub fn of(pod: ChoiceKeys<'_>, namespace: ChoiceKeys<'_>) -> ClassChoice {
        for (keys, source) in [
            (pod, ClassSource::PodAnnotation),
            (namespace, ClassSource::NamespaceLabel),
        ] {
            if keys.opted_out {
                return ClassChoice::OptedOut(source);
            }
            if let Some(name) = keys.class.filter(|n| !n.is_empty()) {
                return ClassChoice::Named {
                    name: name.to_string(),
                    source,
                };
            }
        }
        ClassChoice::Pool
    }

    /// The pool's settings, or opted out by the pod's annotation (fixtures and callers
    /// that know only the opt-out).
    pub fn from_opt_out(opted_out: bool) -> ClassChoice {
        if opted_out {
            ClassChoice::OptedOut(ClassSource::PodAnnotation)
        } else {
            ClassChoice::Pool
        }
    }

    /// Whether it opts out of Memory QoS.
    pub fn opted_out(&self) -> bool {
        matches!(self, ClassChoice::OptedOut(_))
    }

    /// Where it comes from.
    pub fn source(&self) -> ClassSource {
        match self {
            ClassChoice::Pool => ClassSource::Pool,
            ClassChoice::OptedOut(s) => *s,
            ClassChoice::Named { source, .. } => *source,
        }
    }
}

/// A class's name is a DNS label (RFC 1123): lower-case letters, digits and '-', at
/// most 63 characters, starting and ending with a letter or digit. The reason why not.
pub fn check_class_name(name: &str) -> Result<(), String> {
    let valid_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    if name.is_empty() || name.len() > 63 {
        return Err(format!(
            "class name {name:?} must be 1 to 63 characters long"
        ));
    }
    if !name.chars().all(valid_char) || name.starts_with('-') || name.ends_with('-') {
        return Err(format!(
            "class name {name:?} must be a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(opted_out: bool, class: Option<&str>) -> ChoiceKeys<'_> {
        ChoiceKeys { opted_out, class }
    }

    #[test]
    fn the_pods_own_choice_wins_and_opting_out_wins_on_one_object() {
        let none = keys(false, None);
        assert_eq!(ClassChoice::of(none, none), ClassChoice::Pool);
        let named = |name: &str, source| ClassChoice::Named {
            name: name.into(),
            source,
        };
        assert_eq!(
            ClassChoice::of(keys(false, Some("batch")), keys(false, Some("web"))),
            named("batch", ClassSource::PodAnnotation)
        );
        assert_eq!(
            ClassChoice::of(none, keys(false, Some("web"))),
            named("web", ClassSource::NamespaceLabel)
        );
        // A pod naming a class in an opted-out namespace runs its class.
        assert_eq!(
            ClassChoice::of(keys(false, Some("batch")), keys(true, None)),
            named("batch", ClassSource::PodAnnotation)
        );
        assert_eq!(
            ClassChoice::of(none, keys(true, Some("web"))),
            ClassChoice::OptedOut(ClassSource::NamespaceLabel)
        );
        assert_eq!(
            ClassChoice::of(keys(true, Some("batch")), keys(false, Some("web"))),
            ClassChoice::OptedOut(ClassSource::PodAnnotation)
        );
        // An empty value is no choice: the namespace's applies.
        assert_eq!(
            ClassChoice::of(keys(false, Some("")), keys(false, Some("web"))),
            named("web", ClassSource::NamespaceLabel)
        );
        assert!(ClassChoice::OptedOut(ClassSource::Pool).opted_out());
        assert_eq!(
            named("x", ClassSource::NamespaceLabel).source(),
            ClassSource::NamespaceLabel
        );
    }

    #[test]
    fn a_class_changes_only_what_it_names() {
        let pool = MemoryQosSettings {
            enabled: true,
            throttling_factor: Some(ThrottlingFactor::from_f64(0.8).unwrap()),
            reservation_policy: ReservationPolicy::TieredReservation,
        };
        assert_eq!(WorkloadClass::named("same").memory_qos(&pool), pool);
        let mut class = WorkloadClass::named("batch");
        class.memory_high = ClassMemoryHigh::Factor(ThrottlingFactor::from_f64(0.5).unwrap());
        class.protection = Protection::Unprotected;
        let qos = class.memory_qos(&pool);
        assert_eq!(qos.throttling_factor.unwrap().as_f64(), 0.5);
        assert_eq!(qos.reservation_policy, ReservationPolicy::None);
        assert!(qos.enabled);
        class.memory_high = ClassMemoryHigh::Unset;
        assert_eq!(class.memory_qos(&pool).throttling_factor, None);
        let off = MemoryQosSettings {
            enabled: false,
            ..pool
        };
        assert!(
            !class.memory_qos(&off).enabled,
            "a class never turns QoS on"
        );
    }

    #[test]
    fn a_class_reclaims_as_the_pool_as_it_says_or_not_at_all() {
        let settings = ReclaimSettings {
            target_stall_us_per_s: 1000,
            max_step_permille: 10,
            interval_seconds: 6,
            max_refaults_per_s: 100,
        };
        let pool = Reclaim {
            mode: ReclaimMode::Observe,
            settings,
            classes: vec![QosClass::Burstable],
        };
        let mut class = WorkloadClass::named("batch");
        assert_eq!(class.reclaim(Some(&pool)), Some(pool.clone()));
        assert_eq!(class.reclaim(None), None);
        class.reclaim = ClassReclaim::Disabled;
        assert_eq!(class.reclaim(Some(&pool)), None);
        let own = ReclaimSettings {
            max_step_permille: 50,
            ..settings
        };
        class.reclaim = ClassReclaim::Own {
            mode: ReclaimMode::Active,
            settings: own,
        };
        let got = class.reclaim(Some(&pool)).unwrap();
        assert_eq!(
            (got.mode, got.settings, got.classes),
            (ReclaimMode::Active, own, vec![QosClass::Burstable])
        );
        assert_eq!(
            class.reclaim(None).unwrap().classes,
            [QosClass::Burstable, QosClass::BestEffort]
        );
    }

    #[test]
    fn class_names_are_dns_labels() {
        for good in ["a", "batch", "low-latency", "x1", &"a".repeat(63)] {
            assert_eq!(check_class_name(good), Ok(()), "{good}");
        }
        for bad in ["", "Batch", "-a", "a-", "a_b", "a.b", &"a".repeat(64)] {
            let err = check_class_name(bad).unwrap_err();
            assert!(err.contains("class name"), "{bad}: {err}");
        }
    }
}
