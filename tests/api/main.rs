//! The one integration test binary: real HTTP against the in-project fake upstream.
//! Every module is `cfg(test)` (always so here), which makes it test code to
//! clippy: its helpers, like its tests, may unwrap and panic.

#[cfg(test)]
mod support;

#[cfg(test)]
mod admin;
#[cfg(test)]
mod admin_listen;
#[cfg(test)]
mod agents;
#[cfg(test)]
mod anthropic;
#[cfg(test)]
mod audit;
#[cfg(test)]
mod auth;
#[cfg(test)]
mod auth_flood;
#[cfg(test)]
mod bills;
#[cfg(test)]
mod budget;
#[cfg(test)]
mod cache;
#[cfg(test)]
mod ceiling;
#[cfg(test)]
mod chat;
#[cfg(test)]
mod costs;
#[cfg(test)]
mod credits;
#[cfg(test)]
mod dashboards;
#[cfg(test)]
mod dated_prices;
#[cfg(test)]
mod differential;
#[cfg(test)]
mod embeddings;
#[cfg(test)]
mod end_users;
#[cfg(test)]
mod errors;
#[cfg(test)]
mod export;
#[cfg(test)]
mod failover;
#[cfg(test)]
mod fleet_limit;
#[cfg(test)]
mod grants;
#[cfg(test)]
mod healthcheck;
#[cfg(test)]
mod holds;
#[cfg(test)]
mod in_flight;
#[cfg(test)]
mod invoices;
#[cfg(test)]
mod journal;
#[cfg(test)]
mod ledger;
#[cfg(test)]
mod lifecycle;
#[cfg(test)]
mod messages;
#[cfg(test)]
mod metrics;
#[cfg(test)]
mod month_checks;
#[cfg(test)]
mod openapi;
#[cfg(test)]
mod period_closes;
#[cfg(test)]
mod periods;
#[cfg(test)]
mod plans;
#[cfg(test)]
mod prompt_prefix;
#[cfg(test)]
mod rate_alerts;
#[cfg(test)]
mod rate_limit;
#[cfg(test)]
mod redis_cluster;
#[cfg(test)]
mod resilience;
#[cfg(test)]
mod responses;
#[cfg(test)]
mod retention;
#[cfg(test)]
mod route_access;
#[cfg(test)]
mod sdk;
#[cfg(test)]
mod semantic_cache;
#[cfg(test)]
mod sessions;
#[cfg(test)]
mod shared_quota;
#[cfg(test)]
mod storage;
#[cfg(test)]
mod stored_responses;
#[cfg(test)]
mod streaming;
#[cfg(test)]
mod tenant_actor;
#[cfg(test)]
mod tenant_alerts;
#[cfg(test)]
mod traces;
#[cfg(test)]
mod upstream_tls;
