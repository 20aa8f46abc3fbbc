use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Tenants {
    Table,
    Plan,
}

#[derive(DeriveIden)]
enum Usage {
    Table,
    CostNanos,
    Plan,
}

/// Billing apart from metering: a tenant's plan, and on each row the
/// provider's cost beside the tenant's charge (`charged_nanos`) and the plan
/// it was charged under. Null cost (rows before plans): the charge, which
/// was the cost. One column per statement: SQLite alters one at a time.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Tenants::Table)
                    .add_column(ColumnDef::new(Tenants::Plan).string().null())
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Usage::Table)
                    .add_column(ColumnDef::new(Usage::CostNanos).big_integer().null())
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Usage::Table)
                    .add_column(ColumnDef::new(Usage::Plan).string().null())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [Usage::Plan, Usage::CostNanos] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Usage::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .alter_table(
                Table::alter()
                    .table(Tenants::Table)
                    .drop_column(Tenants::Plan)
                    .to_owned(),
            )
            .await
    }
}
