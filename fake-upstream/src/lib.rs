//! Fake upstreams for Tollgate's demo, integration tests and load harness: an OpenAI-compatible
//! one (chat completions, embeddings and the Responses API, in `openai`) and Anthropic's
//! Messages API (`anthropic`). Each owns a scenario language carried in the request's `model`
//! string (forced statuses, delays, flaky starts, usage shapes, stream pacing and faults); the
//! OpenAI fake adds instance-wide fault injection (latency, random errors, forced status). Both
//! capture every request and count what they answered, and run embedded in the caller's actix
//! System (`start`) or standalone until a signal (`serve`). With `agent` (a model segment, or
//! `FakeConfig::agent` for every model) they play a model in a tool loop (`agent.rs`).
//!
//! What the fakes share lives in `http` (server setup, request capture, delays, error
//! statuses), `sse` (event-stream writing and stream accounting) and `model_string` (the
//! segment grammar of the scenarios).

mod agent;
pub mod anthropic;
mod args;
mod http;
mod model_string;
mod openai;
mod sse;
mod stats;
mod tls;

use std::io;
use std::net::SocketAddr;

pub use args::FakeArgs;
pub use openai::stream::chunk_text;
pub use openai::{RunningFake, serve, start, start_tls};
pub use stats::{CapturedRequest, FakeStats};
pub use tls::FakeTls;

/// Instance-wide behaviour, applied on top of whatever the request's `model` string asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FakeConfig {
    /// Extra latency added to every chat request (on top of any `delay-…ms` segment).
    pub latency: Latency,
    /// Probability of a random 503, in parts per million (`0..=1_000_000`).
    pub error_rate_ppm: u32,
    /// When set, every chat request with a parsable body is answered with this status.
    pub forced_status: Option<u16>,
    /// Every model answers as if its string carried `agent`: a tool call while tools are
    /// offered and unanswered, then text (JSON where a schema is asked for).
    pub agent: bool,
    /// Seeds the instance's random draws (latency, random errors): two fakes started with the
    /// same seed draw the same sequence, request by request in the order they arrive.
    pub seed: Option<u64>,
}

/// Instance-wide latency model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Latency {
    #[default]
    None,
    Fixed {
        ms: u64,
    },
    /// `median_ms × exp(sigma × N(0,1))`; `sigma_milli` is sigma in thousandths.
    LogNormal {
        median_ms: u64,
        sigma_milli: u32,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum FakeError {
    #[error("invalid --error-rate {value:?}: expected a decimal between 0 and 1")]
    ErrorRate { value: String },
    #[error("invalid --latency-sigma {value:?}: expected a non-negative decimal")]
    LatencySigma { value: String },
    #[error("invalid --status {status}: expected an http status between 400 and 599")]
    Status { status: u16 },
    #[error("cannot bind the fake upstream to {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("--tls-listen and --tls-ca go together")]
    TlsFlags,
    #[error("cannot make the fake upstream's TLS certificate")]
    Tls(#[source] io::Error),
    #[error("cannot write the fake upstream's authority to {}", path.display())]
    WriteCa {
        path: std::path::PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the fake upstream server failed")]
    Server(#[source] io::Error),
}
