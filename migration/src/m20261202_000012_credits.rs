use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Credits {
    Table,
    Id,
    TenantId,
    KeyId,
    AmountNanos,
    IdempotencyKey,
    AddedBy,
    Reason,
    CreatedAtMs,
}

#[derive(DeriveIden)]
enum Tenants {
    Table,
    OnCredits,
}

#[derive(DeriveIden)]
enum ApiKeys {
    Table,
    OnCredits,
}

/// Lifetime spend per tenant and per key, from the rows already written: a
/// balance is its top-ups less this, so it must count every row ever.
const BACKFILL: [&str; 2] = [
    "INSERT INTO usage_totals (tenant_id, kind, period, scope, charged_nanos, tokens) \
     SELECT tenant_id, 'tenant_lifetime', 'lifetime', '', SUM(charged_nanos), SUM(prompt_tokens + completion_tokens) \
     FROM usage GROUP BY tenant_id",
    "INSERT INTO usage_totals (tenant_id, kind, period, scope, charged_nanos, tokens) \
     SELECT tenant_id, 'key_lifetime', 'lifetime', key_id, SUM(charged_nanos), SUM(prompt_tokens + completion_tokens) \
     FROM usage GROUP BY tenant_id, key_id",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // Every top-up of a prepaid balance: the balance is always their sum
        // less the ledger's spend. `key_id` is empty for the tenant's own.
        manager
            .create_table(
                Table::create()
                    .table(Credits::Table)
                    .col(
                        ColumnDef::new(Credits::Id)
                            .big_integer()
                            .not_null()
                            .auto_increment()
                            .primary_key(),
                    )
                    .col(ColumnDef::new(Credits::TenantId).string().not_null())
                    .col(ColumnDef::new(Credits::KeyId).string().not_null())
                    .col(
                        ColumnDef::new(Credits::AmountNanos)
                            .big_integer()
                            .not_null(),
                    )
                    .col(ColumnDef::new(Credits::IdempotencyKey).string().not_null())
                    .col(ColumnDef::new(Credits::AddedBy).string().not_null())
                    .col(ColumnDef::new(Credits::Reason).string().not_null())
                    .col(
                        ColumnDef::new(Credits::CreatedAtMs)
                            .big_integer()
                            .not_null(),
                    )
                    .to_owned(),
            )
            .await?;
        // A repeated top-up (a retried POST) finds the first one.
        manager
            .create_index(
                Index::create()
                    .name("credits_idempotency")
                    .table(Credits::Table)
                    .col(Credits::TenantId)
                    .col(Credits::IdempotencyKey)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Tenants::Table)
                    .add_column(
                        ColumnDef::new(Tenants::OnCredits)
                            .boolean()
                            .not_null()
                            .default(false),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(ApiKeys::Table)
                    .add_column(
                        ColumnDef::new(ApiKeys::OnCredits)
                            .boolean()
                            .not_null()
                            .default(false),
                    )
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        for statement in BACKFILL {
            db.execute_unprepared(statement).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        db.execute_unprepared(
            "DELETE FROM usage_totals WHERE kind IN ('tenant_lifetime', 'key_lifetime')",
        )
        .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(ApiKeys::Table)
                    .drop_column(ApiKeys::OnCredits)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Tenants::Table)
                    .drop_column(Tenants::OnCredits)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(Table::drop().table(Credits::Table).to_owned())
            .await
    }
}
