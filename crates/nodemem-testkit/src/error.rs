//! What can go wrong in the harness.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The harness could not build or start something; the message says what and how
    /// to look further (log paths, last log lines).
    #[error("test harness: {0}")]
    Setup(String),
    /// A request to the apiserver failed.
    #[error("apiserver: {0}")]
    Api(String),
    /// A probed-free port was taken before the component bound it (retried).
    #[error("port taken: {0}")]
    PortTaken(String),
    /// The VM could not be built, booted or did not finish in time.
    #[error("vm: {0}")]
    Vm(String),
}
