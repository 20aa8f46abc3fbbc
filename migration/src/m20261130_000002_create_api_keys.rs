use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum ApiKeys {
    Table,
    Id,
    TenantId,
    Name,
    SecretHash,
    CreatedAtMs,
    RevokedAtMs,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(ApiKeys::Table)
                    .col(
                        ColumnDef::new(ApiKeys::Id)
                            .string()
                            .not_null()
                            .primary_key(),
                    )
                    .col(ColumnDef::new(ApiKeys::TenantId).string().not_null())
                    .col(ColumnDef::new(ApiKeys::Name).string())
                    .col(ColumnDef::new(ApiKeys::SecretHash).string().not_null())
                    .col(
                        ColumnDef::new(ApiKeys::CreatedAtMs)
                            .big_integer()
                            .not_null(),
                    )
                    .col(ColumnDef::new(ApiKeys::RevokedAtMs).big_integer())
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_api_keys_tenant")
                    .table(ApiKeys::Table)
                    .col(ApiKeys::TenantId)
                    .to_owned(),
            )
            .await?;
        // Replicas poll for keys revoked since their last look.
        manager
            .create_index(
                Index::create()
                    .name("idx_api_keys_revoked")
                    .table(ApiKeys::Table)
                    .col(ApiKeys::RevokedAtMs)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(ApiKeys::Table).to_owned())
            .await
    }
}
