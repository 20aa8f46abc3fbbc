//! The one database connection: connect, tune SQLite, run migrations.

use std::time::Duration;

use migration::{Migrator, MigratorTrait};
use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
use sea_orm::{ConnectOptions, Database, DatabaseConnection, DbErr};

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
    options
        .max_connections(pool)
        .min_connections(1)
        .connect_timeout(Duration::from_secs(5))
        .acquire_timeout(Duration::from_secs(5))
        .sqlx_logging(false);
    if !is_memory_sqlite {
        // Every pooled connection: WAL lets reports and budget loads read while
        // the ledger writes; a writer waits for a lock instead of failing at once.
        options.map_sqlx_sqlite_opts(|o| {
            o.journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(5))
        });
    }
    Database::connect(options)
        .await
        .map_err(StorageError::Connect)
}

pub async fn migrate(db: &DatabaseConnection) -> Result<(), StorageError> {
    Migrator::up(db, None).await.map_err(StorageError::Migrate)
}

pub async fn connect_and_migrate(
    database_url: &str,
    max_connections: u32,
) -> Result<DatabaseConnection, StorageError> {
    let db = connect(database_url, max_connections).await?;
    migrate(&db).await?;
    Ok(db)
}

pub async fn ping(db: &DatabaseConnection) -> bool {
    db.ping().await.is_ok()
}
