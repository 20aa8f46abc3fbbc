use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum UsageTotals {
    Table,
    TenantId,
    Kind,
    Period,
    Scope,
    ChargedNanos,
    Tokens,
}

/// The totals of the rows already in `usage`, one statement per kind: the
/// table starts where the ledger is.
const BACKFILL: [&str; 4] = [
    "INSERT INTO usage_totals (tenant_id, kind, period, scope, charged_nanos, tokens) \
     SELECT tenant_id, 'tenant', period, '', SUM(charged_nanos), SUM(prompt_tokens + completion_tokens) \
     FROM usage GROUP BY tenant_id, period",
    "INSERT INTO usage_totals (tenant_id, kind, period, scope, charged_nanos, tokens) \
     SELECT tenant_id, 'key', period, key_id, SUM(charged_nanos), SUM(prompt_tokens + completion_tokens) \
     FROM usage GROUP BY tenant_id, period, key_id",
    "INSERT INTO usage_totals (tenant_id, kind, period, scope, charged_nanos, tokens) \
     SELECT tenant_id, 'feature', period, feature, SUM(charged_nanos), SUM(prompt_tokens + completion_tokens) \
     FROM usage GROUP BY tenant_id, period, feature",
    "INSERT INTO usage_totals (tenant_id, kind, period, scope, charged_nanos, tokens) \
     SELECT tenant_id, 'day', day, '', SUM(charged_nanos), SUM(prompt_tokens + completion_tokens) \
     FROM usage GROUP BY tenant_id, day",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(UsageTotals::Table)
                    .col(ColumnDef::new(UsageTotals::TenantId).string().not_null())
                    .col(ColumnDef::new(UsageTotals::Kind).string().not_null())
                    .col(ColumnDef::new(UsageTotals::Period).string().not_null())
                    .col(ColumnDef::new(UsageTotals::Scope).string().not_null())
                    .col(
                        ColumnDef::new(UsageTotals::ChargedNanos)
                            .big_integer()
                            .not_null(),
                    )
                    .col(ColumnDef::new(UsageTotals::Tokens).big_integer().not_null())
                    .primary_key(
                        Index::create()
                            .col(UsageTotals::TenantId)
                            .col(UsageTotals::Kind)
                            .col(UsageTotals::Period)
                            .col(UsageTotals::Scope),
                    )
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        for statement in BACKFILL {
            db.execute_unprepared(statement).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(UsageTotals::Table).to_owned())
            .await
    }
}
