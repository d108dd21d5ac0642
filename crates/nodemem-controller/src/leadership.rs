//! Which replica leads and how the controller steps aside: the Lease, the leader check
//! behind `helm test`, standing down before an uninstall and giving every node back.

pub mod check;
pub mod give_back;
pub mod lease;
pub(crate) mod stand_down;
