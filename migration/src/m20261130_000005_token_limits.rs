use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Tenants {
    Table,
    TpmLimit,
    DailyTokenLimit,
    MonthlyTokenLimit,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // Per-tenant overrides of the tier's token limits; one column per statement (SQLite).
        for column in [
            Tenants::TpmLimit,
            Tenants::DailyTokenLimit,
            Tenants::MonthlyTokenLimit,
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Tenants::Table)
                        .add_column(ColumnDef::new(column).big_integer())
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [
            Tenants::TpmLimit,
            Tenants::DailyTokenLimit,
            Tenants::MonthlyTokenLimit,
        ] {
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
