//! The node agents as the controller deploys and watches them: their DaemonSet
//! (`daemonset`, built from the pod settings of `pod`, placed by `placement`, with the
//! privileges of the enforcement `modes`), kept applied (`upkeep`), their image
//! (`own_image`), and what keeps them from starting on a node (`blocked`).

pub mod blocked;
pub mod daemonset;
pub mod modes;
pub(crate) mod own_image;
pub mod placement;
pub mod pod;
pub(crate) mod upkeep;
