use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum StoredResponses {
    Table,
    TenantId,
    Id,
    Input,
    Response,
    Bytes,
    CreatedAtMs,
    ExpiresAtMs,
}

#[derive(DeriveIden)]
enum StoredResponseItems {
    Table,
    TenantId,
    Id,
    ResponseId,
    Item,
}

/// The Responses door's stored responses: each with the whole input it was
/// answered on and its response object, and their items by id, so a later
/// request may name one (`previous_response_id`, `item_reference`). Keyed by
/// tenant first: one tenant never reads another's.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let text = |c: StoredResponses| ColumnDef::new(c).string().not_null().to_owned();
        let big = |c: StoredResponses| ColumnDef::new(c).big_integer().not_null().to_owned();
        manager
            .create_table(
                Table::create()
                    .table(StoredResponses::Table)
                    .col(text(StoredResponses::TenantId))
                    .col(text(StoredResponses::Id))
                    .col(ColumnDef::new(StoredResponses::Input).text().not_null())
                    .col(ColumnDef::new(StoredResponses::Response).text().not_null())
                    .col(big(StoredResponses::Bytes))
                    .col(big(StoredResponses::CreatedAtMs))
                    .col(big(StoredResponses::ExpiresAtMs))
                    .primary_key(
                        Index::create()
                            .col(StoredResponses::TenantId)
                            .col(StoredResponses::Id),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_stored_responses_age")
                    .table(StoredResponses::Table)
                    .col(StoredResponses::TenantId)
                    .col(StoredResponses::CreatedAtMs)
                    .to_owned(),
            )
            .await?;
        let item = |c: StoredResponseItems| ColumnDef::new(c).string().not_null().to_owned();
        manager
            .create_table(
                Table::create()
                    .table(StoredResponseItems::Table)
                    .col(item(StoredResponseItems::TenantId))
                    .col(item(StoredResponseItems::Id))
                    .col(item(StoredResponseItems::ResponseId))
                    .col(ColumnDef::new(StoredResponseItems::Item).text().not_null())
                    .primary_key(
                        Index::create()
                            .col(StoredResponseItems::TenantId)
                            .col(StoredResponseItems::Id),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_stored_response_items_response")
                    .table(StoredResponseItems::Table)
                    .col(StoredResponseItems::TenantId)
                    .col(StoredResponseItems::ResponseId)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(StoredResponseItems::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(StoredResponses::Table).to_owned())
            .await
    }
}
