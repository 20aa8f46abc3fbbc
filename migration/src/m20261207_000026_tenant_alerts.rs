use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Tenants {
    Table,
    AlertWebhookUrl,
    AlertThresholdsPercent,
    RateMode,
}

/// A tenant's own alert webhook and thresholds, and its override of the tier's rate mode.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite adds one column per ALTER TABLE.
        for column in [
            Tenants::AlertWebhookUrl,
            Tenants::AlertThresholdsPercent,
            Tenants::RateMode,
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Tenants::Table)
                        .add_column(ColumnDef::new(column).string().null())
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [
            Tenants::AlertWebhookUrl,
            Tenants::AlertThresholdsPercent,
            Tenants::RateMode,
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Tenants::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
