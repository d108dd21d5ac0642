//! Output for people (tables) and for scripts (`-o json|yaml`).

use serde::Serialize;

use nodemem_plumbing::CliError;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    #[default]
    Table,
    Json,
    Yaml,
}

/// A memory value for people, in one format everywhere (`simulate`, `explain`, `diff`,
/// the sandbox's live view): exact binary units (`29184Mi`, `969932Ki`; nodemem's values
/// are whole pages, so a unit always divides them), `0`, or the file's word (`max`).
/// `-o json|yaml` keep bytes.
pub fn memory(value: &str) -> String {
    match value.parse::<i64>() {
        Ok(b) => nodemem_model::quantity::format_bytes(b),
        Err(_) => value.to_string(),
    }
}

/// A table in kubectl's style: no borders, upper-case headers.
pub fn table(headers: &[&str]) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::NOTHING);
    t.set_header(headers.to_vec());
    t
}

/// A table's text without the padding after each row's last column.
pub fn text(t: &comfy_table::Table) -> String {
    t.to_string()
        .lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The document for `-o json|yaml`, or the table.
pub fn render<T: Serialize>(
    format: Format,
    value: &T,
    table: impl FnOnce(&T) -> String,
) -> Result<String, CliError> {
    match format {
        Format::Table => Ok(table(value)),
        Format::Json => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(|e| CliError::one(format!("cannot render JSON: {e}"))),
        Format::Yaml => serde_yaml::to_string(value)
            .map_err(|e| CliError::one(format!("cannot render YAML: {e}"))),
    }
}
