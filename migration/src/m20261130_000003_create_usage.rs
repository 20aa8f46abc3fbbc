use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
#[expect(clippy::enum_variant_names, reason = "the column is named usage_kind")]
enum Usage {
    Table,
    Id,
    EventId,
    RequestId,
    ClientRequestId,
    TraceId,
    TenantId,
    KeyId,
    Feature,
    Route,
    Provider,
    Model,
    Attempt,
    Status,
    UpstreamStatus,
    PromptTokens,
    CachedTokens,
    CacheWriteTokens,
    CompletionTokens,
    UsageKind,
    ReservedNanos,
    ChargedNanos,
    PriceVersion,
    LatencyMs,
    TtftMs,
    Error,
    CreatedAtMs,
    Day,
    Period,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let big = |c: Usage| ColumnDef::new(c).big_integer().not_null().to_owned();
        let text = |c: Usage| ColumnDef::new(c).string().not_null().to_owned();
        manager
            .create_table(
                Table::create()
                    .table(Usage::Table)
                    .col(
                        ColumnDef::new(Usage::Id)
                            .big_integer()
                            .not_null()
                            .auto_increment()
                            .primary_key(),
                    )
                    .col(
                        ColumnDef::new(Usage::EventId)
                            .string()
                            .not_null()
                            .unique_key(),
                    )
                    .col(text(Usage::RequestId))
                    .col(ColumnDef::new(Usage::ClientRequestId).string())
                    .col(ColumnDef::new(Usage::TraceId).string())
                    .col(text(Usage::TenantId))
                    .col(text(Usage::KeyId))
                    .col(text(Usage::Feature))
                    .col(text(Usage::Route))
                    .col(text(Usage::Provider))
                    .col(text(Usage::Model))
                    .col(ColumnDef::new(Usage::Attempt).integer().not_null())
                    .col(text(Usage::Status))
                    .col(ColumnDef::new(Usage::UpstreamStatus).integer())
                    .col(big(Usage::PromptTokens))
                    .col(big(Usage::CachedTokens))
                    .col(big(Usage::CacheWriteTokens))
                    .col(big(Usage::CompletionTokens))
                    .col(text(Usage::UsageKind))
                    .col(big(Usage::ReservedNanos))
                    .col(big(Usage::ChargedNanos))
                    .col(text(Usage::PriceVersion))
                    .col(big(Usage::LatencyMs))
                    .col(ColumnDef::new(Usage::TtftMs).big_integer())
                    .col(ColumnDef::new(Usage::Error).text())
                    .col(big(Usage::CreatedAtMs))
                    .col(text(Usage::Day))
                    .col(text(Usage::Period))
                    .to_owned(),
            )
            .await?;
        // "This tenant, this month" (budget load, reports) and "by feature".
        for (name, cols) in [
            (
                "idx_usage_tenant_time",
                vec![Usage::TenantId, Usage::CreatedAtMs],
            ),
            (
                "idx_usage_tenant_period",
                vec![Usage::TenantId, Usage::Period],
            ),
            (
                "idx_usage_tenant_feature",
                vec![Usage::TenantId, Usage::Feature, Usage::CreatedAtMs],
            ),
            ("idx_usage_time", vec![Usage::CreatedAtMs]),
        ] {
            let mut index = Index::create();
            index.name(name).table(Usage::Table);
            for col in cols {
                index.col(col);
            }
            manager.create_index(index.clone()).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Usage::Table).to_owned())
            .await
    }
}
