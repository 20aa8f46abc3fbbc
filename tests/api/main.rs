//! The one integration test binary: real HTTP against the in-project fake upstream.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

mod admin;
mod admin_listen;
mod agents;
mod anthropic;
mod audit;
mod auth;
mod auth_flood;
mod budget;
mod cache;
mod ceiling;
mod chat;
mod credits;
mod dashboards;
mod dated_prices;
mod differential;
mod embeddings;
mod end_users;
mod errors;
mod failover;
mod healthcheck;
mod holds;
mod invoices;
mod journal;
mod ledger;
mod lifecycle;
mod messages;
mod metrics;
mod openapi;
mod periods;
mod plans;
mod prompt_prefix;
mod rate_limit;
mod redis_cluster;
mod resilience;

mod responses;
mod retention;
mod sdk;
mod semantic_cache;
mod sessions;
mod shared_quota;
mod storage;
mod stored_responses;
mod streaming;
mod tenant_actor;
mod traces;
