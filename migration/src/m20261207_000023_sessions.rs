use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Usage {
    Table,
    Session,
}

/// The agent run (session) a row's call belonged to: spend reports group by it.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Usage::Table)
                    .add_column(ColumnDef::new(Usage::Session).string().null())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Usage::Table)
                    .drop_column(Usage::Session)
                    .to_owned(),
            )
            .await
    }
}
