use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Tenants {
    Table,
    Id,
    Name,
    Tier,
    RpmLimit,
    MonthlyBudgetNanos,
    BudgetMode,
    DefaultMaxTokens,
    AllowedRoutes,
    CreatedAtMs,
    UpdatedAtMs,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Tenants::Table)
                    .col(
                        ColumnDef::new(Tenants::Id)
                            .string()
                            .not_null()
                            .primary_key(),
                    )
                    .col(ColumnDef::new(Tenants::Name).string().not_null())
                    .col(ColumnDef::new(Tenants::Tier).string().not_null())
                    .col(ColumnDef::new(Tenants::RpmLimit).integer())
                    .col(ColumnDef::new(Tenants::MonthlyBudgetNanos).big_integer())
                    .col(ColumnDef::new(Tenants::BudgetMode).string().not_null())
                    .col(ColumnDef::new(Tenants::DefaultMaxTokens).integer())
                    .col(ColumnDef::new(Tenants::AllowedRoutes).string())
                    .col(
                        ColumnDef::new(Tenants::CreatedAtMs)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(Tenants::UpdatedAtMs)
                            .big_integer()
                            .not_null(),
                    )
                    .to_owned(),
            )
            .await?;
        // Replicas poll for tenants changed since their last look.
        manager
            .create_index(
                Index::create()
                    .name("idx_tenants_updated")
                    .table(Tenants::Table)
                    .col(Tenants::UpdatedAtMs)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Tenants::Table).to_owned())
            .await
    }
}
