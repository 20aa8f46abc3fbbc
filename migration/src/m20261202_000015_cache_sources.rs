use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Usage {
    Table,
    CacheSource,
    CacheSimilarity,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // A cache hit names the row whose answer it reused, and a semantic
        // hit how close the question was (millionths of a cosine). One
        // column per statement: SQLite alters one at a time.
        manager
            .alter_table(
                Table::alter()
                    .table(Usage::Table)
                    .add_column(ColumnDef::new(Usage::CacheSource).string().null())
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Usage::Table)
                    .add_column(ColumnDef::new(Usage::CacheSimilarity).integer().null())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [Usage::CacheSimilarity, Usage::CacheSource] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Usage::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
