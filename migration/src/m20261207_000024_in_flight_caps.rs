use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Tenants {
    Table,
    MaxInFlight,
}

#[derive(DeriveIden)]
enum ApiKeys {
    Table,
    MaxInFlight,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // Calls in flight at once: a tenant's override of its tier's cap, and
        // a key's own; null keeps the tier's (or no cap for a key).
        manager
            .alter_table(
                Table::alter()
                    .table(Tenants::Table)
                    .add_column(ColumnDef::new(Tenants::MaxInFlight).integer().null())
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(ApiKeys::Table)
                    .add_column(ColumnDef::new(ApiKeys::MaxInFlight).integer().null())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(ApiKeys::Table)
                    .drop_column(ApiKeys::MaxInFlight)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Tenants::Table)
                    .drop_column(Tenants::MaxInFlight)
                    .to_owned(),
            )
            .await
    }
}
