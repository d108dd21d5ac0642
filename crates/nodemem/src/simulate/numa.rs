//! `simulate --numa`: the topology file (the shared document of
//! `nodemem_api::k8s::topology`) and the topology manager scope.

use std::path::Path;

use nodemem_model::numa::{NumaTopology, Scope};

use crate::error::CliError;

/// Topology manager scope for `--topology-manager-scope` (the kubelet's
/// `topologyManagerScope`, default `container`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ScopeArg {
    #[default]
    Container,
    Pod,
}

impl From<ScopeArg> for Scope {
    fn from(s: ScopeArg) -> Self {
        match s {
            ScopeArg::Container => Scope::Container,
            ScopeArg::Pod => Scope::Pod,
        }
    }
}

/// Reads and checks a topology file; every problem is one line naming the file and
/// the path of the bad value.
pub fn read_topology(path: &Path) -> Result<NumaTopology, CliError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::one(format!("{name}: cannot read: {e}")))?;
    parse_topology(&name, &text)
}

pub fn parse_topology(name: &str, text: &str) -> Result<NumaTopology, CliError> {
    nodemem_api::k8s::parse_topology(name, text).map_err(CliError::many)
}
