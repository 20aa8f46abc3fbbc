//! The one database connection: connect, tune SQLite, run migrations.

use std::time::Duration;

use migration::{Migrator, MigratorTrait};
use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, DbErr};

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("cannot connect to the database (storage.database_url): {0}")]
    Connect(DbErr),
    #[error("migrations failed: {0}")]
    Migrate(DbErr),
    #[error("database error: {0}")]
    Query(#[from] DbErr),
}

pub async fn connect(
    database_url: &str,
    max_connections: u32,
) -> Result<DatabaseConnection, StorageError> {
    let mut options = ConnectOptions::new(database_url.to_owned());
    let is_memory_sqlite = database_url.contains(":memory:");
    // Each connection to an in-memory SQLite is its own empty database.
    let pool = if is_memory_sqlite {
        1
    } else {
        max_connections.max(1)
    };
    // A SQLite connection is a thread with its own page cache: all of them
    // open at start, so the footprint is set before the first request rather
    // than growing by a connection whenever a few queries happen to overlap.
    let min = if is_sqlite(database_url) { pool } else { 1 };
    options
        .max_connections(pool)
        .min_connections(min)
        .connect_timeout(Duration::from_secs(5))
        .acquire_timeout(Duration::from_secs(5))
        .sqlx_logging(false);
    if !is_memory_sqlite {
        // Every pooled connection: WAL lets reports and budget loads read while
        // the ledger writes; a writer waits for a lock instead of failing at once.
        // The ledger only appends (its ids are time-ordered), so a write touches
        // the last pages of each index; a connection's page cache fills with
        // pages written once and never read again (`PAGE_CACHE_KIB`).
        options.map_sqlx_sqlite_opts(|o| {
            o.journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(5))
                .pragma("cache_size", format!("-{PAGE_CACHE_KIB}"))
        });
    }
    Database::connect(options)
        .await
        .map_err(StorageError::Connect)
}

/// Each SQLite connection's page cache. SQLite's default, 2 MiB, filled under
/// steady load over minutes on every pooled connection and held 6 MiB more
/// than this once full; reads past it come from the kernel's page cache.
const PAGE_CACHE_KIB: u32 = 512;

pub fn is_sqlite(database_url: &str) -> bool {
    database_url.starts_with("sqlite:")
}

pub async fn migrate(db: &DatabaseConnection) -> Result<(), StorageError> {
    Migrator::up(db, None).await.map_err(StorageError::Migrate)
}

pub async fn connect_and_migrate(
    database_url: &str,
    max_connections: u32,
) -> Result<DatabaseConnection, StorageError> {
    let db = connect(database_url, max_connections).await?;
    if db.get_database_backend() == DbBackend::Postgres {
        migrate_alone(database_url).await?;
    } else {
        migrate(&db).await?;
    }
    Ok(db)
}

/// Replicas that start together on one PostgreSQL database migrate it one
/// at a time: a session lock on a connection of its own, released when it
/// closes (the next replica then finds nothing left to apply).
async fn migrate_alone(database_url: &str) -> Result<(), StorageError> {
    let lock = connect(database_url, 1).await?;
    lock.execute_unprepared("SELECT pg_advisory_lock(hashtext('tollgate.migrate'))")
        .await?;
    let migrated = migrate(&lock).await;
    let _ = lock.close().await;
    migrated
}

pub async fn ping(db: &DatabaseConnection) -> bool {
    db.ping().await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_rt::test]
    async fn a_sqlite_file_opens_its_whole_pool_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
        let db = connect(&url, 3).await.unwrap();
        let pool = db.get_sqlite_connection_pool();
        // The pool fills its minimum in the background after connecting.
        for _ in 0..200 {
            if pool.size() == 3 {
                break;
            }
            actix_rt::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(pool.size(), 3);
    }

    #[actix_rt::test]
    async fn every_sqlite_connection_keeps_a_small_page_cache() {
        use sea_orm::{ConnectionTrait, Statement};
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
        let db = connect(&url, 2).await.unwrap();
        // Two at once, so that two of the pool's connections answer.
        let pragma = || {
            db.query_one(Statement::from_string(
                db.get_database_backend(),
                "PRAGMA cache_size",
            ))
        };
        let (a, b) = futures_util::future::join(pragma(), pragma()).await;
        for row in [a, b] {
            let kib: i64 = row.unwrap().unwrap().try_get_by_index(0).unwrap();
            assert_eq!(kib, -i64::from(PAGE_CACHE_KIB));
        }
    }
}
