use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Usage {
    Table,
    TenantId,
    EndUser,
    CreatedAtMs,
}

const INDEX: &str = "idx_usage_tenant_end_user";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // The end user a row was charged to; rows before it had none.
        manager
            .alter_table(
                Table::alter()
                    .table(Usage::Table)
                    .add_column(ColumnDef::new(Usage::EndUser).string().null())
                    .to_owned(),
            )
            .await?;
        // One end user's rows, for their spend report, without a tenant scan.
        manager
            .create_index(
                Index::create()
                    .name(INDEX)
                    .table(Usage::Table)
                    .col(Usage::TenantId)
                    .col(Usage::EndUser)
                    .col(Usage::CreatedAtMs)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(Index::drop().name(INDEX).table(Usage::Table).to_owned())
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Usage::Table)
                    .drop_column(Usage::EndUser)
                    .to_owned(),
            )
            .await
    }
}
