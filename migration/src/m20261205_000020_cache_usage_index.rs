use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, Statement};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The rows that read or wrote a provider's prompt cache, by time: the
/// prompt-cache review sums only these, every few minutes, over a day. Without
/// it each review read every row of the day (the same on SQLite and
/// PostgreSQL, where a partitioned table gets it on each partition).
pub const CACHE_USAGE_INDEX: &str = "idx_usage_cache_time";

/// The rows the index holds; the review's filter names the same expression,
/// with literals, so that the planner can prove it implies this one.
pub const CACHE_USAGE_ROWS: &str = "cache_write_tokens > 0 OR cached_tokens > 0";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        db.execute(Statement::from_string(
            db.get_database_backend(),
            format!(
                "CREATE INDEX IF NOT EXISTS {CACHE_USAGE_INDEX} ON usage (created_at_ms) \
                 WHERE {CACHE_USAGE_ROWS}"
            ),
        ))
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        db.execute(Statement::from_string(
            db.get_database_backend(),
            format!("DROP INDEX IF EXISTS {CACHE_USAGE_INDEX}"),
        ))
        .await?;
        Ok(())
    }
}
