use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Usage {
    Table,
    WebSearches,
}

/// The searches a provider-run search tool made in a call: each bills a fee
/// beside the tokens, so a reprice needs the count, not only the charge.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Usage::Table)
                    .add_column(
                        ColumnDef::new(Usage::WebSearches)
                            .big_integer()
                            .not_null()
                            .default(0),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Usage::Table)
                    .drop_column(Usage::WebSearches)
                    .to_owned(),
            )
            .await
    }
}
