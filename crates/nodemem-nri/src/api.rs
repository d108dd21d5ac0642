//! NRI's messages, generated from the vendored `proto/nri/v0.11.0/api.proto`.
#![allow(clippy::all, clippy::pedantic, missing_docs)]

include!(concat!(env!("OUT_DIR"), "/nri.pkg.api.v1alpha1.rs"));
