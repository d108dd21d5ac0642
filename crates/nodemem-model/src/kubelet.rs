//! The kubelet's own rules, in one place: which version a node runs and what that
//! changes ([`version`]), whether it writes Memory QoS values itself ([`writes`]), its
//! hard eviction threshold ([`eviction`]), its defaults and gates. The drop-in that
//! asks it to enforce a node's settings is the node's
//! ([`crate::node::kubelet_dropin`]): it reads the settings whole.

pub mod defaults;
pub mod eviction;
pub mod gates;
pub mod version;
pub mod writes;
