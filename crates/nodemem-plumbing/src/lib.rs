//! What every nodemem process and command shares, written once: the outcome and the
//! bad-input error of a command ([`outcome`], [`error`]), logs ([`logs`]), the
//! apiserver client ([`kubeclient`]), the `/metrics`, `/healthz` and `/readyz` server
//! ([`endpoints`]), reading the manifest files users pass ([`manifests`]) and flag
//! values more than one command takes ([`flags`]), letting go of a policy's handoff
//! finalizer ([`finalizer`]) and Events that keep their words ([`events`]).

pub mod allocator;
pub mod build_info;
pub mod endpoints;
pub mod error;
pub mod events;
pub mod finalizer;
pub mod flags;
pub mod kubeclient;
pub mod logs;
pub mod manifests;
pub mod outcome;

pub use error::CliError;
pub use outcome::Outcome;
