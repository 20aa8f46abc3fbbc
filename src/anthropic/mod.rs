//! The Messages door's wire format (Anthropic's `POST /v1/messages`): a
//! request translated into the chat body the pipeline routes and estimates,
//! and a chat answer (complete, or a stream of chunks) translated back, for
//! routes served by OpenAI-kind providers. Anthropic providers get the
//! caller's body as sent (`provider/adapters/passthrough.rs`). Pure functions
//! and one stream mapper; no HTTP here.

pub mod fields;
pub mod models;
pub mod request;
pub mod response;
pub mod stream;
