use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum EndUserLimits {
    Table,
    TenantId,
    EndUser,
    BudgetNanos,
    Period,
    Rpm,
    Blocked,
    UpdatedAtMs,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // An admin's override of the tier's end-user template, per end user.
        manager
            .create_table(
                Table::create()
                    .table(EndUserLimits::Table)
                    .col(ColumnDef::new(EndUserLimits::TenantId).string().not_null())
                    .col(ColumnDef::new(EndUserLimits::EndUser).string().not_null())
                    .col(
                        ColumnDef::new(EndUserLimits::BudgetNanos)
                            .big_integer()
                            .null(),
                    )
                    .col(ColumnDef::new(EndUserLimits::Period).string().null())
                    .col(ColumnDef::new(EndUserLimits::Rpm).integer().null())
                    .col(
                        ColumnDef::new(EndUserLimits::Blocked)
                            .boolean()
                            .not_null()
                            .default(false),
                    )
                    .col(
                        ColumnDef::new(EndUserLimits::UpdatedAtMs)
                            .big_integer()
                            .not_null(),
                    )
                    .primary_key(
                        Index::create()
                            .col(EndUserLimits::TenantId)
                            .col(EndUserLimits::EndUser),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(EndUserLimits::Table).to_owned())
            .await
    }
}
