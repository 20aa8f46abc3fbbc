//! Metrics, logs and traces.

pub mod handles;
pub mod json_lines;
pub mod log_writer;
pub mod logging;
pub mod metrics;
pub mod traces;
pub mod zeros;
