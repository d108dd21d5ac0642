//! Flag values more than one command takes (`nodemem agent` and `nodemem simulate`).

use nodemem_model::numa::Scope;

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
