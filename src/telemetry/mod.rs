//! Metrics and logs.

pub mod handles;
pub mod logging;
pub mod metrics;
pub mod zeros;
