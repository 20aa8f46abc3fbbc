//! Whether a tenant's cache breakpoints pay for themselves, read from the
//! ledger. A cache write is priced above plain input (Anthropic: 1.25 ×), a
//! read below it (0.1 ×): breakpoints pay only if enough later calls read
//! what earlier ones wrote. Every `prompt_cache.review_interval_ms` each
//! replica sums, per tenant over the last `window_hours`, what its writes
//! cost above plain input and what its reads saved below it, at the prices
//! in force; a tenant in `auto` whose writes cost more (over at least
//! `min_writes` writing calls) gets no breakpoints until a later window says
//! otherwise. With its breakpoints off a tenant writes nothing, so its
//! window empties and the next review turns them on again: a fresh trial
//! every window.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, DatabaseConnection, DbErr, EntityTrait, FromQueryResult, QueryFilter, QuerySelect,
};
use serde::Serialize;

use crate::config::PriceTable;
pub use crate::config::PromptCacheConfig;
use crate::money::{CostAccumulator, Nanos, PricePerMTok};
use crate::state::Gateway;
use crate::telemetry::metrics::{Metric, gauge_set};

/// A tenant's choice for the gateway's breakpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Breakpoints {
    /// As the ledger's review says (on until it shows they do not pay).
    #[default]
    Auto,
    On,
    Off,
}

impl Breakpoints {
    pub fn as_str(self) -> &'static str {
        match self {
            Breakpoints::Auto => "auto",
            Breakpoints::On => "on",
            Breakpoints::Off => "off",
        }
    }
}

impl FromStr for Breakpoints {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Breakpoints::Auto),
            "on" => Ok(Breakpoints::On),
            "off" => Ok(Breakpoints::Off),
            other => Err(format!("`{other}` is not auto, on or off")),
        }
    }
}

/// One tenant's window, as the admin API reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Review {
    pub tenant: String,
    /// Calls in the window that wrote to a provider's cache.
    pub writing_calls: u64,
    pub cache_write_tokens: u64,
    pub cached_tokens: u64,
    /// What the writes cost above the same tokens at the plain input price.
    pub write_premium: Nanos,
    /// What the reads saved below the same tokens at the plain input price.
    pub read_savings: Nanos,
    /// The verdict for a tenant in `auto`.
    pub breakpoints: bool,
}

/// The latest reviews, shared by every request of this replica.
#[derive(Debug, Default)]
pub struct Advisor {
    reviews: RwLock<Arc<HashMap<String, Review>>>,
}

impl Advisor {
    /// Whether a tenant in `auto` gets breakpoints: yes, until a review says no.
    pub fn breakpoints(&self, tenant: &str) -> bool {
        self.read().get(tenant).is_none_or(|r| r.breakpoints)
    }

    /// Every tenant with cache writes or reads in the last window, by id.
    pub fn reviews(&self) -> Vec<Review> {
        let mut reviews: Vec<Review> = self.read().values().cloned().collect();
        reviews.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        reviews
    }

    fn read(&self) -> Arc<HashMap<String, Review>> {
        self.reviews
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn replace(&self, reviews: Vec<Review>) {
        for review in &reviews {
            let before = self.breakpoints(&review.tenant);
            if before != review.breakpoints {
                tracing::info!(tenant = %review.tenant, breakpoints = review.breakpoints,
                    write_premium = %review.write_premium, read_savings = %review.read_savings,
                    "The ledger's review changed the tenant's prompt-cache breakpoints.");
            }
        }
        let off = reviews.iter().filter(|r| !r.breakpoints).count();
        gauge_set(
            Metric::PromptBreakpointsOffTenants,
            &[],
            count_as_gauge(off),
        );
        let by_tenant = reviews.into_iter().map(|r| (r.tenant.clone(), r)).collect();
        *self.reviews.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(by_tenant);
    }
}

#[expect(
    clippy::cast_precision_loss,
    reason = "a count of tenants is far below 2^52"
)]
fn count_as_gauge(n: usize) -> f64 {
    n as f64
}

#[derive(Debug, FromQueryResult)]
struct Sums {
    tenant_id: String,
    provider: String,
    model: String,
    writing_calls: i64,
    cache_write_tokens: Option<i64>,
    cached_tokens: Option<i64>,
}

/// Reads the ledger since `since_ms` and judges every tenant in it.
pub async fn review(
    db: &DatabaseConnection,
    prices: &PriceTable,
    since_ms: u64,
    min_writes: u64,
) -> Result<Vec<Review>, DbErr> {
    let rows = sums_since(since_ms).into_model::<Sums>().all(db).await?;
    Ok(judge(&rows, prices, min_writes))
}

/// Per tenant, provider and model, the calls since `since_ms` that wrote to
/// or read from a provider's cache. Its filter is the partial index's own
/// expression, literals and all, so the review reads only those rows.
fn sums_since(since_ms: u64) -> sea_orm::Select<entity::usage::Entity> {
    use entity::usage::{Column, Entity};
    // PostgreSQL sums a BIGINT as NUMERIC; the cast reads the same everywhere.
    let sum = |column: &str| Expr::cust(format!("CAST(SUM({column}) AS BIGINT)"));
    let since = i64::try_from(since_ms).unwrap_or(i64::MAX);
    Entity::find()
        .select_only()
        .column(Column::TenantId)
        .column(Column::Provider)
        .column(Column::Model)
        .column_as(
            Expr::cust("CAST(SUM(CASE WHEN cache_write_tokens > 0 THEN 1 ELSE 0 END) AS BIGINT)"),
            "writing_calls",
        )
        .column_as(sum("cache_write_tokens"), "cache_write_tokens")
        .column_as(sum("cached_tokens"), "cached_tokens")
        .filter(Column::CreatedAtMs.gte(since))
        // A cache hit replays an earlier call's usage; it wrote and read nothing.
        .filter(Column::Status.ne("cache_hit"))
        .filter(Expr::cust(format!("({})", migration::CACHE_USAGE_ROWS)))
        .group_by(Column::TenantId)
        .group_by(Column::Provider)
        .group_by(Column::Model)
}

fn judge(rows: &[Sums], prices: &PriceTable, min_writes: u64) -> Vec<Review> {
    let count = |n: Option<i64>| n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
    let mut tenants: HashMap<&str, (Review, CostAccumulator, CostAccumulator)> = HashMap::new();
    for row in rows {
        let (review, premium, savings) =
            tenants.entry(row.tenant_id.as_str()).or_insert_with(|| {
                let review = Review {
                    tenant: row.tenant_id.clone(),
                    writing_calls: 0,
                    cache_write_tokens: 0,
                    cached_tokens: 0,
                    write_premium: Nanos::ZERO,
                    read_savings: Nanos::ZERO,
                    breakpoints: true,
                };
                (
                    review,
                    CostAccumulator::default(),
                    CostAccumulator::default(),
                )
            });
        let (writes, reads) = (count(row.cache_write_tokens), count(row.cached_tokens));
        review.writing_calls += count(Some(row.writing_calls));
        review.cache_write_tokens += writes;
        review.cached_tokens += reads;
        // A model no longer priced (removed since) is left out rather than guessed.
        let Some(price) = prices.get(&(row.provider.clone(), row.model.clone())) else {
            continue;
        };
        let step = |high: PricePerMTok, low: PricePerMTok| {
            PricePerMTok::from_nanos(high.nanos_per_mtok().saturating_sub(low.nanos_per_mtok()))
        };
        premium.add(writes, step(price.cache_write, price.input));
        savings.add(reads, step(price.input, price.cached_input));
    }
    let mut reviews: Vec<Review> = tenants
        .into_values()
        .map(|(mut review, premium, savings)| {
            review.write_premium = premium.total();
            review.read_savings = savings.total();
            review.breakpoints =
                review.writing_calls < min_writes || review.write_premium <= review.read_savings;
            review
        })
        .collect();
    reviews.sort_by(|a, b| a.tenant.cmp(&b.tenant));
    reviews
}

/// Runs the review every `prompt_cache.review_interval_ms`, when it is on.
pub fn spawn(gateway: Arc<Gateway>) -> Option<actix_rt::task::JoinHandle<()>> {
    let interval = gateway.config.prompt_cache.review_interval_ms;
    if interval == 0 {
        return None;
    }
    Some(actix_rt::spawn(async move {
        loop {
            actix_rt::time::sleep(Duration::from_millis(interval)).await;
            if let Err(error) = review_now(&gateway).await {
                tracing::warn!(error = %error, "Cannot review prompt-cache breakpoints now; keeping the last review.");
            }
        }
    }))
}

/// Reviews the last window now and makes it this replica's verdict.
pub async fn review_now(gw: &Gateway) -> Result<Vec<Review>, DbErr> {
    let settings = &gw.config.prompt_cache;
    let window_ms = settings.window_hours.saturating_mul(3_600_000);
    let since = gw.clock.now_ms().saturating_sub(window_ms);
    // Judged at the prices in force now, the dated ones included.
    let prices = gw.live().config.prices_at(gw.clock.now_ms());
    let reviews = review(gw.directory.db(), &prices, since, settings.min_writes).await?;
    gw.prompt_advisor.replace(reviews.clone());
    Ok(reviews)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Price;
    use sea_orm::{ConnectionTrait, QueryTrait, Statement};

    #[actix_rt::test]
    async fn the_review_reads_only_the_rows_that_used_a_cache() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
        let db = crate::storage::connect_and_migrate(&url, 1).await.unwrap();
        let backend = db.get_database_backend();
        let query = sums_since(1).build(backend);
        let plan = db
            .query_all(Statement::from_sql_and_values(
                backend,
                format!("EXPLAIN QUERY PLAN {}", query.sql),
                query.values.map(|v| v.0).unwrap_or_default(),
            ))
            .await
            .unwrap();
        let details: Vec<String> = plan
            .iter()
            .map(|row| row.try_get::<String>("", "detail").unwrap())
            .collect();
        assert!(
            details
                .iter()
                .any(|d| d.contains(&format!("USING INDEX {}", migration::CACHE_USAGE_INDEX))),
            "{details:?}"
        );
    }

    fn sums(tenant: &str, calls: i64, writes: i64, reads: i64) -> Sums {
        Sums {
            tenant_id: tenant.to_owned(),
            provider: "anthropic".to_owned(),
            model: "claude".to_owned(),
            writing_calls: calls,
            cache_write_tokens: Some(writes),
            cached_tokens: Some(reads),
        }
    }

    fn prices() -> PriceTable {
        let p = |s| PricePerMTok::parse_decimal(s).unwrap_or_default();
        let price = Price {
            input: p("3"),
            cached_input: p("0.3"),
            cache_write: p("3.75"),
            output: p("15"),
            long_context: None,
            web_search: None,
            hidden_output: crate::config::HiddenOutput::default(),
        };
        PriceTable::from([(("anthropic".to_owned(), "claude".to_owned()), price)])
    }

    #[test]
    fn writes_that_cost_more_than_the_reads_save_turn_breakpoints_off() {
        // 1M written: 0.75 above plain input. 2M read: 5.4 saved; 0.2M read: 0.54.
        let reviews = judge(
            &[
                sums("pays", 20, 1_000_000, 2_000_000),
                sums("wastes", 20, 1_000_000, 200_000),
            ],
            &prices(),
            20,
        );
        assert_eq!(reviews[0].tenant, "pays");
        assert_eq!(reviews[0].write_premium.to_string(), "0.75");
        assert_eq!(reviews[0].read_savings.to_string(), "5.4");
        assert!(reviews[0].breakpoints);
        assert_eq!(reviews[1].read_savings.to_string(), "0.54");
        assert!(!reviews[1].breakpoints);
    }

    #[test]
    fn too_few_writing_calls_or_an_unpriced_model_decide_nothing() {
        let reviews = judge(&[sums("new", 19, 1_000_000, 0)], &prices(), 20);
        assert!(reviews[0].breakpoints);
        let mut unpriced = sums("gone", 50, 1_000_000, 0);
        unpriced.model = "retired".to_owned();
        let reviews = judge(&[unpriced], &prices(), 20);
        assert_eq!(reviews[0].write_premium, Nanos::ZERO);
        assert!(reviews[0].breakpoints);
    }
}
