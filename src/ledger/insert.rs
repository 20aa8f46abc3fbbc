//! The ledger's INSERT as SQL text, written once per backend and row count
//! and kept: building it through the query builder for every batch cost
//! about as much CPU as SQLite took to run it. Values are taken from each
//! row's `ActiveModel`, so the entity stays the one mapping of a row to its
//! columns.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use sea_orm::{ActiveModelTrait, DbBackend, EntityName, IdenStatic, Iterable, Statement, Value};

use entity::usage;

use super::event::UsageEvent;

/// The columns an insert sets: all but the database's own id.
fn columns() -> impl Iterator<Item = usage::Column> {
    usage::Column::iter().filter(|c| !matches!(c, usage::Column::Id))
}

/// `INSERT … ON CONFLICT (event_id) DO NOTHING RETURNING event_id` for
/// `events`, or `None` on a backend without it written out here (the caller
/// then uses the query builder).
pub fn statement<E: Borrow<UsageEvent>>(backend: DbBackend, events: &[E]) -> Option<Statement> {
    let sql = sql(backend, events.len())?;
    let mut values: Vec<Value> = Vec::with_capacity(events.len() * columns().count());
    for event in events {
        let mut model = event.borrow().to_active_model();
        // `to_active_model` sets every column but the id.
        values.extend(columns().filter_map(|column| model.take(column).into_value()));
    }
    Some(Statement::from_sql_and_values(
        backend,
        sql.as_ref(),
        values,
    ))
}

/// Statement texts by (PostgreSQL, rows): a handful, as batches come in few sizes.
type Texts = HashMap<(bool, usize), Arc<str>>;

fn sql(backend: DbBackend, rows: usize) -> Option<Arc<str>> {
    static TEXTS: Mutex<Option<Texts>> = Mutex::new(None);
    let postgres = match backend {
        DbBackend::Postgres => true,
        DbBackend::Sqlite => false,
        DbBackend::MySql => return None,
    };
    let mut texts = TEXTS.lock().unwrap_or_else(PoisonError::into_inner);
    let texts = texts.get_or_insert_with(HashMap::new);
    let text = texts
        .entry((postgres, rows))
        .or_insert_with(|| write_sql(postgres, rows).into());
    Some(text.clone())
}

fn write_sql(postgres: bool, rows: usize) -> String {
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
    let _ = write!(
        sql,
        " ON CONFLICT (\"{0}\") DO NOTHING RETURNING \"{0}\"",
        usage::Column::EventId.as_str()
    );
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
        let event = UsageEvent::sample(crate::ledger::AttemptStatus::Ok);
        for backend in [DbBackend::Sqlite, DbBackend::Postgres] {
            for rows in [1, 2, 5] {
                let events: Vec<UsageEvent> = (0..rows)
                    .map(|i| UsageEvent {
                        ttft_ms: (i % 2 == 1).then_some(40),
                        error: (i == 2).then(|| "late".to_owned()),
                        ..UsageEvent::sample(crate::ledger::AttemptStatus::Ok)
                    })
                    .collect();
                let mut insert =
                    usage::Entity::insert_many(events.iter().map(UsageEvent::to_active_model))
                        .on_conflict(
                            OnConflict::column(usage::Column::EventId)
                                .do_nothing()
                                .to_owned(),
                        );
                insert.query().returning_col(usage::Column::EventId);
                let built = backend.build(insert.query());
                let written = statement(backend, &events).unwrap();
                assert_eq!(written.sql, built.sql, "{backend:?}, {rows} rows");
                assert_eq!(written.values, built.values, "{backend:?}, {rows} rows");
            }
        }
        assert!(statement(DbBackend::MySql, &[event]).is_none());
    }
}
