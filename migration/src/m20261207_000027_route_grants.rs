use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Tenants {
    Table,
    GrantedRoutes,
    RoutePins,
}

/// Routes granted beyond a tenant's tier, and a tenant's route pins (a
/// route answered by another for this tenant alone, to roll a change out
/// tenant by tenant). SQLite alters one column per statement.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [Tenants::GrantedRoutes, Tenants::RoutePins] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Tenants::Table)
                        .add_column(ColumnDef::new(column).text().null())
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [Tenants::GrantedRoutes, Tenants::RoutePins] {
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
