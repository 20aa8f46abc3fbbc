use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend, Statement};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum UsageDaily {
    Table,
    TenantId,
    Day,
    SpanStartMs,
    KeyId,
    Feature,
    EndUser,
    Api,
    Route,
    Provider,
    Model,
    Status,
    Plan,
    Rows,
    Requests,
    PromptTokens,
    CachedTokens,
    CacheWriteTokens,
    CompletionTokens,
    ReservedNanos,
    ChargedNanos,
    CostNanos,
    Pending,
}

#[derive(DeriveIden)]
enum UsageRollups {
    Table,
    Period,
    LastId,
}

#[derive(DeriveIden)]
enum Usage {
    Table,
    RequestId,
}

/// The index a roll-up finds a request's last row by.
const REQUEST_INDEX: &str = "idx_usage_request";

/// Indexes of `usage`, recreated on the partitioned table (PostgreSQL).
const USAGE_INDEXES: [(&str, &str); 6] = [
    ("idx_usage_tenant_time", "tenant_id, created_at_ms"),
    ("idx_usage_tenant_period", "tenant_id, period"),
    (
        "idx_usage_tenant_feature",
        "tenant_id, feature, created_at_ms",
    ),
    ("idx_usage_time", "created_at_ms"),
    (
        "idx_usage_tenant_end_user",
        "tenant_id, end_user, created_at_ms",
    ),
    (REQUEST_INDEX, "request_id"),
];

/// Retention: the daily aggregates detail rows are rolled up into, the
/// progress of a month's roll-up, and on PostgreSQL `usage` partitioned by
/// month (`period`), so a month past retention is dropped, not deleted row
/// by row. A row's event id stays unique within its month, which is the
/// month of its `created_at_ms`, fixed at the event: a replay still meets
/// its row.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.create_table(daily_table()).await?;
        manager
            .create_table(
                Table::create()
                    .table(UsageRollups::Table)
                    .col(
                        ColumnDef::new(UsageRollups::Period)
                            .string()
                            .not_null()
                            .primary_key(),
                    )
                    .col(
                        ColumnDef::new(UsageRollups::LastId)
                            .big_integer()
                            .not_null(),
                    )
                    .to_owned(),
            )
            .await?;
        if manager.get_database_backend() == DbBackend::Postgres {
            return partition_usage(manager.get_connection()).await;
        }
        manager
            .create_index(
                Index::create()
                    .name(REQUEST_INDEX)
                    .table(Usage::Table)
                    .col(Usage::RequestId)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // The partitioned table stays: its rows are the same rows.
        manager
            .drop_table(Table::drop().table(UsageRollups::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(UsageDaily::Table).to_owned())
            .await
    }
}

fn daily_table() -> TableCreateStatement {
    let text = |c: UsageDaily| ColumnDef::new(c).string().not_null().to_owned();
    let number = |c: UsageDaily| ColumnDef::new(c).big_integer().not_null().to_owned();
    let keys = [
        UsageDaily::TenantId,
        UsageDaily::Day,
        UsageDaily::SpanStartMs,
        UsageDaily::KeyId,
        UsageDaily::Feature,
        UsageDaily::EndUser,
        UsageDaily::Api,
        UsageDaily::Route,
        UsageDaily::Provider,
        UsageDaily::Model,
        UsageDaily::Status,
        UsageDaily::Plan,
    ];
    let mut table = Table::create();
    table.table(UsageDaily::Table);
    let mut primary = Index::create();
    for key in keys {
        let column = if matches!(key, UsageDaily::SpanStartMs) {
            number(key)
        } else {
            text(key)
        };
        primary.col(Alias::new(column.get_column_name()));
        table.col(column);
    }
    for value in [
        UsageDaily::Rows,
        UsageDaily::Requests,
        UsageDaily::PromptTokens,
        UsageDaily::CachedTokens,
        UsageDaily::CacheWriteTokens,
        UsageDaily::CompletionTokens,
        UsageDaily::ReservedNanos,
        UsageDaily::ChargedNanos,
        UsageDaily::CostNanos,
    ] {
        table.col(number(value));
    }
    table
        .col(ColumnDef::new(UsageDaily::Pending).boolean().not_null())
        .primary_key(&mut primary)
        .to_owned()
}

/// Moves `usage` onto a table partitioned by month: a partition per month
/// present, a default one for rows of a month without its own yet.
async fn partition_usage<C: ConnectionTrait>(db: &C) -> Result<(), DbErr> {
    let run = |sql: String| async move {
        db.execute(Statement::from_string(DbBackend::Postgres, sql))
            .await
            .map(|_| ())
    };
    run("ALTER TABLE usage RENAME TO usage_unpartitioned".to_owned()).await?;
    for (name, _) in USAGE_INDEXES {
        run(format!("DROP INDEX IF EXISTS {name}")).await?;
    }
    run(
        "CREATE TABLE usage (LIKE usage_unpartitioned INCLUDING DEFAULTS) \
         PARTITION BY LIST (period)"
            .to_owned(),
    )
    .await?;
    run("ALTER TABLE usage ADD CONSTRAINT usage_id_period_key PRIMARY KEY (id, period)".to_owned())
        .await?;
    run(
        "ALTER TABLE usage ADD CONSTRAINT usage_event_period_key UNIQUE (event_id, period)"
            .to_owned(),
    )
    .await?;
    for (name, columns) in USAGE_INDEXES {
        run(format!("CREATE INDEX {name} ON usage ({columns})")).await?;
    }
    run("ALTER SEQUENCE usage_id_seq OWNED BY usage.id".to_owned()).await?;
    run("CREATE TABLE usage_default PARTITION OF usage DEFAULT".to_owned()).await?;
    let months = db
        .query_all(Statement::from_string(
            DbBackend::Postgres,
            "SELECT DISTINCT period FROM usage_unpartitioned",
        ))
        .await?;
    for month in months {
        let period: String = month.try_get("", "period")?;
        if let Some(name) = partition_name(&period) {
            run(format!(
                "CREATE TABLE {name} PARTITION OF usage FOR VALUES IN ('{period}')"
            ))
            .await?;
        }
    }
    run("INSERT INTO usage SELECT * FROM usage_unpartitioned".to_owned()).await?;
    run("DROP TABLE usage_unpartitioned".to_owned()).await
}

/// `usage_p2026_11` for `2026-11`; `None` for text that is not a month.
pub fn partition_name(period: &str) -> Option<String> {
    let (year, month) = period.split_once('-')?;
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    (digits(year, 4) && digits(month, 2)).then(|| format!("usage_p{year}_{month}"))
}
