use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Tenants {
    Table,
    AuditPayloads,
}

#[derive(DeriveIden)]
enum AuditPayloads {
    Table,
    Id,
    RequestId,
    TenantId,
    KeyId,
    Api,
    Status,
    Cache,
    RequestBody,
    ResponseBody,
    Truncated,
    CreatedAtMs,
}

/// Audit payloads: a tenant's opt-in, and the bodies of its calls.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Tenants::Table)
                    .add_column(
                        ColumnDef::new(Tenants::AuditPayloads)
                            .boolean()
                            .not_null()
                            .default(false),
                    )
                    .to_owned(),
            )
            .await?;
        let text = |c: AuditPayloads| ColumnDef::new(c).string().not_null().to_owned();
        let body = |c: AuditPayloads| ColumnDef::new(c).text().not_null().to_owned();
        manager
            .create_table(
                Table::create()
                    .table(AuditPayloads::Table)
                    .col(
                        ColumnDef::new(AuditPayloads::Id)
                            .big_integer()
                            .not_null()
                            .auto_increment()
                            .primary_key(),
                    )
                    .col(text(AuditPayloads::RequestId))
                    .col(text(AuditPayloads::TenantId))
                    .col(text(AuditPayloads::KeyId))
                    .col(text(AuditPayloads::Api))
                    .col(ColumnDef::new(AuditPayloads::Status).integer().not_null())
                    .col(ColumnDef::new(AuditPayloads::Cache).string().null())
                    .col(body(AuditPayloads::RequestBody))
                    .col(body(AuditPayloads::ResponseBody))
                    .col(
                        ColumnDef::new(AuditPayloads::Truncated)
                            .boolean()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(AuditPayloads::CreatedAtMs)
                            .big_integer()
                            .not_null(),
                    )
                    .to_owned(),
            )
            .await?;
        for (name, columns) in [
            (
                "idx_audit_tenant_time",
                vec![AuditPayloads::TenantId, AuditPayloads::CreatedAtMs],
            ),
            ("idx_audit_time", vec![AuditPayloads::CreatedAtMs]),
        ] {
            let mut index = Index::create();
            index.name(name).table(AuditPayloads::Table);
            for column in columns {
                index.col(column);
            }
            manager.create_index(index).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(AuditPayloads::Table).to_owned())
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Tenants::Table)
                    .drop_column(Tenants::AuditPayloads)
                    .to_owned(),
            )
            .await
    }
}
