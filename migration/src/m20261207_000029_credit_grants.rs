use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Credits {
    Table,
    Kind,
    Priority,
    StartsAtMs,
    ExpiresAtMs,
    ClosesAtMs,
}

#[derive(DeriveIden)]
enum CreditBreakage {
    Table,
    Id,
    CreditId,
    TenantId,
    KeyId,
    AmountNanos,
    BookedAtMs,
}

/// Top-ups become grants: a kind, a priority, a start and an expiry; what
/// an expired grant left unspent is booked once as breakage.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite adds one column per ALTER TABLE.
        let columns = [
            ColumnDef::new(Credits::Kind)
                .string()
                .not_null()
                .default("paid")
                .to_owned(),
            ColumnDef::new(Credits::Priority)
                .integer()
                .not_null()
                .default(0)
                .to_owned(),
            ColumnDef::new(Credits::StartsAtMs)
                .big_integer()
                .null()
                .to_owned(),
            ColumnDef::new(Credits::ExpiresAtMs)
                .big_integer()
                .null()
                .to_owned(),
            ColumnDef::new(Credits::ClosesAtMs)
                .big_integer()
                .null()
                .to_owned(),
        ];
        for mut column in columns {
            manager
                .alter_table(
                    Table::alter()
                        .table(Credits::Table)
                        .add_column(&mut column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .create_table(
                Table::create()
                    .table(CreditBreakage::Table)
                    .col(
                        ColumnDef::new(CreditBreakage::Id)
                            .big_integer()
                            .not_null()
                            .auto_increment()
                            .primary_key(),
                    )
                    .col(
                        ColumnDef::new(CreditBreakage::CreditId)
                            .big_integer()
                            .not_null()
                            .unique_key(),
                    )
                    .col(ColumnDef::new(CreditBreakage::TenantId).string().not_null())
                    .col(ColumnDef::new(CreditBreakage::KeyId).string().not_null())
                    .col(
                        ColumnDef::new(CreditBreakage::AmountNanos)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(CreditBreakage::BookedAtMs)
                            .big_integer()
                            .not_null(),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("credit_breakage_tenant")
                    .table(CreditBreakage::Table)
                    .col(CreditBreakage::TenantId)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(CreditBreakage::Table).to_owned())
            .await?;
        for column in [
            Credits::Kind,
            Credits::Priority,
            Credits::StartsAtMs,
            Credits::ExpiresAtMs,
            Credits::ClosesAtMs,
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Credits::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
