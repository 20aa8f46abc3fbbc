//! Schema migrations, the same on SQLite and PostgreSQL.

pub use sea_orm_migration::prelude::*;

mod m20261130_000001_create_tenants;
mod m20261130_000002_create_api_keys;
mod m20261130_000003_create_usage;
mod m20261130_000004_budget_scopes;
mod m20261130_000005_token_limits;
mod m20261130_000006_store_policy;
mod m20261130_000007_usage_totals;
mod m20261201_000008_usage_api;
mod m20261202_000009_key_expiry;
mod m20261202_000010_end_users;
mod m20261202_000011_end_user_limits;
mod m20261202_000012_credits;
mod m20261202_000013_budget_periods;
mod m20261202_000014_report_deliveries;
mod m20261202_000015_cache_sources;
mod m20261203_000016_tenant_prompts;
mod m20261203_000017_plans;
mod m20261203_000018_usage_retention;
mod m20261203_000019_audit_payloads;
mod m20261205_000020_cache_usage_index;
mod m20261206_000021_web_searches;
mod m20261206_000022_stored_responses;
mod m20261207_000023_sessions;
mod m20261207_000024_in_flight_caps;
mod m20261207_000025_bill_lines;
mod m20261207_000026_tenant_alerts;
mod m20261207_000027_route_grants;
mod m20261207_000028_period_closes;
mod m20261207_000029_credit_grants;
mod m20261207_000030_export_outbox;
mod m20261207_000031_reprice_adjustments;

pub use m20261203_000018_usage_retention::partition_name;
pub use m20261205_000020_cache_usage_index::{CACHE_USAGE_INDEX, CACHE_USAGE_ROWS};

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261130_000001_create_tenants::Migration),
            Box::new(m20261130_000002_create_api_keys::Migration),
            Box::new(m20261130_000003_create_usage::Migration),
            Box::new(m20261130_000004_budget_scopes::Migration),
            Box::new(m20261130_000005_token_limits::Migration),
            Box::new(m20261130_000006_store_policy::Migration),
            Box::new(m20261130_000007_usage_totals::Migration),
            Box::new(m20261201_000008_usage_api::Migration),
            Box::new(m20261202_000009_key_expiry::Migration),
            Box::new(m20261202_000010_end_users::Migration),
            Box::new(m20261202_000011_end_user_limits::Migration),
            Box::new(m20261202_000012_credits::Migration),
            Box::new(m20261202_000013_budget_periods::Migration),
            Box::new(m20261202_000014_report_deliveries::Migration),
            Box::new(m20261202_000015_cache_sources::Migration),
            Box::new(m20261203_000016_tenant_prompts::Migration),
            Box::new(m20261203_000017_plans::Migration),
            Box::new(m20261203_000018_usage_retention::Migration),
            Box::new(m20261203_000019_audit_payloads::Migration),
            Box::new(m20261205_000020_cache_usage_index::Migration),
            Box::new(m20261206_000021_web_searches::Migration),
            Box::new(m20261206_000022_stored_responses::Migration),
            Box::new(m20261207_000023_sessions::Migration),
            Box::new(m20261207_000024_in_flight_caps::Migration),
            Box::new(m20261207_000025_bill_lines::Migration),
            Box::new(m20261207_000026_tenant_alerts::Migration),
            Box::new(m20261207_000027_route_grants::Migration),
            Box::new(m20261207_000028_period_closes::Migration),
            Box::new(m20261207_000029_credit_grants::Migration),
            Box::new(m20261207_000030_export_outbox::Migration),
            Box::new(m20261207_000031_reprice_adjustments::Migration),
        ]
    }
}
