//! sea-orm reads and writes of the usage ledger.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap, HashSet};

use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DatabaseTransaction, EntityTrait,
    FromQueryResult, QueryFilter, QueryOrder, QuerySelect, Select, TransactionTrait,
};
use serde::Serialize;

use entity::{usage, usage_total};

use super::event::{AttemptStatus, UsageEvent, UsageKind};
use super::insert::{self, Returning};
use crate::calendar::{Calendar, LIFETIME, Period, Window, day_keys};
use crate::ids::{KeyId, TenantId};
use crate::money::Nanos;
use crate::storage::StorageError;
use crate::telemetry::metrics::ratio;
use crate::tenant::spent::Spent;

/// Rows per INSERT statement at most. A statement may bind at most 65,535
/// parameters on PostgreSQL and 32,766 on SQLite (a usage row binds 33), so
/// a batch is split. Each connection keeps every shape it has run prepared,
/// and a prepared statement's size grows with its rows (SQLite: 186 KiB at
/// 64 rows, 741 KiB at 256): at 256 the shapes spreading over the pool's
/// connections grew the process by megabytes for minutes under steady load.
/// At 32 a connection's shapes take about 190 KiB in all.
const MAX_ROWS_PER_STATEMENT: usize = 32;

/// Inserts a batch in one transaction, and adds the rows it inserted to
/// `usage_totals` in the same one; events already present (same event id)
/// are skipped, so a replayed batch never duplicates a row or a total.
/// `calendar` says where an end user's day begins, for their totals.
pub async fn insert_batch<E: Borrow<UsageEvent>>(
    db: &DatabaseConnection,
    events: &[E],
    calendar: &Calendar,
) -> Result<(), StorageError> {
    insert_exported_batch(db, events, calendar, &[]).await
}

/// `insert_batch`, queuing each inserted row for every export sink named in
/// `sinks` in the same transaction (nothing more when there is none).
pub async fn insert_exported_batch<E: Borrow<UsageEvent>>(
    db: &DatabaseConnection,
    events: &[E],
    calendar: &Calendar,
    sinks: &[String],
) -> Result<(), StorageError> {
    if events.is_empty() {
        return Ok(());
    }
    // A batch is new unless it is replayed: the statements count what they
    // insert, and only when a count falls short are the rows named (returning
    // each inserted row's id took 3% of the gateway's CPU under load).
    if insert_new_batch(db, events, calendar, sinks).await? {
        return Ok(());
    }
    let txn = db.begin().await?;
    let backend = txn.get_database_backend();
    // Only the rows this statement inserted come back: the others were there already.
    let mut inserted: HashSet<String> = HashSet::with_capacity(events.len());
    for chunk in statement_chunks(events) {
        let statement = insert::statement(backend, chunk, Returning::EventIds);
        for row in txn.query_all(statement).await? {
            inserted.insert(row.try_get::<String>("", "event_id")?);
        }
    }
    let rows = Totals::rows(
        events
            .iter()
            .map(Borrow::borrow)
            .filter(|e| inserted.contains(&e.event_id.to_string())),
        calendar,
    );
    add_totals(&txn, rows).await?;
    if !sinks.is_empty() {
        let ids: Vec<&str> = inserted.iter().map(String::as_str).collect();
        crate::export::outbox::enqueue(&txn, sinks, &ids).await?;
    }
    txn.commit().await?;
    Ok(())
}

/// Inserts a batch none of whose events is in yet, with its totals; `false`
/// (and nothing written) if some were.
async fn insert_new_batch<E: Borrow<UsageEvent>>(
    db: &DatabaseConnection,
    events: &[E],
    calendar: &Calendar,
    sinks: &[String],
) -> Result<bool, StorageError> {
    let txn = db.begin().await?;
    let backend = txn.get_database_backend();
    for chunk in statement_chunks(events) {
        let statement = insert::statement(backend, chunk, Returning::Count);
        let inserted = txn.execute(statement).await?.rows_affected();
        if usize::try_from(inserted).ok() != Some(chunk.len()) {
            txn.rollback().await?;
            return Ok(false);
        }
    }
    add_totals(
        &txn,
        Totals::rows(events.iter().map(Borrow::borrow), calendar),
    )
    .await?;
    if !sinks.is_empty() {
        let ids: Vec<String> = events
            .iter()
            .map(|e| e.borrow().event_id.to_string())
            .collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        crate::export::outbox::enqueue(&txn, sinks, &ids).await?;
    }
    txn.commit().await?;
    Ok(true)
}

/// What a batch adds to `usage_totals`.
struct Totals;

impl Totals {
    /// One row per (tenant, kind, period, scope) the events touch, with their
    /// sums. Keys borrow from the events; each hour's day and month keys are
    /// formatted once. Days and months are those of `calendar` (the billing
    /// time zone), as budgets count them: the tenant, each key and each feature
    /// have a row per month, per day (a week is a sum of days) and over their
    /// lifetime; an end user per day and over their lifetime.
    fn rows<'a>(
        events: impl Iterator<Item = &'a UsageEvent>,
        calendar: &Calendar,
    ) -> Vec<usage_total::ActiveModel> {
        use sea_orm::ActiveValue::Set;
        let events: Vec<&UsageEvent> = events.collect();
        // Every zone's offset is a whole number of quarter hours, so a
        // quarter hour never straddles a local midnight.
        let mut periods: HashMap<u64, (String, String)> = HashMap::new();
        for event in &events {
            periods
                .entry(event.created_at_ms / QUARTER_HOUR_MS)
                .or_insert_with(|| {
                    let month = calendar.window(Period::Month, event.created_at_ms).key;
                    (calendar.day_key(event.created_at_ms), month)
                });
        }
        // Events first summed per scope set (one entry each), then each set
        // spread over its totals: nine map entries per event cost 1% of the
        // gateway's CPU under load.
        let mut by_scopes: HashMap<Scopes<'_>, (i64, i64)> = HashMap::new();
        for event in &events {
            let Some((day, month)) = periods.get(&(event.created_at_ms / QUARTER_HOUR_MS)) else {
                continue;
            };
            let tokens = i64::try_from(
                event
                    .usage
                    .prompt_tokens
                    .saturating_add(event.usage.completion_tokens),
            )
            .unwrap_or(i64::MAX);
            let scopes = (
                event.tenant.as_str(),
                event.key.as_str(),
                event.feature.as_str(),
                event.end_user.as_deref(),
                day.as_str(),
                month.as_str(),
            );
            let sum = by_scopes.entry(scopes).or_default();
            sum.0 = sum.0.saturating_add(event.charged.to_db());
            sum.1 = sum.1.saturating_add(tokens);
        }
        // In key order: replicas writing batches at once upsert the same rows
        // (a tenant's month, day and lifetime) and each transaction must lock
        // them in the same order, or PostgreSQL finds a deadlock and the
        // batch, and every seed waiting on its flush, fails.
        let mut sums: BTreeMap<(&str, &'static str, &str, &str), (i64, i64)> = BTreeMap::new();
        for ((tenant, key, feature, end_user, day, month), (charged, tokens)) in by_scopes {
            let end_user_rows = end_user.into_iter().flat_map(|user| {
                [
                    (TOTAL_END_USER_DAY, day, user),
                    (TOTAL_END_USER_LIFETIME, LIFETIME, user),
                ]
            });
            for (kind, period, scope) in [
                (TOTAL_TENANT, month, ""),
                (TOTAL_KEY, month, key),
                (TOTAL_FEATURE, month, feature),
                (TOTAL_DAY, day, ""),
                (TOTAL_KEY_DAY, day, key),
                (TOTAL_FEATURE_DAY, day, feature),
                (TOTAL_TENANT_LIFETIME, LIFETIME, ""),
                (TOTAL_KEY_LIFETIME, LIFETIME, key),
                (TOTAL_FEATURE_LIFETIME, LIFETIME, feature),
            ]
            .into_iter()
            .chain(end_user_rows)
            {
                let sum = sums.entry((tenant, kind, period, scope)).or_default();
                sum.0 = sum.0.saturating_add(charged);
                sum.1 = sum.1.saturating_add(tokens);
            }
        }
        sums.into_iter()
            .map(
                |((tenant_id, kind, period, scope), (charged, tokens))| usage_total::ActiveModel {
                    tenant_id: Set(tenant_id.to_owned()),
                    kind: Set(kind.to_owned()),
                    period: Set(period.to_owned()),
                    scope: Set(scope.to_owned()),
                    charged_nanos: Set(charged),
                    tokens: Set(tokens),
                },
            )
            .collect()
    }
}

/// An event's tenant, key, feature, end user, day and month.
type Scopes<'e> = (&'e str, &'e str, &'e str, Option<&'e str>, &'e str, &'e str);

const QUARTER_HOUR_MS: u64 = 900_000;
/// The tenant's, a key's and a feature's spend in one local month.
pub(super) const TOTAL_TENANT: &str = "tenant";
const TOTAL_KEY: &str = "key";
pub(super) const TOTAL_FEATURE: &str = "feature";
/// The tenant's, a key's and a feature's spend on one local day.
const TOTAL_DAY: &str = "day";
const TOTAL_KEY_DAY: &str = "key_day";
const TOTAL_FEATURE_DAY: &str = "feature_day";
/// An end user's spend on one local day (`billing.timezone`).
const TOTAL_END_USER_DAY: &str = "end_user_day";
const TOTAL_END_USER_LIFETIME: &str = "end_user_lifetime";
/// Spend since the first row: what a prepaid balance is drawn by.
const TOTAL_TENANT_LIFETIME: &str = "tenant_lifetime";
const TOTAL_KEY_LIFETIME: &str = "key_lifetime";
const TOTAL_FEATURE_LIFETIME: &str = "feature_lifetime";

async fn add_totals(
    txn: &DatabaseTransaction,
    rows: Vec<usage_total::ActiveModel>,
) -> Result<(), StorageError> {
    let mut rest = rows;
    while !rest.is_empty() {
        let after = rest.split_off(statement_rows(rest.len()));
        let chunk = std::mem::replace(&mut rest, after);
        usage_total::Entity::insert_many(chunk)
            .on_conflict(
                OnConflict::columns([
                    usage_total::Column::TenantId,
                    usage_total::Column::Kind,
                    usage_total::Column::Period,
                    usage_total::Column::Scope,
                ])
                .value(
                    usage_total::Column::ChargedNanos,
                    Expr::cust("usage_totals.charged_nanos + excluded.charged_nanos"),
                )
                .value(
                    usage_total::Column::Tokens,
                    Expr::cust("usage_totals.tokens + excluded.tokens"),
                )
                .to_owned(),
            )
            .exec_without_returning(txn)
            .await?;
    }
    Ok(())
}

/// The tenant's, its keys' and its features' spend in one occurrence of a period.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScopeSpend {
    pub tenant: Nanos,
    pub keys: HashMap<KeyId, Nanos>,
    pub features: HashMap<String, Nanos>,
}

impl ScopeSpend {
    fn add(&mut self, kind: &str, scope: String, charged: Nanos) {
        let sum = match kind {
            TOTAL_DAY => &mut self.tenant,
            TOTAL_KEY_DAY => self.keys.entry(KeyId::new(scope)).or_default(),
            TOTAL_FEATURE_DAY => self.features.entry(scope).or_default(),
            _ => return,
        };
        *sum = sum.saturating_add(charged);
    }
}

/// A tenant's spend and tokens so far in this local day, week and month and
/// over its lifetime, from `usage_totals`: what a store starts from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeriodTotals {
    /// This month's, of the tenant, each key and each feature.
    pub committed: Nanos,
    pub keys: HashMap<KeyId, Nanos>,
    pub features: HashMap<String, Nanos>,
    pub tokens_today: u64,
    pub tokens_this_month: u64,
    pub day: ScopeSpend,
    pub week: ScopeSpend,
    /// Since the first row: what a prepaid balance is drawn by.
    pub lifetime: ScopeSpend,
    pub credits: super::credits::CreditTotals,
}

impl PeriodTotals {
    /// The spend of the tenant (`None`, `None`), a key or a feature in every period.
    pub fn spent_of(&self, key: Option<&KeyId>, feature: Option<&str>) -> Spent {
        let of = |month: Nanos, pick: &dyn Fn(&ScopeSpend) -> Nanos| Spent {
            day: pick(&self.day),
            week: pick(&self.week),
            month,
            lifetime: pick(&self.lifetime),
        };
        match (key, feature) {
            (Some(key), _) => of(self.keys.get(key).copied().unwrap_or_default(), &|s| {
                s.keys.get(key).copied().unwrap_or_default()
            }),
            (None, Some(feature)) => of(
                self.features.get(feature).copied().unwrap_or_default(),
                &|s| s.features.get(feature).copied().unwrap_or_default(),
            ),
            (None, None) => of(self.committed, &|s| s.tenant),
        }
    }

    /// Every key with spend in some period.
    pub fn key_ids(&self) -> HashSet<&KeyId> {
        [
            &self.keys,
            &self.day.keys,
            &self.week.keys,
            &self.lifetime.keys,
        ]
        .into_iter()
        .flat_map(HashMap::keys)
        .collect()
    }

    pub fn feature_names(&self) -> HashSet<&String> {
        [
            &self.features,
            &self.day.features,
            &self.week.features,
            &self.lifetime.features,
        ]
        .into_iter()
        .flat_map(HashMap::keys)
        .collect()
    }

    /// The tenant's, keys' and features' spend in the current occurrence of `period`.
    pub fn spend(&self, period: Period) -> ScopeSpend {
        match period {
            Period::Day => self.day.clone(),
            Period::Week => self.week.clone(),
            Period::Month => ScopeSpend {
                tenant: self.committed,
                keys: self.keys.clone(),
                features: self.features.clone(),
            },
            Period::Lifetime => self.lifetime.clone(),
        }
    }
}

/// Days an end user's day totals are kept: the longest period made of days
/// (a month) and a margin for late settles.
pub const END_USER_DAYS_KEPT: u64 = 40;

/// Deletes end users', keys' and features' day totals before the local day
/// `before` (`YYYY-MM-DD`, so text order is date order); the tenant's day
/// totals (one row a day, which reports read), months and lifetimes stay.
pub async fn prune_end_user_days(
    db: &DatabaseConnection,
    before: &str,
) -> Result<u64, StorageError> {
    let deleted = usage_total::Entity::delete_many()
        .filter(usage_total::Column::Kind.is_in([
            TOTAL_END_USER_DAY,
            TOTAL_KEY_DAY,
            TOTAL_FEATURE_DAY,
        ]))
        .filter(usage_total::Column::Period.lt(before))
        .exec(db)
        .await?;
    Ok(deleted.rows_affected)
}

/// An end user's committed spend in `window`: the sum of its days' running
/// totals (at most 31 rows), or its lifetime total.
pub async fn end_user_committed(
    db: &DatabaseConnection,
    tenant: &TenantId,
    end_user: &str,
    window: &Window,
) -> Result<Nanos, StorageError> {
    let query = usage_total::Entity::find()
        .filter(usage_total::Column::TenantId.eq(tenant.as_str()))
        .filter(usage_total::Column::Scope.eq(end_user));
    let query = if window.key == LIFETIME {
        query
            .filter(usage_total::Column::Kind.eq(TOTAL_END_USER_LIFETIME))
            .filter(usage_total::Column::Period.eq(LIFETIME))
    } else {
        query
            .filter(usage_total::Column::Kind.eq(TOTAL_END_USER_DAY))
            .filter(usage_total::Column::Period.is_in(day_keys(window)))
    };
    let rows = query.all(db).await?;
    Ok(rows.iter().fold(Nanos::ZERO, |sum, row| {
        sum.saturating_add(Nanos::from_db(row.charged_nanos))
    }))
}

/// An end user's tokens (prompt and completion) on one local day.
pub async fn end_user_tokens_on(
    db: &DatabaseConnection,
    tenant: &TenantId,
    end_user: &str,
    day: &str,
) -> Result<u64, StorageError> {
    let row = usage_total::Entity::find()
        .filter(usage_total::Column::TenantId.eq(tenant.as_str()))
        .filter(usage_total::Column::Kind.eq(TOTAL_END_USER_DAY))
        .filter(usage_total::Column::Period.eq(day))
        .filter(usage_total::Column::Scope.eq(end_user))
        .one(db)
        .await?;
    Ok(row.map_or(0, |row| u64::try_from(row.tokens).unwrap_or(0)))
}

/// One indexed read, however many rows the month holds (end users' rows,
/// however many, are not read), and the tenant's top-ups. Days and months are
/// those of `calendar`.
pub async fn period_totals(
    db: &DatabaseConnection,
    tenant: &TenantId,
    calendar: &Calendar,
    now_ms: u64,
) -> Result<PeriodTotals, StorageError> {
    let today = calendar.day_key(now_ms);
    let month = calendar.window(Period::Month, now_ms).key;
    let week = day_keys(&calendar.window(Period::Week, now_ms));
    let mut periods: Vec<&str> = week.iter().map(String::as_str).collect();
    periods.extend([month.as_str(), LIFETIME]);
    let rows = usage_total::Entity::find()
        .filter(usage_total::Column::TenantId.eq(tenant.as_str()))
        .filter(usage_total::Column::Kind.is_in([
            TOTAL_TENANT,
            TOTAL_KEY,
            TOTAL_FEATURE,
            TOTAL_DAY,
            TOTAL_KEY_DAY,
            TOTAL_FEATURE_DAY,
            TOTAL_TENANT_LIFETIME,
            TOTAL_KEY_LIFETIME,
            TOTAL_FEATURE_LIFETIME,
        ]))
        .filter(usage_total::Column::Period.is_in(periods))
        .all(db)
        .await?;
    let mut totals = PeriodTotals {
        credits: super::credits::totals(db, tenant).await?,
        ..PeriodTotals::default()
    };
    let tokens = |t: i64| u64::try_from(t).unwrap_or(0);
    for row in rows {
        let charged = Nanos::from_db(row.charged_nanos);
        match row.kind.as_str() {
            TOTAL_TENANT if row.period == month => {
                totals.committed = charged;
                totals.tokens_this_month = tokens(row.tokens);
            }
            TOTAL_KEY if row.period == month => {
                totals.keys.insert(KeyId::new(row.scope), charged);
            }
            TOTAL_FEATURE if row.period == month => {
                totals.features.insert(row.scope, charged);
            }
            TOTAL_DAY | TOTAL_KEY_DAY | TOTAL_FEATURE_DAY if week.contains(&row.period) => {
                if row.period == today {
                    if row.kind == TOTAL_DAY {
                        totals.tokens_today = tokens(row.tokens);
                    }
                    totals.day.add(&row.kind, row.scope.clone(), charged);
                }
                totals.week.add(&row.kind, row.scope, charged);
            }
            TOTAL_TENANT_LIFETIME => totals.lifetime.tenant = charged,
            TOTAL_KEY_LIFETIME => {
                totals.lifetime.keys.insert(KeyId::new(row.scope), charged);
            }
            TOTAL_FEATURE_LIFETIME => {
                totals.lifetime.features.insert(row.scope, charged);
            }
            _ => {}
        }
    }
    Ok(totals)
}

/// Rows in the next INSERT of a batch with `remaining` rows: the largest power
/// of two that fits. Every statement then has one of six shapes, so the
/// driver's per-connection cache of prepared statements stays small and hits;
/// with one shape per batch size it held up to a hundred large statements per
/// connection and prepared a new one for most batches.
fn statement_rows(remaining: usize) -> usize {
    let capped = remaining.min(MAX_ROWS_PER_STATEMENT);
    if capped == 0 {
        return 0;
    }
    1 << capped.ilog2()
}

/// `items` in the statements' shapes (`statement_rows`).
fn statement_chunks<T>(items: &[T]) -> impl Iterator<Item = &[T]> {
    let mut rest = items;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (chunk, after) = rest.split_at(statement_rows(rest.len()));
        rest = after;
        Some(chunk)
    })
}

#[derive(Debug, FromQueryResult)]
struct Sum {
    total: Option<i64>,
}

/// The tenant's committed spend in a budget period, from the ledger.
pub async fn committed_in_period(
    db: &DatabaseConnection,
    tenant: &TenantId,
    period: &str,
) -> Result<Nanos, StorageError> {
    let row = usage::Entity::find()
        .select_only()
        .column_as(Expr::cust("CAST(SUM(charged_nanos) AS BIGINT)"), "total")
        .filter(usage::Column::TenantId.eq(tenant.as_str()))
        .filter(usage::Column::Period.eq(period))
        .into_model::<Sum>()
        .one(db)
        .await?;
    let detail = Nanos::from_db(row.and_then(|r| r.total).unwrap_or(0));
    Ok(detail.saturating_add(super::daily::charged_in_period(db, tenant, period).await?))
}

/// What a spend report groups by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    Tenant,
    Feature,
    Model,
    Provider,
    Route,
    Day,
    Status,
    Key,
    /// The door: `chat`, `responses`, `messages`, `embeddings`.
    Api,
    /// The end user named (`""` for requests that named none).
    EndUser,
    /// `tenant:end user`, for reports across tenants (end user ids are per tenant).
    TenantEndUser,
    /// The agent run (`""` for requests that named none, and for days rolled up).
    Session,
}

impl GroupBy {
    pub fn parse(text: &str) -> Option<GroupBy> {
        Some(match text {
            "tenant" => GroupBy::Tenant,
            "feature" => GroupBy::Feature,
            "model" => GroupBy::Model,
            "provider" => GroupBy::Provider,
            "route" => GroupBy::Route,
            "day" => GroupBy::Day,
            "status" => GroupBy::Status,
            "key" => GroupBy::Key,
            "api" => GroupBy::Api,
            "end_user" => GroupBy::EndUser,
            "session" => GroupBy::Session,
            _ => return None,
        })
    }

    fn column(self) -> usage::Column {
        match self {
            GroupBy::Tenant => usage::Column::TenantId,
            GroupBy::Feature => usage::Column::Feature,
            GroupBy::Model => usage::Column::Model,
            GroupBy::Provider => usage::Column::Provider,
            GroupBy::Route => usage::Column::Route,
            GroupBy::Day => usage::Column::Day,
            GroupBy::Status => usage::Column::Status,
            GroupBy::Key => usage::Column::KeyId,
            GroupBy::Api => usage::Column::Api,
            GroupBy::EndUser | GroupBy::TenantEndUser => usage::Column::EndUser,
            GroupBy::Session => usage::Column::Session,
        }
    }

    /// The group's key as text: a nullable column reads as `""` where null.
    fn key(self) -> sea_orm::sea_query::SimpleExpr {
        match self {
            GroupBy::EndUser => Expr::cust("COALESCE(end_user, '')"),
            GroupBy::Session => Expr::cust("COALESCE(session, '')"),
            GroupBy::TenantEndUser => Expr::cust("tenant_id || ':' || COALESCE(end_user, '')"),
            _ => Expr::col(self.column()).into(),
        }
    }

    /// The key's SQL over `usage_daily`, whose columns have the same names.
    pub(super) fn daily_key(self) -> sea_orm::sea_query::SimpleExpr {
        match self {
            GroupBy::TenantEndUser => Expr::cust("tenant_id || ':' || end_user"),
            // Days rolled up keep no session: they fall in the unnamed one.
            GroupBy::Session => Expr::cust("COALESCE(NULL, '')"),
            _ => Expr::cust(sea_orm::IdenStatic::as_str(&self.column())),
        }
    }
}

/// One group's sums as the database returns them, from detail rows or aggregates.
#[derive(Debug, Clone, Default, FromQueryResult)]
pub(super) struct RawSpendRow {
    pub key: String,
    pub requests: i64,
    pub attempts: i64,
    pub prompt_tokens: Option<i64>,
    pub cached_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub charged_nanos: Option<i64>,
    pub cost_nanos: Option<i64>,
    pub fallbacks: Option<i64>,
    pub failed_attempts: Option<i64>,
    pub cache_hits: Option<i64>,
}

impl RawSpendRow {
    fn add(&mut self, other: &RawSpendRow) {
        let plus = |a: Option<i64>, b: Option<i64>| Some(a.unwrap_or(0) + b.unwrap_or(0));
        self.requests += other.requests;
        self.attempts += other.attempts;
        self.prompt_tokens = plus(self.prompt_tokens, other.prompt_tokens);
        self.cached_tokens = plus(self.cached_tokens, other.cached_tokens);
        self.completion_tokens = plus(self.completion_tokens, other.completion_tokens);
        self.charged_nanos = plus(self.charged_nanos, other.charged_nanos);
        self.cost_nanos = plus(self.cost_nanos, other.cost_nanos);
        self.fallbacks = plus(self.fallbacks, other.fallbacks);
        self.failed_attempts = plus(self.failed_attempts, other.failed_attempts);
        self.cache_hits = plus(self.cache_hits, other.cache_hits);
    }
}

/// Detail groups with the rolled-up days' groups added: same key, one row;
/// in the keys' byte order, the same on every backend (PostgreSQL's
/// collation and its nulls-last would order them otherwise).
fn merge_rolled(mut rows: Vec<RawSpendRow>, rolled: Vec<RawSpendRow>) -> Vec<RawSpendRow> {
    let mut at: HashMap<String, usize> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| (r.key.clone(), i))
        .collect();
    for row in rolled {
        if let Some(&i) = at.get(&row.key) {
            rows[i].add(&row);
        } else {
            at.insert(row.key.clone(), rows.len());
            rows.push(row);
        }
    }
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    rows
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SpendRow {
    pub key: String,
    pub requests: u64,
    pub attempts: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub completion_tokens: u64,
    /// What the tenants were charged (their plans' prices; budgets count it).
    pub cost: Nanos,
    /// What the calls cost at the providers' prices.
    pub provider_cost: Nanos,
    /// `cost` less `provider_cost`, in the billing currency (negative where a
    /// negotiated price is below cost).
    pub margin: Margin,
    /// Requests served by a later target.
    pub fallbacks: u64,
    /// Attempts that did not serve the request (upstream, client, local errors, partial streams).
    pub failed_attempts: u64,
    pub cache_hits: u64,
    pub fallback_rate: f64,
    pub error_rate: f64,
    pub cache_hit_rate: f64,
    /// Prompt tokens the provider read from its prompt cache ÷ all prompt tokens.
    pub prompt_cache_hit_rate: f64,
}

/// A charge less a cost: a decimal with its sign, like the amounts beside it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Margin {
    pub negative: bool,
    pub amount: Nanos,
}

impl Margin {
    pub fn between(charged: Nanos, cost: Nanos) -> Margin {
        Margin {
            negative: cost > charged,
            amount: if cost > charged {
                cost.saturating_sub(charged)
            } else {
                charged.saturating_sub(cost)
            },
        }
    }
}

impl Serialize for Margin {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let sign = if self.negative { "-" } else { "" };
        serializer.collect_str(&format_args!("{sign}{}", self.amount))
    }
}

#[derive(Debug, Clone, Default)]
pub struct SpendFilter {
    pub tenant: Option<TenantId>,
    /// Inclusive, Unix ms.
    pub from_ms: Option<u64>,
    /// Exclusive, Unix ms.
    pub to_ms: Option<u64>,
}

/// The statuses a report counts as fallbacks, failed attempts and cache hits.
pub(super) const FALLBACKS: &[&str] = &["fallback_ok"];
pub(super) const FAILED: &[&str] = &["upstream_error", "client_error", "local_error", "partial"];
pub(super) const CACHE_HITS: &[&str] = &["cache_hit"];

/// Spend by group over the detail rows and the rolled-up days in the range.
pub async fn spend(
    db: &DatabaseConnection,
    filter: &SpendFilter,
    group_by: GroupBy,
) -> Result<Vec<SpendRow>, StorageError> {
    let sum = |column: &str| Expr::cust(format!("CAST(SUM({column}) AS BIGINT)"));
    let mut query = usage::Entity::find()
        .select_only()
        .column_as(group_by.key(), "key")
        .column_as(Expr::cust("COUNT(DISTINCT request_id)"), "requests")
        .column_as(Expr::cust("COUNT(*)"), "attempts")
        .column_as(sum("prompt_tokens"), "prompt_tokens")
        .column_as(sum("cached_tokens"), "cached_tokens")
        .column_as(sum("completion_tokens"), "completion_tokens")
        .column_as(sum("charged_nanos"), "charged_nanos")
        // Rows before plans carry no cost: theirs was the charge.
        .column_as(sum("COALESCE(cost_nanos, charged_nanos)"), "cost_nanos")
        .column_as(count_status(FALLBACKS), "fallbacks")
        .column_as(count_status(FAILED), "failed_attempts")
        .column_as(count_status(CACHE_HITS), "cache_hits");
    if let Some(tenant) = &filter.tenant {
        query = query.filter(usage::Column::TenantId.eq(tenant.as_str()));
    }
    let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    if let Some(from) = filter.from_ms {
        query = query.filter(usage::Column::CreatedAtMs.gte(ms(from)));
    }
    if let Some(to) = filter.to_ms {
        query = query.filter(usage::Column::CreatedAtMs.lt(ms(to)));
    }
    if group_by == GroupBy::TenantEndUser {
        query = query.group_by(usage::Column::TenantId);
    }
    let rows = query
        .group_by(group_by.column())
        .order_by_asc(group_by.column())
        .into_model::<RawSpendRow>()
        .all(db)
        .await?;
    let rows = merge_rolled(rows, super::daily::spend(db, filter, group_by).await?);
    let count = |v: Option<i64>| u64::try_from(v.unwrap_or(0)).unwrap_or(0);
    Ok(rows
        .into_iter()
        .map(|r| {
            let requests = count(Some(r.requests));
            let attempts = count(Some(r.attempts));
            let fallbacks = count(r.fallbacks);
            let failed_attempts = count(r.failed_attempts);
            let cache_hits = count(r.cache_hits);
            let charged = Nanos::from_db(r.charged_nanos.unwrap_or(0));
            let provider_cost = Nanos::from_db(r.cost_nanos.unwrap_or(0));
            SpendRow {
                key: r.key,
                requests,
                attempts,
                prompt_tokens: count(r.prompt_tokens),
                cached_tokens: count(r.cached_tokens),
                completion_tokens: count(r.completion_tokens),
                cost: charged,
                provider_cost,
                margin: Margin::between(charged, provider_cost),
                fallbacks,
                failed_attempts,
                cache_hits,
                fallback_rate: ratio(fallbacks, requests),
                error_rate: ratio(failed_attempts, attempts),
                cache_hit_rate: ratio(cache_hits, requests),
                prompt_cache_hit_rate: ratio(count(r.cached_tokens), count(r.prompt_tokens)),
            }
        })
        .collect())
}

/// `SUM(CASE WHEN status IN (…) THEN 1 ELSE 0 END)`: the statuses are our own constants.
fn count_status(statuses: &[&str]) -> sea_orm::sea_query::SimpleExpr {
    sum_status(statuses, "1")
}

/// `SUM(CASE WHEN status IN (…) THEN {value} ELSE 0 END)`.
pub(super) fn sum_status(statuses: &[&str], value: &str) -> sea_orm::sea_query::SimpleExpr {
    let list = statuses
        .iter()
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(", ");
    Expr::cust(format!(
        "CAST(SUM(CASE WHEN status IN ({list}) THEN {value} ELSE 0 END) AS BIGINT)"
    ))
}

/// `query` narrowed to the filter's tenant and time range.
fn filtered(mut query: Select<usage::Entity>, filter: &SpendFilter) -> Select<usage::Entity> {
    let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    if let Some(tenant) = &filter.tenant {
        query = query.filter(usage::Column::TenantId.eq(tenant.as_str()));
    }
    if let Some(from) = filter.from_ms {
        query = query.filter(usage::Column::CreatedAtMs.gte(ms(from)));
    }
    if let Some(to) = filter.to_ms {
        query = query.filter(usage::Column::CreatedAtMs.lt(ms(to)));
    }
    query
}

/// Rows in a time range (and of one tenant, if given), by id after `after_id`, at most `limit`.
pub async fn rows_page(
    db: &DatabaseConnection,
    filter: &SpendFilter,
    after_id: i64,
    limit: u64,
) -> Result<Vec<usage::Model>, StorageError> {
    let query = usage::Entity::find().filter(usage::Column::Id.gt(after_id));
    Ok(filtered(query, filter)
        .order_by_asc(usage::Column::Id)
        .limit(limit)
        .all(db)
        .await?)
}

/// Rows charged without the provider's usage: `orphaned` ones (in flight
/// when a reservation expired or the gateway stopped) and attempts whose
/// outcome is unknown (they reached the provider and ended without a usage
/// report). Both are charged their hold; oldest first, at most `limit`.
pub async fn unreconciled_rows(
    db: &DatabaseConnection,
    filter: &SpendFilter,
    limit: u64,
) -> Result<Vec<usage::Model>, StorageError> {
    let query = usage::Entity::find().filter(
        Condition::any()
            .add(usage::Column::Status.eq(AttemptStatus::Orphaned.as_str()))
            .add(usage::Column::UsageKind.eq(UsageKind::Unknown.as_str())),
    );
    Ok(filtered(query, filter)
        .order_by_asc(usage::Column::Id)
        .limit(limit)
        .all(db)
        .await?)
}

/// Every row of a tenant, oldest first (tests and reconciliation).
pub async fn tenant_rows(
    db: &DatabaseConnection,
    tenant: &TenantId,
) -> Result<Vec<usage::Model>, StorageError> {
    Ok(usage::Entity::find()
        .filter(usage::Column::TenantId.eq(tenant.as_str()))
        .order_by_asc(usage::Column::Id)
        .all(db)
        .await?)
}

/// The rows of some requests of a tenant (resolving reservations after a restart).
pub async fn rows_of_requests(
    db: &DatabaseConnection,
    tenant: &TenantId,
    requests: &[String],
) -> Result<Vec<usage::Model>, StorageError> {
    Ok(usage::Entity::find()
        .filter(usage::Column::TenantId.eq(tenant.as_str()))
        .filter(usage::Column::RequestId.is_in(requests.iter().map(String::as_str)))
        .all(db)
        .await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn every_batch_size_is_written_in_few_statement_shapes() {
        let mut shapes = BTreeSet::new();
        for batch in 1..=2_000 {
            let mut remaining = batch;
            let mut statements = 0;
            while remaining > 0 {
                let rows = statement_rows(remaining);
                assert!(rows >= 1 && rows <= remaining && rows <= MAX_ROWS_PER_STATEMENT);
                shapes.insert(rows);
                remaining -= rows;
                statements += 1;
            }
            assert!(
                statements <= batch.div_ceil(MAX_ROWS_PER_STATEMENT) + 5,
                "{batch}"
            );
        }
        assert_eq!(shapes.len(), 6, "{shapes:?}");
    }

    /// Concurrent batches lock the totals they upsert in one order, so two
    /// replicas' writes wait for each other instead of deadlocking.
    #[test]
    fn a_batch_s_totals_are_upserted_in_key_order() {
        use crate::ids::{KeyId, TenantId};
        use crate::ledger::AttemptStatus;
        let mut events = Vec::new();
        for (i, tenant) in ["beta", "alpha", "gamma"].into_iter().enumerate() {
            for user in ["u9", "u1", "u5", "u3"] {
                let mut event = UsageEvent::sample(AttemptStatus::Ok);
                event.tenant = TenantId::new(tenant);
                event.key = KeyId::new(format!("k{i}{user}"));
                event.feature = format!("f{user}");
                event.end_user = Some(user.to_owned());
                events.push(event);
            }
        }
        let calendar = Calendar::utc();
        let keys: Vec<(String, String, String, String)> = Totals::rows(events.iter(), &calendar)
            .into_iter()
            .map(|row| {
                let value = |v: sea_orm::ActiveValue<String>| v.unwrap();
                (
                    value(row.tenant_id),
                    value(row.kind),
                    value(row.period),
                    value(row.scope),
                )
            })
            .collect();
        assert!(keys.len() > 30, "{}", keys.len());
        assert!(keys.is_sorted(), "{keys:?}");
    }
}
