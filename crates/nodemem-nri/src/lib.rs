//! The Node Resource Interface (containerd/nri) as a plugin speaks it: a Unix socket
//! the runtime listens on, multiplexed ([`mux`]) into the plugin service (the runtime
//! calls the plugin) and the runtime service (the plugin registers), ttrpc on each.
//!
//! [`session::connect`] registers a [`Plugin`] and serves it until the runtime goes
//! away; the plugin answers in NRI's own messages ([`api`]). This crate knows pods and
//! containers as NRI names them, nothing of what a plugin decides.

pub mod api;
pub mod events;
pub mod mux;
pub mod service;
pub mod session;

pub use events::Events;
pub use service::Plugin;
pub use session::{connect, ConnectError, Registration, Session};

/// Where containerd and CRI-O listen for external plugins unless configured otherwise.
pub const DEFAULT_SOCKET: &str = "/var/run/nri/nri.sock";
