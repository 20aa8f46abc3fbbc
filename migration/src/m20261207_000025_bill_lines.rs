use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum BillLines {
    Table,
    Provider,
    Report,
    StartMs,
    EndMs,
    KeyId,
    Model,
    Item,
    Requests,
    InputTokens,
    CachedTokens,
    CacheWriteTokens,
    OutputTokens,
    AmountNanos,
    ImportedAtMs,
}

/// The lines of providers' usage and cost exports, as imported: one per
/// provider, report, time bucket and grouping, so importing a file again
/// replaces its buckets' lines instead of adding to them.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let text = |column: BillLines| ColumnDef::new(column).string().not_null().to_owned();
        let count = |column: BillLines| {
            ColumnDef::new(column)
                .big_integer()
                .not_null()
                .default(0)
                .to_owned()
        };
        manager
            .create_table(
                Table::create()
                    .table(BillLines::Table)
                    .col(text(BillLines::Provider))
                    .col(text(BillLines::Report))
                    .col(ColumnDef::new(BillLines::StartMs).big_integer().not_null())
                    .col(ColumnDef::new(BillLines::EndMs).big_integer().not_null())
                    .col(text(BillLines::KeyId))
                    .col(text(BillLines::Model))
                    .col(text(BillLines::Item))
                    .col(count(BillLines::Requests))
                    .col(count(BillLines::InputTokens))
                    .col(count(BillLines::CachedTokens))
                    .col(count(BillLines::CacheWriteTokens))
                    .col(count(BillLines::OutputTokens))
                    .col(ColumnDef::new(BillLines::AmountNanos).big_integer().null())
                    .col(
                        ColumnDef::new(BillLines::ImportedAtMs)
                            .big_integer()
                            .not_null(),
                    )
                    .primary_key(
                        Index::create()
                            .col(BillLines::Provider)
                            .col(BillLines::Report)
                            .col(BillLines::StartMs)
                            .col(BillLines::KeyId)
                            .col(BillLines::Model)
                            .col(BillLines::Item),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(BillLines::Table).to_owned())
            .await
    }
}
