//! A sink's lease: one row per sink naming the replica that sends to it and
//! until when. The holder renews it at every poll and with every
//! acknowledgement; once it lapses (the holder died or lost the database)
//! the next replica to ask takes the sink over.

use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, EntityTrait, QueryFilter,
};

use entity::export_sink;

use crate::storage::StorageError;

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The sink's row, created free if it is not there yet.
pub async fn ensure<C: ConnectionTrait>(db: &C, sink: &str) -> Result<(), StorageError> {
    let row = export_sink::ActiveModel {
        sink: Set(sink.to_owned()),
        owner: Set(None),
        lease_until_ms: Set(0),
        delivered_through: Set(0),
        rows: Set(0),
        nanos: Set(0),
        delivered_at_ms: Set(0),
    };
    export_sink::Entity::insert(row)
        .on_conflict(
            OnConflict::column(export_sink::Column::Sink)
                .do_nothing()
                .to_owned(),
        )
        .exec_without_returning(db)
        .await?;
    Ok(())
}

/// Whether `owner` holds the sink until `until_ms`: it held it already, or
/// nobody did, or the holder's lease lapsed before `now_ms`.
pub async fn claim<C: ConnectionTrait>(
    db: &C,
    sink: &str,
    owner: &str,
    now_ms: u64,
    until_ms: u64,
) -> Result<bool, StorageError> {
    let free = Condition::any()
        .add(export_sink::Column::Owner.eq(owner))
        .add(export_sink::Column::Owner.is_null())
        .add(export_sink::Column::LeaseUntilMs.lt(ms(now_ms)));
    let updated = export_sink::Entity::update_many()
        .col_expr(export_sink::Column::Owner, owner.into())
        .col_expr(export_sink::Column::LeaseUntilMs, ms(until_ms).into())
        .filter(export_sink::Column::Sink.eq(sink))
        .filter(free)
        .exec(db)
        .await?;
    Ok(updated.rows_affected == 1)
}

/// Gives back every sink `owner` holds (a replica that stops): the next
/// replica to ask takes each at once rather than after its lease lapses.
/// Returns how many it held.
pub async fn release<C: ConnectionTrait>(db: &C, owner: &str) -> Result<u64, StorageError> {
    let updated = export_sink::Entity::update_many()
        .col_expr(export_sink::Column::Owner, Option::<String>::None.into())
        .col_expr(export_sink::Column::LeaseUntilMs, 0i64.into())
        .filter(export_sink::Column::Owner.eq(owner))
        .exec(db)
        .await?;
    Ok(updated.rows_affected)
}

/// Extends the lease `owner` holds; `false`: another replica took it.
pub async fn renew<C: ConnectionTrait>(
    db: &C,
    sink: &str,
    owner: &str,
    until_ms: u64,
) -> Result<bool, StorageError> {
    let updated = export_sink::Entity::update_many()
        .col_expr(export_sink::Column::LeaseUntilMs, ms(until_ms).into())
        .filter(export_sink::Column::Sink.eq(sink))
        .filter(export_sink::Column::Owner.eq(owner))
        .exec(db)
        .await?;
    Ok(updated.rows_affected == 1)
}
