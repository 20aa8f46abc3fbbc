use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Tenants {
    Table,
    BudgetPeriod,
}

#[derive(DeriveIden)]
enum ApiKeys {
    Table,
    BudgetPeriod,
}

#[derive(DeriveIden)]
enum FeatureBudgets {
    Table,
    Period,
}

/// What the tenant's, a key's and a feature's budget runs over: `day`,
/// `week`, `month` or `lifetime`; null (every row before this) is a month.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Tenants::Table)
                    .add_column(ColumnDef::new(Tenants::BudgetPeriod).string().null())
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(ApiKeys::Table)
                    .add_column(ColumnDef::new(ApiKeys::BudgetPeriod).string().null())
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(FeatureBudgets::Table)
                    .add_column(ColumnDef::new(FeatureBudgets::Period).string().null())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(FeatureBudgets::Table)
                    .drop_column(FeatureBudgets::Period)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(ApiKeys::Table)
                    .drop_column(ApiKeys::BudgetPeriod)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Tenants::Table)
                    .drop_column(Tenants::BudgetPeriod)
                    .to_owned(),
            )
            .await
    }
}
