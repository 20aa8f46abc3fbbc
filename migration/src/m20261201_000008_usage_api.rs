use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Usage {
    Table,
    Api,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // The door a row's request came in by; every row before it came by chat.
        manager
            .alter_table(
                Table::alter()
                    .table(Usage::Table)
                    .add_column(
                        ColumnDef::new(Usage::Api)
                            .string()
                            .not_null()
                            .default("chat"),
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
                    .drop_column(Usage::Api)
                    .to_owned(),
            )
            .await
    }
}
