use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Tenants {
    Table,
    Prompts,
    PromptBreakpoints,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // A tenant's prompts by route (`*`: every route), as a JSON object,
        // and its choice of cache breakpoints (`auto`, `on`, `off`; null:
        // auto). One column per statement: SQLite alters one at a time.
        manager
            .alter_table(
                Table::alter()
                    .table(Tenants::Table)
                    .add_column(ColumnDef::new(Tenants::Prompts).text().null())
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Tenants::Table)
                    .add_column(ColumnDef::new(Tenants::PromptBreakpoints).string().null())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [Tenants::PromptBreakpoints, Tenants::Prompts] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Tenants::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
