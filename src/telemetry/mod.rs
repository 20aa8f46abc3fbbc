//! Metrics, logs and traces.

pub mod handles;
pub mod logging;
pub mod metrics;
pub mod traces;
pub mod zeros;
