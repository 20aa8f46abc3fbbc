//! The outbox's reads and writes: rows queued in the ledger's own
//! transaction, read by the sending replica in id order, and deleted in the
//! transaction that adds them to the sink's cursor and monthly totals.

use std::collections::BTreeMap;

use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, DbBackend, EntityTrait,
    FromQueryResult, QueryFilter, QueryOrder, QuerySelect, Statement, TransactionTrait, Value,
};
use serde::Serialize;

use entity::{export_delivered, export_outbox, export_sink};

use crate::calendar::{Calendar, Period};
use crate::money::Nanos;
use crate::storage::StorageError;

/// Event ids per INSERT … SELECT: far below either backend's bound on parameters.
const IDS_PER_STATEMENT: usize = 500;

/// The ledger columns copied into a sink's outbox, in the outbox's own names.
const COPIED: &str = "id, event_id, tenant_id, key_id, feature, end_user, model, provider, \
     prompt_tokens, cached_tokens, cache_write_tokens, completion_tokens, web_searches, \
     charged_nanos, created_at_ms";
const INTO: &str = "sink, usage_id, event_id, tenant_id, key_id, feature, end_user, model, \
     provider, prompt_tokens, cached_tokens, cache_write_tokens, completion_tokens, \
     web_searches, charged_nanos, created_at_ms";
/// The rows exported: those with a charge or some usage; a row with neither
/// (a call refused before it reached a provider) has nothing to bill.
const EXPORTED: &str = "(charged_nanos <> 0 OR prompt_tokens <> 0 OR cached_tokens <> 0 \
     OR cache_write_tokens <> 0 OR completion_tokens <> 0 OR web_searches <> 0)";

/// Queues, for each sink, the ledger rows of `event_ids` this transaction
/// wrote: copied from the rows themselves, so the payload is the ledger's.
pub async fn enqueue<C: ConnectionTrait>(
    txn: &C,
    sinks: &[String],
    event_ids: &[&str],
) -> Result<(), StorageError> {
    let backend = txn.get_database_backend();
    for chunk in event_ids.chunks(IDS_PER_STATEMENT) {
        for sink in sinks {
            txn.execute(enqueue_statement(backend, sink, chunk)).await?;
        }
    }
    Ok(())
}

fn enqueue_statement(backend: DbBackend, sink: &str, event_ids: &[&str]) -> Statement {
    let postgres = matches!(backend, DbBackend::Postgres);
    let mark = |n: usize| {
        if postgres {
            format!("${n}")
        } else {
            "?".to_owned()
        }
    };
    let list: Vec<String> = (2..event_ids.len() + 2).map(mark).collect();
    let sql = format!(
        "INSERT INTO export_outbox ({INTO}) SELECT {first}, {COPIED} FROM usage \
         WHERE event_id IN ({list}) AND {EXPORTED} \
         ON CONFLICT (sink, usage_id) DO NOTHING",
        first = mark(1),
        list = list.join(", "),
    );
    let values = std::iter::once(Value::from(sink.to_owned()))
        .chain(event_ids.iter().map(|id| Value::from((*id).to_owned())));
    Statement::from_sql_and_values(backend, sql, values)
}

/// The sink's next rows in id order, at most `limit`; with `tenants`, only theirs.
pub async fn next_rows(
    db: &DatabaseConnection,
    sink: &str,
    tenants: Option<&[String]>,
    limit: u64,
) -> Result<Vec<export_outbox::Model>, StorageError> {
    let mut query = export_outbox::Entity::find().filter(export_outbox::Column::Sink.eq(sink));
    if let Some(tenants) = tenants {
        query =
            query.filter(export_outbox::Column::TenantId.is_in(tenants.iter().map(String::as_str)));
    }
    Ok(query
        .order_by_asc(export_outbox::Column::Id)
        .limit(limit)
        .all(db)
        .await?)
}

/// What waits in a sink's outbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Pending {
    pub rows: u64,
    /// The oldest waiting row's time, Unix ms.
    pub oldest_ms: Option<u64>,
    /// Rows that cannot be sent yet (a tenant with no customer mapping).
    pub waiting: u64,
}

#[derive(Debug, FromQueryResult)]
struct PendingRow {
    rows: i64,
    oldest: Option<i64>,
}

pub async fn pending(
    db: &DatabaseConnection,
    sink: &str,
    sendable: Option<&[String]>,
) -> Result<Pending, StorageError> {
    let count = |sendable: Option<&[String]>, negate: bool| {
        let mut query = export_outbox::Entity::find()
            .select_only()
            .column_as(Expr::cust("COUNT(*)"), "rows")
            .column_as(export_outbox::Column::CreatedAtMs.min(), "oldest")
            .filter(export_outbox::Column::Sink.eq(sink));
        if let Some(tenants) = sendable {
            let tenants = tenants.iter().map(String::as_str);
            query = query.filter(if negate {
                export_outbox::Column::TenantId.is_not_in(tenants)
            } else {
                export_outbox::Column::TenantId.is_in(tenants)
            });
        }
        query.into_model::<PendingRow>().one(db)
    };
    let all = count(None, false).await?;
    let waiting = match sendable {
        Some(tenants) => count(Some(tenants), true).await?.map_or(0, |r| r.rows),
        None => 0,
    };
    let as_u64 = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(Pending {
        rows: all.as_ref().map_or(0, |r| as_u64(r.rows)),
        oldest_ms: all.and_then(|r| r.oldest).map(as_u64),
        waiting: as_u64(waiting),
    })
}

/// What one acknowledgement delivered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivered {
    pub rows: u64,
    pub nanos: Nanos,
}

/// Deletes the rows a receiver acknowledged and adds them to the sink's
/// cursor and monthly totals, in one transaction, fenced by the lease: a
/// replica that lost the sink (`None`) changes nothing, so a row is counted
/// once however many replicas sent it. Rows already gone count nothing.
pub async fn acknowledge(
    db: &DatabaseConnection,
    sink: &str,
    owner: &str,
    ids: &[i64],
    calendar: &Calendar,
    now_ms: u64,
    lease_until_ms: u64,
) -> Result<Option<Delivered>, StorageError> {
    let txn = db.begin().await?;
    // First, so the sink's row is locked for the rest of the transaction.
    let held = super::lease::renew(&txn, sink, owner, lease_until_ms).await?;
    if !held {
        txn.rollback().await?;
        return Ok(None);
    }
    let rows = export_outbox::Entity::find()
        .filter(export_outbox::Column::Sink.eq(sink))
        .filter(export_outbox::Column::Id.is_in(ids.iter().copied()))
        .all(&txn)
        .await?;
    export_outbox::Entity::delete_many()
        .filter(export_outbox::Column::Id.is_in(rows.iter().map(|r| r.id)))
        .exec(&txn)
        .await?;
    let mut months: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for row in &rows {
        let at = u64::try_from(row.created_at_ms).unwrap_or(0);
        let month = calendar.window(Period::Month, at).key;
        let sum = months.entry(month).or_default();
        sum.0 += 1;
        sum.1 = sum.1.saturating_add(row.charged_nanos);
    }
    let total_nanos = months
        .values()
        .fold(0_i64, |sum, m| sum.saturating_add(m.1));
    let count = i64::try_from(rows.len()).unwrap_or(i64::MAX);
    let through = rows.iter().map(|r| r.usage_id).max().unwrap_or(0);
    let cursor = export_sink::Entity::find_by_id(sink.to_owned())
        .one(&txn)
        .await?
        .map_or(0, |s| s.delivered_through);
    export_sink::Entity::update_many()
        .col_expr(
            export_sink::Column::Rows,
            Expr::col(export_sink::Column::Rows).add(count),
        )
        .col_expr(
            export_sink::Column::Nanos,
            Expr::col(export_sink::Column::Nanos).add(total_nanos),
        )
        .col_expr(
            export_sink::Column::DeliveredThrough,
            Expr::value(cursor.max(through)),
        )
        .col_expr(
            export_sink::Column::DeliveredAtMs,
            Expr::value(i64::try_from(now_ms).unwrap_or(i64::MAX)),
        )
        .filter(export_sink::Column::Sink.eq(sink))
        .exec(&txn)
        .await?;
    for (month, (rows, nanos)) in months {
        add_month(&txn, sink, month, rows, nanos).await?;
    }
    txn.commit().await?;
    Ok(Some(Delivered {
        rows: u64::try_from(count).unwrap_or(0),
        nanos: Nanos::from_db(total_nanos),
    }))
}

async fn add_month<C: ConnectionTrait>(
    txn: &C,
    sink: &str,
    month: String,
    rows: i64,
    nanos: i64,
) -> Result<(), StorageError> {
    let row = export_delivered::ActiveModel {
        sink: Set(sink.to_owned()),
        month: Set(month),
        rows: Set(rows),
        nanos: Set(nanos),
    };
    export_delivered::Entity::insert(row)
        .on_conflict(
            OnConflict::columns([
                export_delivered::Column::Sink,
                export_delivered::Column::Month,
            ])
            .value(
                export_delivered::Column::Rows,
                Expr::cust("export_delivered.rows + excluded.rows"),
            )
            .value(
                export_delivered::Column::Nanos,
                Expr::cust("export_delivered.nanos + excluded.nanos"),
            )
            .to_owned(),
        )
        .exec_without_returning(txn)
        .await?;
    Ok(())
}

/// Rows and charge a sink acknowledged from one billing month (`YYYY-MM`):
/// what `invoice --check` holds against the ledger's month.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DeliveredTotals {
    pub rows: u64,
    pub nanos: Nanos,
}

pub async fn delivered_totals<C: sea_orm::ConnectionTrait>(
    db: &C,
    sink: &str,
    month: &str,
) -> Result<DeliveredTotals, StorageError> {
    let row = export_delivered::Entity::find_by_id((sink.to_owned(), month.to_owned()))
        .one(db)
        .await?;
    Ok(
        row.map_or_else(DeliveredTotals::default, |r| DeliveredTotals {
            rows: u64::try_from(r.rows).unwrap_or(0),
            nanos: Nanos::from_db(r.nanos),
        }),
    )
}
