//! A real node's checks as phases, each reported on its own: a phase that fails does
//! not hide the ones after it, and a phase that needs an earlier one's state says it
//! was skipped and why. The test fails at the end, naming every phase that did not pass.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures::FutureExt;

#[derive(Debug)]
pub enum PhaseResult {
    Passed(Duration),
    Failed(String),
    Skipped(String),
}

pub struct Phases {
    node: String,
    /// The part of the node's run the phases now belong to ([`Phases::part`]): their
    /// names and the names they need are taken within it.
    part: Option<String>,
    results: Vec<(String, PhaseResult)>,
    /// The node's CPU time each phase used, where measured ([`Phases::spent`]).
    cpu: Vec<Option<Duration>>,
    /// When the node's run is over its time ([`Phases::deadline`]): no phase starts
    /// after it.
    deadline: Option<(Instant, Duration)>,
}

impl Phases {
    pub fn new(node: &str) -> Self {
        Phases {
            node: node.to_string(),
            part: None,
            results: Vec::new(),
            cpu: Vec::new(),
            deadline: None,
        }
    }

    /// No phase starts once `budget` from now has passed: each is skipped and says so,
    /// and the summary still comes. A node that cannot start its pods fails each
    /// phase only after that phase's own waits, and a CI run ended by its time limit
    /// shows none of it (issue 57: 4,173 s of a node whose first pods never started,
    /// stopped by CI's limit before its summary).
    pub fn deadline(&mut self, budget: Duration) {
        self.deadline = Some((Instant::now() + budget, budget));
    }

    /// From here on the phases are part `label` of the node's run (one boot running two
    /// kubelets, one after the other: issue 57): each is named `label name`. What a
    /// phase needs is looked for in its part first, so a second `install` is needed by
    /// the phases after it and not the first one's, then among the phases before the
    /// part (the node state the part starts from).
    pub fn part(&mut self, label: &str) {
        self.part = Some(label.to_string());
    }

    /// `name` within the current part.
    fn named(&self, name: &str) -> String {
        match &self.part {
            Some(part) => format!("{part} {name}"),
            None => name.to_string(),
        }
    }

    /// The phase a phase's need `name` is: the part's own of that name once it ran (or
    /// was skipped), otherwise the one before the part.
    fn needed(&self, name: &str) -> String {
        let own = self.named(name);
        if self.results.iter().any(|(n, _)| *n == own) {
            own
        } else {
            name.to_string()
        }
    }

    fn passed(&self, name: &str) -> bool {
        self.results
            .iter()
            .any(|(n, r)| n == name && matches!(r, PhaseResult::Passed(_)))
    }

    /// Whether the phase run last failed (a skipped one did not run, so did not fail).
    pub fn last_failed(&self) -> bool {
        matches!(self.results.last(), Some((_, PhaseResult::Failed(_))))
    }

    /// Runs `phase` unless a phase it `needs` did not pass; a panic fails this phase
    /// only. Returns what the phase gave, None when it failed or was skipped.
    pub async fn run<T, F: Future<Output = T>>(
        &mut self,
        name: &str,
        needs: &[&str],
        phase: impl FnOnce() -> F,
    ) -> Option<T> {
        let name = &self.named(name);
        let needs: Vec<String> = needs.iter().map(|n| self.needed(n)).collect();
        let late = self
            .deadline
            .filter(|(at, _)| Instant::now() >= *at)
            .map(|(_, budget)| format!("the node's run is past its budget of {budget:.0?}"));
        let unmet = || {
            needs
                .iter()
                .find(|n| !self.passed(n))
                .map(|missing| format!("needs phase {missing}, which did not pass"))
        };
        if let Some(why) = late.or_else(unmet) {
            eprintln!("== {}: {name} skipped: {why}", self.node);
            self.results
                .push((name.to_string(), PhaseResult::Skipped(why)));
            return None;
        }
        eprintln!("== {}: {name}", self.node);
        let started = Instant::now();
        let outcome = AssertUnwindSafe(phase()).catch_unwind().await;
        let (result, value) = match outcome {
            Ok(value) => (PhaseResult::Passed(started.elapsed()), Some(value)),
            Err(panic) => (PhaseResult::Failed(panic_message(panic.as_ref())), None),
        };
        eprintln!("== {}: {name}: {}", self.node, short(&result));
        self.results.push((name.to_string(), result));
        value
    }

    /// Records the CPU time the node spent in the phase run last (the difference of two
    /// readings, either of which may be missing), printed with its result by
    /// [`Phases::finish`]: the node tier's time follows its CPU, so its cuts go by this
    /// column (issue 57).
    pub fn spent(&mut self, before: Option<Duration>, after: Option<Duration>) {
        let used = before.zip(after).map(|(b, a)| a.saturating_sub(b));
        self.cpu.resize(self.results.len().saturating_sub(1), None);
        self.cpu.push(used);
    }

    /// Prints every phase's result (and the node's CPU in it, where measured) and the
    /// sum; fails the test when any did not pass.
    pub fn finish(self) {
        eprintln!("== {}: phases", self.node);
        let mut total = Duration::ZERO;
        for (i, (name, result)) in self.results.iter().enumerate() {
            let cpu = match self.cpu.get(i).copied().flatten() {
                Some(c) => {
                    total += c;
                    format!(", node CPU {:.0?}", c)
                }
                None => String::new(),
            };
            eprintln!("   {name:<36} {}{cpu}", short(result));
        }
        if !total.is_zero() {
            eprintln!("   the node's CPU in its phases: {:.0?}", total);
        }
        let not_passed: Vec<String> = self
            .results
            .iter()
            .filter(|(_, r)| !matches!(r, PhaseResult::Passed(_)))
            .map(|(name, r)| format!("{name}: {r:?}"))
            .collect();
        assert!(
            not_passed.is_empty(),
            "{}: {} of {} phases did not pass:\n{}",
            self.node,
            not_passed.len(),
            self.results.len(),
            not_passed.join("\n")
        );
    }
}

fn short(result: &PhaseResult) -> String {
    match result {
        PhaseResult::Passed(took) => format!("passed in {:.0?}", took),
        PhaseResult::Failed(why) => format!("FAILED: {}", why.lines().next().unwrap_or("")),
        PhaseResult::Skipped(why) => format!("skipped: {why}"),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_phase_keeps_the_cpu_it_used_also_after_one_not_measured() {
        let mut phases = Phases::new("n1");
        let s = Duration::from_secs;
        phases.run("boot", &[], || async {}).await;
        phases.spent(Some(s(10)), Some(s(25)));
        phases.run("install", &[], || async {}).await; // not measured
        phases.run("reports", &["nothing"], || async {}).await;
        phases.spent(Some(s(25)), None);
        phases.run("token", &[], || async {}).await;
        phases.spent(Some(s(30)), Some(s(32)));
        assert_eq!(phases.cpu, vec![Some(s(15)), None, None, Some(s(2))]);
    }

    #[tokio::test]
    async fn a_failed_phase_is_reported_and_skips_only_what_needs_it() {
        let mut phases = Phases::new("n1");
        assert_eq!(phases.run("boot", &[], || async { 7 }).await, Some(7));
        assert!(!phases.last_failed());
        let failed = phases
            .run("install", &["boot"], || async {
                panic!("the agent is not Ready");
            })
            .await;
        assert_eq!(failed, None::<()>);
        assert!(phases.last_failed());
        let mut ran = false;
        let skipped = phases
            .run("reports", &["install"], || async {
                ran = true;
            })
            .await;
        assert!(
            skipped.is_none() && !ran,
            "a phase whose need failed does not run"
        );
        assert!(!phases.last_failed(), "skipped is not failed");
        assert_eq!(
            phases.run("token", &["boot"], || async { 1 }).await,
            Some(1)
        );
        let summary = std::panic::catch_unwind(AssertUnwindSafe(|| phases.finish()))
            .expect_err("the run fails at the end");
        let message = panic_message(summary.as_ref());
        assert!(
            message.starts_with("n1: 2 of 4 phases did not pass"),
            "{message}"
        );
        assert!(
            message.contains("install: Failed(\"the agent is not Ready\")"),
            "{message}"
        );
        assert!(
            message.contains("reports: Skipped(\"needs phase install, which did not pass\")"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn no_phase_starts_past_the_deadline_and_the_summary_names_it() {
        let mut phases = Phases::new("n1");
        phases.deadline(Duration::from_secs(3600));
        assert_eq!(phases.run("boot", &[], || async { 1 }).await, Some(1));
        phases.deadline(Duration::ZERO);
        let mut ran = false;
        let late = phases
            .run("install", &[], || async {
                ran = true;
            })
            .await;
        assert!(
            late.is_none() && !ran,
            "a phase past the deadline does not run"
        );
        assert!(!phases.last_failed(), "skipped, not failed");
        let summary = std::panic::catch_unwind(AssertUnwindSafe(|| phases.finish()))
            .expect_err("a skipped phase fails the run at the end");
        let message = panic_message(summary.as_ref());
        assert!(
            message.contains("install: Skipped(\"the node's run is past its budget of 0ns\")"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_part_names_its_phases_and_needs_its_own() {
        let mut phases = Phases::new("n1");
        phases.run("install", &[], || async {}).await;
        phases
            .run("helm", &[], || async {
                panic!("a release left behind");
            })
            .await;
        phases.part("v1.35.4");
        phases.run("swap", &["install"], || async {}).await;
        phases.run("reference", &["helm"], || async {}).await;
        let failed = phases
            .run("install", &["swap"], || async {
                panic!("the agent is not Ready");
            })
            .await;
        assert_eq!(failed, None::<()>);
        let mut ran = false;
        phases
            .run("owners", &["install"], || async {
                ran = true;
            })
            .await;
        assert!(
            !ran,
            "the part's own install failed: the first one does not count"
        );
        let names: Vec<&str> = phases.results.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "install",
                "helm",
                "v1.35.4 swap",
                "v1.35.4 reference",
                "v1.35.4 install",
                "v1.35.4 owners"
            ]
        );
        assert!(
            matches!(phases.results[2].1, PhaseResult::Passed(_)),
            "a need not yet in the part is the one before it: {:?}",
            phases.results[2]
        );
        assert!(
            matches!(&phases.results[3].1, PhaseResult::Skipped(why) if why.contains("needs phase helm")),
            "{:?}",
            phases.results[3]
        );
        let summary = std::panic::catch_unwind(AssertUnwindSafe(|| phases.finish()))
            .expect_err("the run fails at the end");
        let message = panic_message(summary.as_ref());
        assert!(
            message.contains(
                "v1.35.4 owners: Skipped(\"needs phase v1.35.4 install, which did not pass\")"
            ),
            "{message}"
        );
    }

    #[tokio::test]
    async fn every_phase_passing_finishes_quietly() {
        let mut phases = Phases::new("n1");
        phases.run("one", &[], || async {}).await;
        phases.run("two", &["one"], || async {}).await;
        phases.finish();
    }
}
