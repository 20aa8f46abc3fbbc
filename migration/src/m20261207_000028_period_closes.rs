use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum PeriodCloses {
    Table,
    Month,
    Watermark,
    ClosedAtMs,
    ClosedBy,
}

#[derive(DeriveIden)]
enum ClosedInvoices {
    Table,
    TenantId,
    Month,
    Lines,
    TotalNanos,
    Rows,
    LedgerNanos,
    LedgerRows,
}

/// Months that are closed, each with the largest ledger row id when it was
/// closed (rows after it stamped in a closed month are booked in the first
/// open one), and each closed month's invoices as they were closed: final.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let big = |c| ColumnDef::new(c).big_integer().not_null().to_owned();
        manager
            .create_table(
                Table::create()
                    .table(PeriodCloses::Table)
                    .col(
                        ColumnDef::new(PeriodCloses::Month)
                            .string()
                            .not_null()
                            .primary_key(),
                    )
                    .col(big(PeriodCloses::Watermark))
                    .col(big(PeriodCloses::ClosedAtMs))
                    .col(ColumnDef::new(PeriodCloses::ClosedBy).string().null())
                    .to_owned(),
            )
            .await?;
        let big = |c| ColumnDef::new(c).big_integer().not_null().to_owned();
        manager
            .create_table(
                Table::create()
                    .table(ClosedInvoices::Table)
                    .col(ColumnDef::new(ClosedInvoices::TenantId).string().not_null())
                    .col(ColumnDef::new(ClosedInvoices::Month).string().not_null())
                    .col(ColumnDef::new(ClosedInvoices::Lines).text().not_null())
                    .col(big(ClosedInvoices::TotalNanos))
                    .col(big(ClosedInvoices::Rows))
                    .col(big(ClosedInvoices::LedgerNanos))
                    .col(big(ClosedInvoices::LedgerRows))
                    .primary_key(
                        Index::create()
                            .col(ClosedInvoices::TenantId)
                            .col(ClosedInvoices::Month),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(ClosedInvoices::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(PeriodCloses::Table).to_owned())
            .await
    }
}
