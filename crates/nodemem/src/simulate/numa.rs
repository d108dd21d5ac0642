//! `simulate --numa`: the topology file (the shared document of
//! `nodemem_api::k8s::topology`).

use std::path::Path;

use nodemem_model::numa::NumaTopology;

use nodemem_plumbing::CliError;

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
