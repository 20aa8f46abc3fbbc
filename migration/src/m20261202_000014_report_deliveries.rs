use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum ReportDeliveries {
    Table,
    Date,
    Replica,
    Status,
    Attempts,
    UpdatedAtMs,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One row per day whose report push a replica claimed: the primary key
        // lets exactly one replica claim a day, so the report goes out once.
        manager
            .create_table(
                Table::create()
                    .table(ReportDeliveries::Table)
                    .col(
                        ColumnDef::new(ReportDeliveries::Date)
                            .string()
                            .not_null()
                            .primary_key(),
                    )
                    .col(
                        ColumnDef::new(ReportDeliveries::Replica)
                            .string()
                            .not_null(),
                    )
                    .col(ColumnDef::new(ReportDeliveries::Status).string().not_null())
                    .col(
                        ColumnDef::new(ReportDeliveries::Attempts)
                            .integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(ReportDeliveries::UpdatedAtMs)
                            .big_integer()
                            .not_null(),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(ReportDeliveries::Table).to_owned())
            .await
    }
}
