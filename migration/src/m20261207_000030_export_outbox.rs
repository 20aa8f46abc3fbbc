use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum ExportOutbox {
    Table,
    Id,
    Sink,
    UsageId,
    EventId,
    TenantId,
    KeyId,
    Feature,
    EndUser,
    Model,
    Provider,
    PromptTokens,
    CachedTokens,
    CacheWriteTokens,
    CompletionTokens,
    WebSearches,
    ChargedNanos,
    CreatedAtMs,
}

#[derive(DeriveIden)]
enum ExportSinks {
    Table,
    Sink,
    Owner,
    LeaseUntilMs,
    DeliveredThrough,
    Rows,
    Nanos,
    DeliveredAtMs,
}

#[derive(DeriveIden)]
enum ExportDelivered {
    Table,
    Sink,
    Month,
    Rows,
    Nanos,
}

fn big(column: impl IntoIden) -> ColumnDef {
    ColumnDef::new(column).big_integer().not_null().to_owned()
}

fn text(column: impl IntoIden) -> ColumnDef {
    ColumnDef::new(column).string().not_null().to_owned()
}

/// The usage export: rows waiting for each sink (written with the ledger
/// rows they copy), each sink's lease and cursor, and what each sink was
/// delivered per billing month.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(ExportOutbox::Table)
                    .col(
                        ColumnDef::new(ExportOutbox::Id)
                            .big_integer()
                            .not_null()
                            .auto_increment()
                            .primary_key(),
                    )
                    .col(text(ExportOutbox::Sink))
                    .col(big(ExportOutbox::UsageId))
                    .col(text(ExportOutbox::EventId))
                    .col(text(ExportOutbox::TenantId))
                    .col(text(ExportOutbox::KeyId))
                    .col(text(ExportOutbox::Feature))
                    .col(ColumnDef::new(ExportOutbox::EndUser).string().null())
                    .col(text(ExportOutbox::Model))
                    .col(text(ExportOutbox::Provider))
                    .col(big(ExportOutbox::PromptTokens))
                    .col(big(ExportOutbox::CachedTokens))
                    .col(big(ExportOutbox::CacheWriteTokens))
                    .col(big(ExportOutbox::CompletionTokens))
                    .col(big(ExportOutbox::WebSearches))
                    .col(big(ExportOutbox::ChargedNanos))
                    .col(big(ExportOutbox::CreatedAtMs))
                    .to_owned(),
            )
            .await?;
        // A sink reads its rows in id order; a usage row is in a sink's outbox once.
        manager
            .create_index(
                Index::create()
                    .name("export_outbox_sink_usage")
                    .table(ExportOutbox::Table)
                    .col(ExportOutbox::Sink)
                    .col(ExportOutbox::UsageId)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(ExportSinks::Table)
                    .col(text(ExportSinks::Sink).primary_key().to_owned())
                    .col(ColumnDef::new(ExportSinks::Owner).string().null())
                    .col(big(ExportSinks::LeaseUntilMs))
                    .col(big(ExportSinks::DeliveredThrough))
                    .col(big(ExportSinks::Rows))
                    .col(big(ExportSinks::Nanos))
                    .col(big(ExportSinks::DeliveredAtMs))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(ExportDelivered::Table)
                    .col(text(ExportDelivered::Sink))
                    .col(text(ExportDelivered::Month))
                    .col(big(ExportDelivered::Rows))
                    .col(big(ExportDelivered::Nanos))
                    .primary_key(
                        Index::create()
                            .col(ExportDelivered::Sink)
                            .col(ExportDelivered::Month),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            ExportDelivered::Table.into_iden(),
            ExportSinks::Table.into_iden(),
            ExportOutbox::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
