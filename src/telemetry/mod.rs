//! Metrics and logs.

pub mod logging;
pub mod metrics;
