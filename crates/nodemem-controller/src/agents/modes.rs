//! The enforcement modes an install deploys its agents for (`--agent-enforcement-modes`,
//! the chart's `agent.enforcementModes`): the agents' DaemonSet carries only the
//! privileges these modes need ([`crate::agents::daemonset`]), and a policy asking for another
//! mode is refused by name instead of failing on its nodes.

use std::fmt;
use std::str::FromStr;

use nodemem_api::policy::Enforcement;

/// A non-empty set of enforcement modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnforcementModes {
    pub agent: bool,
    pub kubelet: bool,
    pub observe: bool,
}

impl Default for EnforcementModes {
    /// Every mode: an install that names none keeps what it had.
    fn default() -> Self {
        EnforcementModes {
            agent: true,
            kubelet: true,
            observe: true,
        }
    }
}

impl EnforcementModes {
    pub fn allows(&self, mode: Enforcement) -> bool {
        match mode {
            Enforcement::Agent => self.agent,
            Enforcement::Kubelet => self.kubelet,
            Enforcement::Observe => self.observe,
        }
    }

    /// Why a policy's mode is refused, or None when the install allows it.
    pub fn refusal(&self, mode: Enforcement) -> Option<String> {
        (!self.allows(mode)).then(|| {
            format!(
                "enforcement {mode:?} is not installed: the agents are deployed for {self} only (the chart's agent.enforcementModes, the controller's --agent-enforcement-modes)"
            )
        })
    }
}

impl fmt::Display for EnforcementModes {
    /// `Agent,Observe`, in the API's order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = [
            (self.agent, "Agent"),
            (self.kubelet, "Kubelet"),
            (self.observe, "Observe"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| *name)
        .collect();
        f.write_str(&names.join(","))
    }
}

impl FromStr for EnforcementModes {
    type Err = String;

    /// A comma-separated list of the API's names (`Agent,Observe`); at least one.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut modes = EnforcementModes {
            agent: false,
            kubelet: false,
            observe: false,
        };
        for name in s.split(',').map(str::trim) {
            match name {
                "Agent" => modes.agent = true,
                "Kubelet" => modes.kubelet = true,
                "Observe" => modes.observe = true,
                other => {
                    return Err(format!(
                    "unknown enforcement mode {other:?}: the modes are Agent, Kubelet and Observe"
                ))
                }
            }
        }
        Ok(modes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_named_as_the_api_names_them_and_a_typo_is_refused_by_name() {
        let m: EnforcementModes = "Observe, Agent".parse().unwrap();
        assert_eq!(m.to_string(), "Agent,Observe");
        assert!(m.allows(Enforcement::Agent) && !m.allows(Enforcement::Kubelet));
        assert_eq!(m.refusal(Enforcement::Observe), None);
        let refusal = m.refusal(Enforcement::Kubelet).unwrap();
        assert!(
            refusal.starts_with("enforcement Kubelet is not installed: the agents are deployed for Agent,Observe only"),
            "{refusal}"
        );
        assert_eq!(
            EnforcementModes::default().to_string(),
            "Agent,Kubelet,Observe"
        );
        for bad in ["agent", "Agent,", "", "Agent,Kubelt"] {
            let e = bad.parse::<EnforcementModes>().unwrap_err();
            assert!(e.starts_with("unknown enforcement mode"), "{bad}: {e}");
        }
    }
}
