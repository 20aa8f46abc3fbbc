//! Tollgate: a multi-tenant LLM gateway with strict budgets.
#![forbid(unsafe_code)]

pub mod admin;
pub mod anthropic;
pub mod api;
pub mod app;
pub mod arbiter;
pub mod audit;
pub mod auth;
pub mod bill;
pub mod cache;
pub mod calendar;
pub mod cli;
pub mod clock;
pub mod config;
pub mod directory;
pub mod error;
pub mod fields;
pub mod ids;
pub mod journal;
pub mod ledger;
pub mod money;
pub mod openai;
pub mod period;
pub mod pipeline;
pub mod pricing;
pub mod probe;
pub mod prompts;
pub mod provider;
pub mod reload;
pub mod routing;
pub mod state;
pub mod storage;
pub mod stored;
pub mod telemetry;
pub mod tenant;
pub mod tokenize;
