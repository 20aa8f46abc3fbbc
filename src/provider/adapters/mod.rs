//! Request and response mapping per provider kind.

pub mod openai;
