//! Request and response mapping per provider kind.

pub mod anthropic;
pub mod openai;
