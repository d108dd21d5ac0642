//! The write path: how the controller's writes are retried and backed off, which
//! failures it reports and under which field managers it writes.

pub mod backoff;
pub mod failures;
pub(crate) mod field_managers;
pub(crate) mod retries;
