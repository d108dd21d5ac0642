//! The controller's server-side apply field managers: one name per kind of write,
//! stable across versions (a renamed manager would leave the old one owning fields).

/// The field manager of everything the controller writes.
pub const FIELD_MANAGER: &str = "nodemem-controller";
/// The field manager of the handoff finalizer on a policy (a manager of its own, so
/// that applying the finalizer never touches what `FIELD_MANAGER` owns).
pub const FINALIZER_MANAGER: &str = "nodemem-controller-handoff";
