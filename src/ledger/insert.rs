//! The ledger's INSERT as SQL text, written once per backend and row count
//! and kept: building it through the query builder for every batch cost
//! about as much CPU as SQLite took to run it. Values are taken from each
//! row's `ActiveModel`, so the entity stays the one mapping of a row to its
//! columns.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use sea_orm::{ActiveModelTrait, DbBackend, EntityName, IdenStatic, Iterable, Statement, Value};

use entity::usage;

use super::event::UsageEvent;

/// The columns an insert sets: all but the database's own id.
fn columns() -> impl Iterator<Item = usage::Column> {
    usage::Column::iter().filter(|c| !matches!(c, usage::Column::Id))
}

/// Whether an insert names the rows it inserted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Returning {
    /// Only how many (the statement's affected rows): all a new batch needs.
    Count,
    /// Each inserted row's event id, for a batch some of whose events are in already.
    EventIds,
}

/// `INSERT … ON CONFLICT (event_id) DO NOTHING` (with `period` beside
/// `event_id` on PostgreSQL) for `events`, with `RETURNING event_id` if
/// asked. Written for SQLite and PostgreSQL, the only drivers built in.
pub fn statement<E: Borrow<UsageEvent>>(
    backend: DbBackend,
    events: &[E],
    returning: Returning,
) -> Statement {
    let sql = sql(
        matches!(backend, DbBackend::Postgres),
        events.len(),
        returning,
    );
    let mut values: Vec<Value> = Vec::with_capacity(events.len() * columns().count());
    for event in events {
        let mut model = event.borrow().to_active_model();
        // `to_active_model` sets every column but the id.
        values.extend(columns().filter_map(|column| model.take(column).into_value()));
    }
    Statement::from_sql_and_values(backend, sql.as_ref(), values)
}

/// Statement texts by (PostgreSQL, rows, returning): a handful, as batches
/// come in few sizes.
type Texts = BTreeMap<(bool, usize, Returning), Arc<str>>;

fn sql(postgres: bool, rows: usize, returning: Returning) -> Arc<str> {
    static TEXTS: Mutex<Texts> = Mutex::new(BTreeMap::new());
    TEXTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry((postgres, rows, returning))
        .or_insert_with(|| write_sql(postgres, rows, returning).into())
        .clone()
}

fn write_sql(postgres: bool, rows: usize, returning: Returning) -> String {
    let names: Vec<String> = columns().map(|c| c.as_str().to_owned()).collect();
    let mut sql = format!(
        "INSERT INTO \"{}\" (\"{}\") VALUES ",
        usage::Entity.table_name(),
        names.join("\", \"")
    );
    let mut n = 0;
    for row in 0..rows {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        for column in 0..names.len() {
            if column > 0 {
                sql.push_str(", ");
            }
            n += 1;
            if postgres {
                let _ = write!(sql, "${n}");
            } else {
                sql.push('?');
            }
        }
        sql.push(')');
    }
    let event_id = usage::Column::EventId.as_str();
    // PostgreSQL's `usage` is partitioned by month: an event id is unique within its month.
    let target = if postgres {
        format!("\"{event_id}\", \"{}\"", usage::Column::Period.as_str())
    } else {
        format!("\"{event_id}\"")
    };
    let _ = write!(sql, " ON CONFLICT ({target}) DO NOTHING");
    if returning == Returning::EventIds {
        let _ = write!(sql, " RETURNING \"{event_id}\"");
    }
    sql
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm::sea_query::OnConflict;
    use sea_orm::{EntityTrait, QueryTrait};

    /// The text written here is the one the query builder makes of the same rows.
    #[test]
    fn the_written_insert_is_the_query_builders() {
        for backend in [DbBackend::Sqlite, DbBackend::Postgres] {
            for rows in [1, 2, 5] {
                let events: Vec<UsageEvent> = (0..rows)
                    .map(|i| UsageEvent {
                        ttft_ms: (i % 2 == 1).then_some(40),
                        error: (i == 2).then(|| "late".to_owned()),
                        cache: (i == 1).then(|| crate::ledger::CacheSource {
                            event_id: "e".to_owned(),
                            similarity: Some(930_000),
                        }),
                        ..UsageEvent::sample(crate::ledger::AttemptStatus::Ok)
                    })
                    .collect();
                let mut insert =
                    usage::Entity::insert_many(events.iter().map(UsageEvent::to_active_model))
                        .on_conflict(
                            if backend == DbBackend::Postgres {
                                OnConflict::columns([usage::Column::EventId, usage::Column::Period])
                            } else {
                                OnConflict::column(usage::Column::EventId)
                            }
                            .do_nothing()
                            .to_owned(),
                        );
                let counted = backend.build(insert.query());
                let written = statement(backend, &events, Returning::Count);
                assert_eq!(written.sql, counted.sql, "{backend:?}, {rows} rows");
                assert_eq!(written.values, counted.values, "{backend:?}, {rows} rows");
                insert.query().returning_col(usage::Column::EventId);
                let built = backend.build(insert.query());
                let written = statement(backend, &events, Returning::EventIds);
                assert_eq!(written.sql, built.sql, "{backend:?}, {rows} rows");
                assert_eq!(written.values, built.values, "{backend:?}, {rows} rows");
            }
        }
    }
}
