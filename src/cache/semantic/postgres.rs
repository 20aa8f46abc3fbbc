//! The semantic cache shared by replicas: PostgreSQL with pgvector. Each
//! answer is a row with its embedding as a `vector`; a lookup asks for the
//! nearest few (cosine distance) among the tenant's answers for the route
//! and context, and the similarity is then computed here, in integers, so it
//! means what it means in process. The table is created on first use; until
//! the server answers, every lookup is a miss.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, QueryResult,
    Statement, Value,
};
use tokio::sync::OnceCell;

use super::vector::Quantized;
use super::{Answer, Hit, Probe};
use crate::money::Nanos;
use crate::pricing::Usage;

/// Candidates fetched per lookup: the engine's distance is a float; the
/// decision is ours.
const CANDIDATES: i64 = 4;
const POOL: u32 = 4;

const SCHEMA: [&str; 4] = [
    "CREATE EXTENSION IF NOT EXISTS vector",
    "CREATE TABLE IF NOT EXISTS tollgate_semantic_cache (
        id BIGSERIAL PRIMARY KEY,
        tenant TEXT NOT NULL,
        route TEXT NOT NULL,
        context BYTEA NOT NULL,
        dimensions INTEGER NOT NULL,
        embedding vector NOT NULL,
        body BYTEA NOT NULL,
        provider TEXT NOT NULL,
        model TEXT NOT NULL,
        native BOOLEAN NOT NULL,
        source TEXT NOT NULL,
        cost_nanos BIGINT NOT NULL,
        prompt_tokens BIGINT NOT NULL,
        cached_tokens BIGINT NOT NULL,
        cache_write_tokens BIGINT NOT NULL,
        completion_tokens BIGINT NOT NULL,
        expires_at_ms BIGINT NOT NULL
    )",
    "CREATE INDEX IF NOT EXISTS tollgate_semantic_cache_bucket
        ON tollgate_semantic_cache (tenant, route, context)",
    "CREATE INDEX IF NOT EXISTS tollgate_semantic_cache_age
        ON tollgate_semantic_cache (tenant, id)",
];

const LOOKUP: &str = "SELECT embedding::text AS embedding, body, provider, model, native, source,
        cost_nanos, prompt_tokens, cached_tokens, cache_write_tokens, completion_tokens
    FROM tollgate_semantic_cache
    WHERE tenant = $1 AND route = $2 AND context = $3 AND dimensions = $4 AND expires_at_ms > $5
    ORDER BY embedding <=> $6::vector
    LIMIT $7";

const INSERT: &str = "INSERT INTO tollgate_semantic_cache (tenant, route, context, dimensions,
        embedding, body, provider, model, native, source, cost_nanos, prompt_tokens,
        cached_tokens, cache_write_tokens, completion_tokens, expires_at_ms)
    VALUES ($1, $2, $3, $4, $5::vector, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)";

/// The tenant's expired answers, and those past its bound, oldest first.
const TRIM: &str = "DELETE FROM tollgate_semantic_cache WHERE tenant = $1 AND (expires_at_ms <= $2
    OR id IN (SELECT id FROM tollgate_semantic_cache WHERE tenant = $1 ORDER BY id DESC OFFSET $3))";

/// How long connecting and creating the table may take, off the request path.
const INIT_TIMEOUT: Duration = Duration::from_secs(10);
/// After a failed start, the next try waits this long (lookups are misses meanwhile).
const RETRY_AFTER: Duration = Duration::from_secs(1);

pub struct PostgresIndex {
    shared: Arc<Shared>,
    timeout: Duration,
    max_entries: usize,
}

struct Shared {
    url: String,
    db: OnceCell<DatabaseConnection>,
    /// No start before this: one at a time, and not too often.
    next_try: std::sync::Mutex<Option<std::time::Instant>>,
}

impl PostgresIndex {
    pub fn new(url: &str, timeout: Duration, max_entries: usize) -> PostgresIndex {
        PostgresIndex {
            shared: Arc::new(Shared {
                url: url.to_owned(),
                db: OnceCell::new(),
                next_try: std::sync::Mutex::new(None),
            }),
            timeout,
            max_entries,
        }
    }

    pub async fn lookup(
        &self,
        probe: &Probe,
        threshold: u32,
        now_ms: u64,
    ) -> Result<Option<Hit>, String> {
        let values: Vec<Value> = vec![
            probe.tenant.clone().into(),
            probe.route.clone().into(),
            probe.context.to_vec().into(),
            dimensions(probe).into(),
            int(now_ms).into(),
            text(&probe.raw).into(),
            CANDIDATES.into(),
        ];
        let statement = Statement::from_sql_and_values(DbBackend::Postgres, LOOKUP, values);
        let rows = self
            .bounded(async |db| db.query_all(statement).await.map_err(|e| e.to_string()))
            .await?;
        let mut best: Option<Hit> = None;
        for row in rows {
            let Some((vector, answer)) = decode(&row) else {
                continue;
            };
            let similarity = probe.vector.similarity(&vector);
            if similarity >= threshold && best.as_ref().is_none_or(|b| similarity > b.similarity) {
                best = Some(Hit {
                    answer: Arc::new(answer),
                    similarity,
                });
            }
        }
        Ok(best)
    }

    pub async fn put(
        &self,
        probe: &Probe,
        answer: &Answer,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<(), String> {
        let usage = answer.usage;
        let values: Vec<Value> = vec![
            probe.tenant.clone().into(),
            probe.route.clone().into(),
            probe.context.to_vec().into(),
            dimensions(probe).into(),
            text(&probe.raw).into(),
            answer.body.to_vec().into(),
            answer.provider.clone().into(),
            answer.model.clone().into(),
            answer.native.into(),
            answer.source.clone().into(),
            answer.cost.to_db().into(),
            int(usage.prompt_tokens).into(),
            int(usage.cached_tokens).into(),
            int(usage.cache_write_tokens).into(),
            int(usage.completion_tokens).into(),
            int(now_ms.saturating_add(ttl_ms)).into(),
        ];
        let insert = Statement::from_sql_and_values(DbBackend::Postgres, INSERT, values);
        let bound = i64::try_from(self.max_entries).unwrap_or(i64::MAX);
        let trim_values: Vec<Value> = vec![
            probe.tenant.clone().into(),
            int(now_ms).into(),
            bound.into(),
        ];
        let trim = Statement::from_sql_and_values(DbBackend::Postgres, TRIM, trim_values);
        self.bounded(async |db| {
            db.execute(insert).await.map_err(|e| e.to_string())?;
            db.execute(trim).await.map_err(|e| e.to_string())
        })
        .await
        .map(|_| ())
    }

    /// One piece of work within the timeout. Until the pool is connected and
    /// the table made (in the background, so no request waits on a server
    /// that does not answer), every call fails at once.
    async fn bounded<T>(
        &self,
        work: impl AsyncFnOnce(&DatabaseConnection) -> Result<T, String>,
    ) -> Result<T, String> {
        let Some(db) = self.shared.db.get() else {
            self.start();
            return Err("not connected yet".to_owned());
        };
        match tokio::time::timeout(self.timeout, work(db)).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {} ms", self.timeout.as_millis())),
        }
    }

    fn start(&self) {
        {
            let now = crate::clock::monotonic();
            let mut next_try = self
                .shared
                .next_try
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if next_try.is_some_and(|at| now < at) {
                return;
            }
            *next_try = Some(now + INIT_TIMEOUT + RETRY_AFTER);
        }
        let shared = Arc::clone(&self.shared);
        actix_web::rt::spawn(async move {
            let result = tokio::time::timeout(INIT_TIMEOUT, connect(&shared.url)).await;
            let outcome = match result {
                Ok(Ok(db)) => shared.db.set(db).map_err(|_| "connected twice".to_owned()),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(format!("no answer within {} s", INIT_TIMEOUT.as_secs())),
            };
            if let Err(reason) = outcome {
                tracing::warn!(reason = %reason, "The semantic cache's PostgreSQL store is not available; lookups are misses.");
                // The next call after the pause tries again.
                let mut next_try = shared
                    .next_try
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                *next_try = Some(crate::clock::monotonic() + RETRY_AFTER);
            }
        });
    }
}

async fn connect(url: &str) -> Result<DatabaseConnection, String> {
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .max_connections(POOL)
        .connect_timeout(INIT_TIMEOUT)
        .acquire_timeout(INIT_TIMEOUT)
        .sqlx_logging(false);
    let db = Database::connect(options)
        .await
        .map_err(|e| e.to_string())?;
    for statement in SCHEMA {
        db.execute_unprepared(statement)
            .await
            .map_err(|e| format!("{e} (the semantic cache needs the pgvector extension)"))?;
    }
    Ok(db)
}

fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn dimensions(probe: &Probe) -> i32 {
    i32::try_from(probe.vector.dimensions()).unwrap_or(i32::MAX)
}

/// pgvector's text form, `[0.6,0.8,0]`: a float's display is its shortest exact form.
fn text(vector: &[f32]) -> String {
    let parts: Vec<String> = vector.iter().map(f32::to_string).collect();
    format!("[{}]", parts.join(","))
}

fn parse_vector(text: &str) -> Option<Vec<f32>> {
    let inner = text.trim().strip_prefix('[')?.strip_suffix(']')?;
    inner.split(',').map(|x| x.trim().parse().ok()).collect()
}

fn decode(row: &QueryResult) -> Option<(Quantized, Answer)> {
    let get_int = |column: &str| {
        row.try_get::<i64>("", column)
            .ok()
            .and_then(|v| u64::try_from(v).ok())
    };
    let embedding: String = row.try_get("", "embedding").ok()?;
    let vector = Quantized::from_f32(&parse_vector(&embedding)?)?;
    let body: Vec<u8> = row.try_get("", "body").ok()?;
    let answer = Answer {
        body: Bytes::from(body),
        provider: row.try_get("", "provider").ok()?,
        model: row.try_get("", "model").ok()?,
        usage: Usage {
            prompt_tokens: get_int("prompt_tokens")?,
            cached_tokens: get_int("cached_tokens")?,
            cache_write_tokens: get_int("cache_write_tokens")?,
            completion_tokens: get_int("completion_tokens")?,
            web_searches: 0,
        },
        native: row.try_get("", "native").ok()?,
        source: row.try_get("", "source").ok()?,
        cost: Nanos::new(get_int("cost_nanos")?),
    };
    Some((vector, answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_round_trip_through_pgvectors_text_form() {
        let vector = [0.6f32, -0.8, 0.0, 1e-7];
        assert_eq!(text(&vector), "[0.6,-0.8,0,0.0000001]");
        assert_eq!(parse_vector(&text(&vector)), Some(vector.to_vec()));
        assert_eq!(parse_vector("[1,x]"), None);
        assert_eq!(parse_vector("1,2"), None);
    }
}
