//! Logs on stderr for the long-running processes (agent and controller).

/// Logs on stderr: human text, or one JSON object per line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Logs on stderr (text, colored on a terminal, or JSON), filtered by RUST_LOG (info
/// by default).
pub fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Text => logs.try_init(),
        LogFormat::Json => logs.json().try_init(),
    };
}
