use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum ApiKeys {
    Table,
    MonthlyBudgetNanos,
}

#[derive(DeriveIden)]
enum FeatureBudgets {
    Table,
    TenantId,
    Feature,
    MonthlyBudgetNanos,
    UpdatedAtMs,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // A key's own monthly budget inside its tenant's.
        manager
            .alter_table(
                Table::alter()
                    .table(ApiKeys::Table)
                    .add_column(ColumnDef::new(ApiKeys::MonthlyBudgetNanos).big_integer())
                    .to_owned(),
            )
            .await?;
        // A feature's (X-Tollgate-Feature) monthly budget inside its tenant's.
        manager
            .create_table(
                Table::create()
                    .table(FeatureBudgets::Table)
                    .col(ColumnDef::new(FeatureBudgets::TenantId).string().not_null())
                    .col(ColumnDef::new(FeatureBudgets::Feature).string().not_null())
                    .col(
                        ColumnDef::new(FeatureBudgets::MonthlyBudgetNanos)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(FeatureBudgets::UpdatedAtMs)
                            .big_integer()
                            .not_null(),
                    )
                    .primary_key(
                        Index::create()
                            .col(FeatureBudgets::TenantId)
                            .col(FeatureBudgets::Feature),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(FeatureBudgets::Table).to_owned())
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(ApiKeys::Table)
                    .drop_column(ApiKeys::MonthlyBudgetNanos)
                    .to_owned(),
            )
            .await
    }
}
