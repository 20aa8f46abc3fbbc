//! PostgreSQL's `usage` is partitioned by UTC month (`period`), with a
//! default partition for a month that has none yet. Partitions are made a
//! month ahead; a month found in the default one is moved into its own.
//! A month all past retention is summed batch by batch into pending
//! aggregates (progress kept in `usage_rollups`, so a restart resumes), then
//! in one transaction its aggregates count and its partition is dropped.

use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DbBackend, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect, Statement, TransactionTrait,
};

use entity::usage;
use migration::partition_name;

use super::retention::RolledUp;
use super::rollup;
use crate::calendar::Calendar;
use crate::period::Date;
use crate::storage::StorageError;

/// How long dropping a month may wait for its lock before trying again at
/// the next run; writers queue behind a waiting `DROP`, so it is short.
const DROP_LOCK_TIMEOUT: &str = "500ms";

fn sql(text: impl Into<String>) -> Statement {
    Statement::from_string(DbBackend::Postgres, text.into())
}

/// The UTC month (`YYYY-MM`) of an instant, and the one after it.
fn month_and_next(now_ms: u64) -> (String, String) {
    let today = Date::from_unix_ms(now_ms);
    (today.month_key(), today.first_of_next_month().month_key())
}

/// Unix ms at which the UTC month after `period` begins (`None`: not a month).
fn month_end_ms(period: &str) -> Option<u64> {
    let first = Date::parse(&format!("{period}-01"))?;
    Some(first.first_of_next_month().start_unix_ms())
}

/// This month's and next month's partitions exist.
pub async fn ensure_ahead(db: &DatabaseConnection, now_ms: u64) -> Result<(), StorageError> {
    let (this, next) = month_and_next(now_ms);
    ensure(db, &this).await?;
    ensure(db, &next).await
}

async fn exists(db: &impl ConnectionTrait, table: &str) -> Result<bool, StorageError> {
    let found = db
        .query_one(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT 1 AS found FROM pg_class WHERE relname = $1 AND relkind = 'r'",
            [table.into()],
        ))
        .await?;
    Ok(found.is_some())
}

/// `period` has its own partition: made, or made from the default
/// partition's rows of that month, moved in one transaction.
async fn ensure(db: &DatabaseConnection, period: &str) -> Result<(), StorageError> {
    let Some(name) = partition_name(period) else {
        return Ok(());
    };
    if exists(db, &name).await? {
        return Ok(());
    }
    let txn = db.begin().await?;
    // Replicas start together (a rollout, a scale-up) and each makes the
    // months ahead: one makes a partition under this lock, held to the
    // transaction's end, and the others find it made.
    txn.execute(sql(
        "SELECT pg_advisory_xact_lock(hashtext('tollgate.usage_partitions'))",
    ))
    .await?;
    if exists(&txn, &name).await? {
        txn.commit().await?;
        return Ok(());
    }
    txn.execute(sql(format!(
        "CREATE TABLE {name} (LIKE usage INCLUDING DEFAULTS)"
    )))
    .await?;
    txn.execute(sql(format!(
        "WITH moved AS (DELETE FROM usage_default WHERE period = '{period}' RETURNING *) \
         INSERT INTO {name} SELECT * FROM moved"
    )))
    .await?;
    txn.execute(sql(format!(
        "ALTER TABLE usage ATTACH PARTITION {name} FOR VALUES IN ('{period}')"
    )))
    .await?;
    txn.commit().await?;
    Ok(())
}

/// The months with rows: every partition's, and any waiting in the default one.
async fn months(db: &DatabaseConnection) -> Result<Vec<String>, StorageError> {
    let rows = db
        .query_all(sql("SELECT DISTINCT period FROM usage_default \
             UNION SELECT substr(c.relname, 8, 4) || '-' || substr(c.relname, 13, 2) AS period \
             FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
             WHERE i.inhparent = 'usage'::regclass AND c.relname LIKE 'usage\\_p%' \
             ORDER BY period"))
        .await?;
    rows.iter()
        .map(|row| row.try_get::<String>("", "period").map_err(Into::into))
        .collect()
}

/// Rolls up and drops every month that ended before `cutoff_ms`.
pub async fn roll_up_months(
    db: &DatabaseConnection,
    calendar: &Calendar,
    cutoff_ms: u64,
    batch_rows: u64,
    done: &mut RolledUp,
) -> Result<(), StorageError> {
    for period in months(db).await? {
        // A month waiting in the default partition gets its own, due or not.
        ensure(db, &period).await?;
        if month_end_ms(&period).is_none_or(|end| end > cutoff_ms) {
            continue;
        }
        if roll_up_month(db, calendar, &period, batch_rows, done).await? {
            done.months_dropped.push(period);
        }
    }
    Ok(())
}

async fn progress(db: &DatabaseConnection, period: &str) -> Result<i64, StorageError> {
    let row = db
        .query_one(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT last_id FROM usage_rollups WHERE period = $1",
            [period.into()],
        ))
        .await?;
    Ok(match row {
        Some(row) => row.try_get("", "last_id")?,
        None => 0,
    })
}

/// Sums the month's rows after the last one summed, then drops the month.
/// `false`: its lock was not had in time; the next run finishes it.
async fn roll_up_month(
    db: &DatabaseConnection,
    calendar: &Calendar,
    period: &str,
    batch_rows: u64,
    done: &mut RolledUp,
) -> Result<bool, StorageError> {
    let mut last_id = progress(db, period).await?;
    loop {
        let rows = usage::Entity::find()
            .filter(usage::Column::Period.eq(period))
            .filter(usage::Column::Id.gt(last_id))
            .order_by_asc(usage::Column::Id)
            .limit(batch_rows)
            .all(db)
            .await?;
        let Some(last) = rows.last().map(|r| r.id) else {
            return drop_month(db, period, last_id).await;
        };
        let ends = rollup::request_ends(db, &rows).await?;
        let txn = db.begin().await?;
        let charged = rollup::add_rows(&txn, &rows, &ends, calendar, true).await?;
        txn.execute(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "INSERT INTO usage_rollups (period, last_id) VALUES ($1, $2) \
             ON CONFLICT (period) DO UPDATE SET last_id = excluded.last_id",
            [period.into(), last.into()],
        ))
        .await?;
        txn.commit().await?;
        done.add(&rows, charged);
        last_id = last;
    }
}

/// In one transaction: the month's aggregates count, its partition goes.
/// A row that reached the month after the last batch (a late replay) keeps
/// it: the next run sums that row first.
async fn drop_month(
    db: &DatabaseConnection,
    period: &str,
    last_id: i64,
) -> Result<bool, StorageError> {
    let Some(name) = partition_name(period) else {
        return Ok(false);
    };
    let txn = db.begin().await?;
    txn.execute(sql(format!(
        "SET LOCAL lock_timeout = '{DROP_LOCK_TIMEOUT}'"
    )))
    .await?;
    if txn
        .execute(sql(format!("LOCK TABLE {name} IN ACCESS EXCLUSIVE MODE")))
        .await
        .is_err()
    {
        return Ok(false);
    }
    let late = usage::Entity::find()
        .filter(usage::Column::Period.eq(period))
        .filter(usage::Column::Id.gt(last_id))
        .select_only()
        .column(usage::Column::Id)
        .into_tuple::<i64>()
        .one(&txn)
        .await?;
    if late.is_some() {
        return Ok(false);
    }
    txn.execute(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "UPDATE usage_daily SET pending = false WHERE substr(day, 1, 7) = $1 AND pending",
        [period.into()],
    ))
    .await?;
    if txn
        .execute(sql(format!("DROP TABLE {name}")))
        .await
        .is_err()
    {
        return Ok(false);
    }
    txn.execute(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "DELETE FROM usage_rollups WHERE period = $1",
        [period.into()],
    ))
    .await?;
    txn.commit().await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_turn_over_at_the_year() {
        let december = Date::parse("2026-12-31").unwrap().start_unix_ms();
        assert_eq!(
            month_and_next(december),
            ("2026-12".to_owned(), "2027-01".to_owned())
        );
        assert_eq!(
            month_end_ms("2026-12"),
            Some(Date::parse("2027-01-01").unwrap().start_unix_ms())
        );
        assert_eq!(month_end_ms("soon"), None);
    }
}
