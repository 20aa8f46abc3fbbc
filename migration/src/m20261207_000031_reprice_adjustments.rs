use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum RepriceAdjustments {
    Table,
    Id,
    RunKey,
    UsageId,
    PriceVersion,
    Month,
    TenantId,
    KeyId,
    Provider,
    Model,
    Feature,
    DebitNanos,
    CreditNanos,
    CreatedAtMs,
}

#[derive(DeriveIden)]
enum ClosedInvoices {
    Table,
    LedgerCreditNanos,
}

/// What a reprice wrote: per ledger row, the difference between its charge
/// at the new prices and what it was billed so far, booked as an adjustment
/// of an open month. Money has no sign, so a difference is a debit or a
/// credit. One row per run and ledger row: a run written twice writes once.
/// A closed month's kept invoice keeps the credits of its adjustments beside
/// the ledger's sum.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let big = |c| ColumnDef::new(c).big_integer().not_null().to_owned();
        let text = |c| ColumnDef::new(c).string().not_null().to_owned();
        manager
            .create_table(
                Table::create()
                    .table(RepriceAdjustments::Table)
                    .col(
                        ColumnDef::new(RepriceAdjustments::Id)
                            .big_integer()
                            .not_null()
                            .auto_increment()
                            .primary_key(),
                    )
                    .col(text(RepriceAdjustments::RunKey))
                    .col(big(RepriceAdjustments::UsageId))
                    .col(text(RepriceAdjustments::PriceVersion))
                    .col(text(RepriceAdjustments::Month))
                    .col(text(RepriceAdjustments::TenantId))
                    .col(text(RepriceAdjustments::KeyId))
                    .col(text(RepriceAdjustments::Provider))
                    .col(text(RepriceAdjustments::Model))
                    .col(text(RepriceAdjustments::Feature))
                    .col(big(RepriceAdjustments::DebitNanos))
                    .col(big(RepriceAdjustments::CreditNanos))
                    .col(big(RepriceAdjustments::CreatedAtMs))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("reprice_adjustments_run_row")
                    .table(RepriceAdjustments::Table)
                    .col(RepriceAdjustments::RunKey)
                    .col(RepriceAdjustments::UsageId)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("reprice_adjustments_usage")
                    .table(RepriceAdjustments::Table)
                    .col(RepriceAdjustments::UsageId)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("reprice_adjustments_month_tenant")
                    .table(RepriceAdjustments::Table)
                    .col(RepriceAdjustments::Month)
                    .col(RepriceAdjustments::TenantId)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(ClosedInvoices::Table)
                    .add_column(
                        ColumnDef::new(ClosedInvoices::LedgerCreditNanos)
                            .big_integer()
                            .not_null()
                            .default(0),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(ClosedInvoices::Table)
                    .drop_column(ClosedInvoices::LedgerCreditNanos)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(Table::drop().table(RepriceAdjustments::Table).to_owned())
            .await
    }
}
