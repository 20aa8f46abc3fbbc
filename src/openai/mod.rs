//! OpenAI wire types: what the gateway must read of a chat request, and the
//! model list. Everything else in a body passes through untouched.

pub mod chat;
pub mod chunk;
pub mod fields;
pub mod models;
pub mod responses;
pub mod splice;
pub mod tool_names;
