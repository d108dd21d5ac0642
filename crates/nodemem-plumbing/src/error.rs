//! Errors the CLI reports: one line per problem, never a panic or a backtrace.

use std::fmt;

/// A failed command: every problem found, each on its own line.
#[derive(Debug)]
pub struct CliError {
    pub problems: Vec<String>,
}

impl CliError {
    pub fn one(problem: impl Into<String>) -> Self {
        CliError {
            problems: vec![problem.into()],
        }
    }

    pub fn many(problems: Vec<String>) -> Self {
        CliError { problems }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.problems.join("\n"))
    }
}

impl std::error::Error for CliError {}
