//! What a command leaves behind when it ran: its output, problems for stderr, and the
//! exit code. Bad input is a [`crate::error::CliError`] instead.

/// What a command leaves: its output, problems for stderr, and the exit code.
#[derive(Debug, Default)]
pub struct Outcome {
    pub stdout: String,
    pub stderr: Vec<String>,
    pub code: u8,
}

impl Outcome {
    pub fn ok(stdout: String) -> Self {
        Outcome {
            stdout,
            ..Outcome::default()
        }
    }
}
