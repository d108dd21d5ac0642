//! The kubelet's own rules, in one place: which version a node runs and what that
//! changes ([`version`]), whether it writes Memory QoS values itself ([`writes`]), its
//! hard eviction threshold ([`eviction`]) and the drop-in that asks it to enforce
//! ([`dropin`]).

pub mod defaults;
pub mod dropin;
pub mod eviction;
pub mod gates;
pub mod version;
pub mod writes;
