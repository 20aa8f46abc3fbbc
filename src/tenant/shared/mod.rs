//! The shared quota store: every replica's TenantActor decides through the
//! same Redis, one atomic Lua script per decision (`scripts.rs`), so the
//! budget holds across replicas as it holds across requests in one.
//! Each call gives up after `storage.redis_timeout_ms`; a failure marks the
//! store down (`health.rs`) and the actor falls back to its tenant's policy.
//!
//! Every script takes its arguments as one JSON object and the ones that
//! answer more than a word answer one, typed on this side in `args.rs`.
//! By what each part does: `decide.rs` (rate, reserve, settle, status), `seeding.rs` (counters started
//! or raised from the ledger), `upkeep.rs` (holds past their expiry, and
//! those a journal replay closed); this file keeps the connection, the keys
//! of a tenant's hashes and what the parts share.

mod args;
mod connection;
mod credit;
mod decide;
pub mod epoch;
pub mod expiry;
mod health;
mod keys;
mod leases;
pub mod restart;
mod scripts;
mod seeding;
mod store;
mod upkeep;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::ThreadId;
use std::time::Duration;

use redis::Script;

use args::{EndUserArgs, EndUserWindows, ReserveArgs, SessionArgs, WindowTtls};
use connection::{Backend, Conn};
pub use epoch::RestartPolicy;
use epoch::{Epochs, Next};

pub use health::StoreHealth;
use keys::TenantKeys;
pub use store::RedisQuota;

use super::book::{EndUserRateLimited, EndUserTokensLimited};
use super::book::{
    Granted, Limits, RateDecision, Refusal, Refused, ReserveRequest, Scope, Seed, Settled,
    UNITS_PER_REQUEST, bucket_capacity, clamped_max_tokens, worst_case,
};
use super::end_users::EndUserHold;
use super::seed::EndUserSeed;
use super::store::Closed;
use super::tokens::TokenLimitKind;
use super::tokens::{daily_refusal, monthly_refusal, per_minute_refusal, window};
use crate::calendar::{Calendar, Period, Window};
use crate::directory::BudgetMode;
use crate::ids::{KeyId, ReservationId, TenantId};
use crate::money::Nanos;

/// Month hashes outlive their month long enough for late settles and reports.
const MONTH_TTL_MS: u64 = 62 * 86_400_000;
/// An end user's window outlives its end by this much, for late settles.
const END_USER_MARGIN_MS: u64 = 2 * 86_400_000;
/// A lifetime never ends: its hash goes after this long unused, and comes
/// back from the ledger (flushed long before) when the end user does.
const LIFETIME_IDLE_TTL_MS: u64 = 35 * 86_400_000;

/// How long an end user's hash for `window` must live from `now_ms`.
fn end_user_ttl_ms(window: &Window, now_ms: u64) -> u64 {
    if window.end_ms == u64::MAX {
        return LIFETIME_IDLE_TTL_MS;
    }
    window
        .end_ms
        .saturating_sub(now_ms)
        .saturating_add(END_USER_MARGIN_MS)
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("shared quota store: {0}")]
pub struct StoreFailure(String);

struct Scripts {
    rate: Script,
    reserve: Script,
    rate_reserve: Script,
    settle: Script,
    expired: Script,
    seed: Script,
    raise: Script,
    absorb: Script,
    status: Script,
    close_request: Script,
    seed_end_user: Script,
    end_user_status: Script,
    seed_credit: Script,
    credit: Script,
    credit_status: Script,
    due_breakage: Script,
    mark_booked: Script,
    seed_window: Script,
    epoch: Script,
    settled: Script,
    lease: Script,
    unlease: Script,
    leases: Script,
}

impl Scripts {
    fn all(&self) -> [&Script; 23] {
        [
            &self.rate,
            &self.reserve,
            &self.rate_reserve,
            &self.settle,
            &self.expired,
            &self.seed,
            &self.raise,
            &self.absorb,
            &self.status,
            &self.close_request,
            &self.seed_end_user,
            &self.end_user_status,
            &self.seed_credit,
            &self.credit,
            &self.credit_status,
            &self.due_breakage,
            &self.mark_booked,
            &self.seed_window,
            &self.epoch,
            &self.settled,
            &self.lease,
            &self.unlease,
            &self.leases,
        ]
    }
}

/// One connection of a thread, made once by the first call that needs it.
type ConnCell = Arc<tokio::sync::OnceCell<Conn>>;

#[derive(Clone)]
pub struct SharedStore {
    backend: Arc<Backend>,
    /// `storage.redis_pool_size` multiplexed connections per thread, taken
    /// from the pool, used in turn: each pipelines the concurrent calls on it,
    /// and checking a connection out of the pool per call cost a round trip
    /// (the pool's UNWATCH + PING health check) on every decision. Each thread
    /// has its own, made on it, so the connection's driver task runs where
    /// its calls are made: shared by all, they ran on the thread that made
    /// them, and every call woke that thread and was woken back by it. The
    /// connections are dropped on any error, so the next call takes a fresh
    /// one from the pool. On a cluster each is a cluster connection of its own.
    connections: Arc<Mutex<HashMap<(ThreadId, usize), ConnCell>>>,
    pool_size: usize,
    next_connection: Arc<AtomicUsize>,
    /// A tenant's store takes one of the thread's connections for all its
    /// calls: a multiplexed connection runs its commands in the order they
    /// were sent, so a settle sent before the tenant's next decision is
    /// applied before it, though nobody awaits the settle.
    lane: Option<usize>,
    timeout: Duration,
    health: Arc<StoreHealth>,
    /// Redis's epoch as this replica saw it, and the holds it placed there.
    epochs: Arc<Epochs>,
    calendar: Calendar,
    scripts: Arc<Scripts>,
}

impl SharedStore {
    /// How often the store is probed (and its epoch looked at; one marked down, pinged).
    pub const PROBE_INTERVAL: Duration = Duration::from_millis(200);

    /// Builds the pool; nothing connects until the first call.
    /// `calendar`: where end users' budget periods begin.
    pub fn new(
        url: &str,
        pool_size: usize,
        timeout_ms: u64,
        calendar: Calendar,
    ) -> Result<SharedStore, String> {
        let timeout = Duration::from_millis(timeout_ms);
        let backend = Backend::open(url, pool_size, timeout)?;
        Ok(SharedStore {
            backend: Arc::new(backend),
            connections: Arc::new(Mutex::new(HashMap::new())),
            pool_size: pool_size.max(1),
            next_connection: Arc::new(AtomicUsize::new(0)),
            lane: None,
            timeout,
            health: Arc::new(StoreHealth::default()),
            epochs: Arc::new(Epochs::default()),
            calendar,
            scripts: Arc::new(Scripts {
                rate: Script::new(scripts::RATE),
                reserve: Script::new(scripts::RESERVE),
                rate_reserve: Script::new(scripts::RATE_RESERVE),
                settle: Script::new(scripts::SETTLE),
                expired: Script::new(scripts::EXPIRED),
                seed: Script::new(scripts::SEED),
                raise: Script::new(scripts::RAISE),
                absorb: Script::new(scripts::ABSORB),
                status: Script::new(scripts::STATUS),
                close_request: Script::new(scripts::CLOSE_REQUEST),
                seed_end_user: Script::new(scripts::SEED_END_USER),
                end_user_status: Script::new(scripts::END_USER_STATUS),
                seed_credit: Script::new(scripts::SEED_CREDIT),
                credit: Script::new(scripts::CREDIT),
                credit_status: Script::new(scripts::CREDIT_STATUS),
                due_breakage: Script::new(scripts::DUE_BREAKAGE),
                mark_booked: Script::new(scripts::MARK_BOOKED),
                seed_window: Script::new(scripts::SEED_WINDOW),
                epoch: Script::new(epoch::EPOCH),
                settled: Script::new(epoch::SETTLED),
                lease: Script::new(leases::LEASE),
                unlease: Script::new(leases::UNLEASE),
                leases: Script::new(leases::LEASES),
            }),
        })
    }

    pub fn health(&self) -> &Arc<StoreHealth> {
        &self.health
    }

    pub fn tenant(&self, tenant: &TenantId) -> SharedQuota {
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(tenant.as_str(), &mut hasher);
        let lane = std::hash::Hasher::finish(&hasher) % self.pool_size as u64;
        let mut store = self.clone();
        store.lane = usize::try_from(lane).ok();
        SharedQuota {
            store,
            keys: TenantKeys::new(tenant),
        }
    }

    /// Probes a store marked down until it answers, and on every tick looks
    /// at Redis's epoch (`epoch.rs`); runs for the life of the System.
    pub fn start_prober(&self, policy: RestartPolicy) {
        let store = self.clone();
        actix_rt::spawn(async move {
            let mut interval = tokio::time::interval(Self::PROBE_INTERVAL);
            loop {
                interval.tick().await;
                if !store.health.is_up() {
                    // Before tenants rejoin: a Redis back empty pauses them
                    // first, so it is up only once its epoch has been read.
                    if store.ping().await.is_ok() && store.look_at_epoch(&policy.replica).await {
                        store.health.mark_up();
                    }
                    continue;
                }
                if store.look_at_epoch(&policy.replica).await {
                    store.progress(&policy).await;
                }
            }
        });
    }

    /// Whether decisions wait for the holds a restarted Redis lost.
    pub fn paused(&self) -> bool {
        self.epochs.paused()
    }

    /// Reads the epoch (pausing decisions if it is a new one); whether it could.
    async fn look_at_epoch(&self, replica: &str) -> bool {
        let candidate = uuid::Uuid::new_v4().simple().to_string();
        let keys = [epoch::EPOCH_KEY.to_owned(), epoch::ALIVE_KEY.to_owned()];
        let args = [candidate, replica.to_owned()];
        let Ok(reply) = self.run_probing(&self.scripts.epoch, &keys, &args).await else {
            return false;
        };
        let Some(current) = reply.first() else {
            return false;
        };
        if self.epochs.observe(current) {
            tracing::error!(
                "The shared quota store restarted empty; no decision is made on it until the holds it lost have settled."
            );
        }
        true
    }

    async fn progress(&self, policy: &RestartPolicy) {
        let epoch = match self.epochs.next(policy, None) {
            Next::Nothing => return,
            Next::Resume => return self.resume(),
            Next::Say { epoch } => epoch,
        };
        let ttl = policy.hold_lifetime.as_millis().to_string();
        let args = [policy.replica.clone(), ttl];
        let keys = [epoch::settled_key(&epoch), epoch::ALIVE_KEY.to_owned()];
        let Ok(reply) = self.run(&self.scripts.settled, &keys, &args).await else {
            return;
        };
        let all_said = reply.first().map(|all| all == "1");
        if self.epochs.next(policy, all_said) == Next::Resume {
            self.resume();
        }
    }

    fn resume(&self) {
        self.epochs.resume();
        tracing::info!(
            "The holds the shared quota store lost have settled; decisions resume on it."
        );
    }

    /// One PING within the timeout (used by the prober and `/readyz`).
    pub async fn ping(&self) -> Result<(), StoreFailure> {
        let call = async {
            let ping = redis::cmd("PING");
            let answer = match &*self.backend {
                Backend::Single(pool) => {
                    let mut conn = pool.get().await.map_err(|e| StoreFailure(e.to_string()))?;
                    ping.query_async::<String>(&mut *conn).await
                }
                // A failed ping drops the connections: a new one reads the
                // slot map again, where a promoted replica has replaced its primary.
                Backend::Cluster(_) => {
                    let mut conn = self.connection().await?;
                    let answer = conn.ping().await;
                    if answer.is_err() {
                        self.drop_connections();
                    }
                    answer.map(|()| String::new())
                }
            };
            answer.map_err(|e| StoreFailure(e.to_string()))
        };
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(StoreFailure("timed out".to_owned())),
        }
    }

    /// Runs one script within the timeout; any failure marks the store down.
    async fn run(
        &self,
        script: &Script,
        keys: &[String],
        args: &[String],
    ) -> Result<Vec<String>, StoreFailure> {
        let invocation = invocation(script, keys, args);
        self.bounded(async |conn| invocation.invoke_async::<Vec<String>>(conn).await)
            .await
    }

    /// Runs a script whose one argument is `args` as JSON (`args.rs`).
    async fn run_args(
        &self,
        script: &Script,
        keys: &[String],
        args: &impl serde::Serialize,
    ) -> Result<Vec<String>, StoreFailure> {
        self.run(script, keys, &[args::json(args)]).await
    }

    /// `run_args` for a script that answers one JSON object (`args.rs`).
    async fn run_for<R: serde::de::DeserializeOwned>(
        &self,
        script: &Script,
        keys: &[String],
        args: &impl serde::Serialize,
    ) -> Result<R, StoreFailure> {
        let reply = self.run_args(script, keys, args).await?;
        let text = field(&reply, 0)?;
        args::reply(text).ok_or_else(|| StoreFailure(format!("unexpected script reply `{text}`")))
    }

    /// `run` for the prober: tried while the store is marked down too (it
    /// reads the epoch before marking the store up), and a failure leaves the
    /// marking to the calls that wait for answers.
    async fn run_probing(
        &self,
        script: &Script,
        keys: &[String],
        args: &[String],
    ) -> Result<Vec<String>, StoreFailure> {
        let invocation = invocation(script, keys, args);
        let call = async {
            let mut conn = self.connection().await?;
            invocation
                .invoke_async::<Vec<String>>(&mut conn)
                .await
                .map_err(|e| StoreFailure(e.to_string()))
        };
        let result = tokio::time::timeout(self.timeout, call)
            .await
            .unwrap_or_else(|_| Err(StoreFailure("no answer".to_owned())));
        if result.is_err() {
            self.drop_connections();
        }
        result
    }

    /// A plain value (breaker states shared between replicas).
    pub async fn get(&self, key: &str) -> Result<Option<String>, StoreFailure> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(key);
        self.bounded(async |conn| cmd.query_async::<Option<String>>(conn).await)
            .await
    }

    pub async fn set(&self, key: &str, value: &str, ttl_ms: u64) -> Result<(), StoreFailure> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(key).arg(value).arg("PX").arg(ttl_ms);
        self.bounded(async |conn| cmd.query_async::<()>(conn).await)
            .await
    }

    /// Requests holding a reservation made by `replica`, by tenant: on a
    /// cluster, on each primary in turn. Each SCAN step and each hash read is
    /// its own bounded call.
    pub async fn held_by_replica(
        &self,
        replica: &str,
    ) -> Result<Vec<(TenantId, String)>, StoreFailure> {
        let primaries = self.bounded(async |conn| conn.primaries().await).await?;
        let mut found = Vec::new();
        if primaries.is_empty() {
            self.held_on(None, replica, &mut found).await?;
        }
        for primary in &primaries {
            self.held_on(Some(primary), replica, &mut found).await?;
        }
        Ok(found)
    }

    async fn held_on(
        &self,
        node: Option<&connection::Primary>,
        replica: &str,
        found: &mut Vec<(TenantId, String)>,
    ) -> Result<(), StoreFailure> {
        let mut cursor = 0u64;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg("tg:{*}:h")
                .arg("COUNT")
                .arg(500);
            let (next, keys) = self
                .bounded(async |conn| conn.on_node::<(u64, Vec<String>)>(node, &scan).await)
                .await?;
            for key in keys {
                let Some(tenant) = key
                    .strip_prefix("tg:{")
                    .and_then(|rest| rest.strip_suffix("}:h"))
                    .and_then(TenantId::parse)
                else {
                    continue;
                };
                let mut read = redis::cmd("HVALS");
                read.arg(&key);
                let records = self
                    .bounded(async |conn| read.query_async::<Vec<String>>(conn).await)
                    .await?;
                for record in records {
                    let meta = record.splitn(8, '|').nth(7).unwrap_or_default();
                    let Ok(meta) = serde_json::from_str::<serde_json::Value>(meta) else {
                        continue;
                    };
                    if meta.get("replica").and_then(serde_json::Value::as_str) == Some(replica)
                        && let Some(request) =
                            meta.get("request_id").and_then(serde_json::Value::as_str)
                    {
                        found.push((tenant.clone(), request.to_owned()));
                    }
                }
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// This store's lane of the thread's multiplexed connections, or the
    /// next one in turn; made when the thread has none. Calls that find it
    /// not yet made wait for the one call making it: a burst of first calls
    /// on a thread would otherwise each open one.
    async fn connection(&self) -> Result<Conn, StoreFailure> {
        let slot = self.lane.unwrap_or_else(|| {
            self.next_connection.fetch_add(1, Ordering::Relaxed) % self.pool_size
        });
        let key = (std::thread::current().id(), slot);
        let cell = self.lock_connections().entry(key).or_default().clone();
        cell.get_or_try_init(|| self.connect())
            .await
            .cloned()
            .map_err(StoreFailure)
    }

    /// A new connection, with every script loaded into its server. A script
    /// the server lacks costs its first call two more round trips (NOSCRIPT,
    /// then the load) while later calls on the connection pass it, and then
    /// a tenant's settle could reach Redis after its next decision. A load
    /// that fails leaves the script to be loaded by its first call, as before.
    async fn connect(&self) -> Result<Conn, String> {
        let mut conn = self.backend.connect().await?;
        for script in self.scripts.all() {
            if let Err(error) = script.load_async(&mut conn).await {
                tracing::debug!(error = %error, "A script was not preloaded into Redis.");
                break;
            }
        }
        Ok(conn)
    }

    fn drop_connections(&self) {
        self.lock_connections().clear();
    }

    fn lock_connections(&self) -> std::sync::MutexGuard<'_, HashMap<(ThreadId, usize), ConnCell>> {
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// One call on the shared connection within the timeout; a failure
    /// marks the store down and drops the connection.
    async fn bounded<T>(
        &self,
        call: impl AsyncFnOnce(&mut Conn) -> redis::RedisResult<T>,
    ) -> Result<T, StoreFailure> {
        if !self.health.is_up() {
            return Err(StoreFailure("marked down".to_owned()));
        }
        let call = async {
            let mut conn = self.connection().await?;
            call(&mut conn)
                .await
                .map_err(|e| StoreFailure(e.to_string()))
        };
        let result = match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(StoreFailure(format!(
                "no answer within {} ms",
                self.timeout.as_millis()
            ))),
        };
        if let Err(failure) = &result {
            // A failure mostly means the server went away: every connection
            // is suspect, and a stale one must not fail the first call after
            // the store is back.
            self.drop_connections();
            self.health.mark_down(&failure.0);
        }
        result
    }
}

/// One script call's keys and arguments, ready to send.
fn invocation<'a>(
    script: &'a Script,
    keys: &[String],
    args: &[String],
) -> redis::ScriptInvocation<'a> {
    let mut invocation = script.prepare_invoke();
    for key in keys {
        invocation.key(key);
    }
    for arg in args {
        invocation.arg(arg);
    }
    invocation
}

/// What a shared reservation attempt ended in.
#[derive(Debug)]
pub enum Reserved {
    Granted(Granted),
    Refused(Refusal),
    /// The tenant's month is not in Redis yet: seed it from the ledger, then retry.
    NeedSeed,
    /// The end user's window is not in Redis yet: likewise.
    NeedEndUser,
    /// The tenant's balances are not in Redis yet: likewise.
    NeedCredit,
    /// A day, week or lifetime a budget runs over is not in Redis yet: likewise.
    NeedWindow(Period),
}

/// What must be seeded from the ledger before a status can be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unseeded {
    Month,
    Window(Period),
}

/// A held reservation past its expiry.
#[derive(Debug)]
pub struct Expired {
    pub id: ReservationId,
    pub amount: Nanos,
    /// The reservation's meta as the reserving replica wrote it.
    pub meta: String,
}

/// One tenant's view of the shared store.
#[derive(Clone)]
pub struct SharedQuota {
    store: SharedStore,
    keys: TenantKeys,
}

impl SharedQuota {
    pub fn health(&self) -> &Arc<StoreHealth> {
        &self.store.health
    }

    /// Whether decisions wait for the holds a restarted Redis lost.
    pub fn paused(&self) -> bool {
        self.store.paused()
    }

    /// This month's hash, last month's, and this month's key, in the billing time zone.
    fn month_keys(&self, now_ms: u64) -> (String, String, String) {
        let calendar = &self.store.calendar;
        let window = calendar.window(Period::Month, now_ms);
        let previous = calendar.window(Period::Month, window.start_ms.saturating_sub(1));
        (
            self.keys.month(&window.key),
            self.keys.month(&previous.key),
            window.key,
        )
    }

    /// The day, week and lifetime window hashes of `now_ms`.
    fn window_keys(&self, now_ms: u64) -> [String; 3] {
        [Period::Day, Period::Week, Period::Lifetime]
            .map(|p| self.keys.window(&self.store.calendar.window(p, now_ms).key))
    }

    /// The keys of a script that reserves or closes: the month, buckets, held
    /// reservations and their expiry, balances, last month, and the window
    /// hashes; and this month's key.
    fn book_keys(&self, now_ms: u64) -> (Vec<String>, String) {
        let (month_key, previous_key, month) = self.month_keys(now_ms);
        let mut keys = vec![
            month_key,
            self.keys.buckets(),
            self.keys.held(),
            self.keys.expiry(),
            self.keys.credit(),
            previous_key,
        ];
        keys.extend(self.window_keys(now_ms));
        (keys, month)
    }

    /// The local day key of `now_ms`.
    fn today(&self, now_ms: u64) -> String {
        self.store.calendar.day_key(now_ms)
    }

    /// The end users' windows now, for a script that closes (see `euctx` in `scripts.rs`).
    fn end_user_windows(&self, now_ms: u64) -> EndUserWindows {
        let calendar = &self.store.calendar;
        let [day, week, month] =
            [Period::Day, Period::Week, Period::Month].map(|p| calendar.window(p, now_ms));
        let ttl = |w: &Window| end_user_ttl_ms(w, now_ms).to_string();
        EndUserWindows {
            prefix: self.keys.end_user_prefix(),
            ttl: WindowTtls {
                day: ttl(&day),
                week: ttl(&week),
                month: ttl(&month),
                lifetime: LIFETIME_IDLE_TTL_MS.to_string(),
            },
            day: day.key,
            week: week.key,
            month: month.key,
            today: calendar.day_key(now_ms),
        }
    }

    /// The local day key of `now_ms` in the billing time zone.
    pub fn local_day(&self, now_ms: u64) -> String {
        self.store.calendar.day_key(now_ms)
    }

    /// The window before `window` of an end user's period (a lifetime's is itself).
    fn previous_window(&self, hold: &EndUserHold, window: &Window) -> Window {
        match window.start_ms.checked_sub(1) {
            Some(before) => self.store.calendar.window(hold.limits.period, before),
            None => window.clone(),
        }
    }

    /// The window an end user's limits put `now_ms` in.
    pub fn end_user_window(&self, hold: &EndUserHold, now_ms: u64) -> Window {
        self.store.calendar.window(hold.limits.period, now_ms)
    }
}

/// The committed amount at which `percent` of `budget` is reached.
pub fn threshold_amount(budget: Nanos, percent: u32) -> Nanos {
    let amount = (u128::from(budget.get()) * u128::from(percent)).div_ceil(100);
    Nanos::new(u64::try_from(amount).unwrap_or(u64::MAX))
}

fn field(reply: &[String], index: usize) -> Result<&str, StoreFailure> {
    reply
        .get(index)
        .map(String::as_str)
        .ok_or_else(|| StoreFailure(format!("short script reply {reply:?}")))
}

fn number(reply: &[String], index: usize) -> Result<i64, StoreFailure> {
    count(field(reply, index)?)
}

/// A count or an amount a script wrote as a decimal (`-1`: none).
fn count(text: &str) -> Result<i64, StoreFailure> {
    text.parse()
        .map_err(|_| StoreFailure(format!("not a number in script reply: `{text}`")))
}

fn nanos(reply: &[String], index: usize) -> Result<Nanos, StoreFailure> {
    amount(field(reply, index)?)
}

/// An amount a script wrote as a decimal (a negative one is none).
fn amount(text: &str) -> Result<Nanos, StoreFailure> {
    Ok(Nanos::new(u64::try_from(count(text)?).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_month_of_january_is_last_december() {
        let previous = |calendar: &Calendar, now_ms: u64| {
            let month = calendar.window(Period::Month, now_ms);
            calendar.window(Period::Month, month.start_ms - 1).key
        };
        // 2027-01-15
        assert_eq!(previous(&Calendar::utc(), 1_800_000_000_000), "2026-12");
        assert_eq!(previous(&Calendar::utc(), 1_796_040_000_000), "2026-10");
        // 2026-11-30T16:00Z is already 1 December in Shanghai.
        let shanghai = Calendar::named("Asia/Shanghai").unwrap();
        assert_eq!(previous(&shanghai, 1_796_054_400_000), "2026-11");
    }

    #[test]
    fn thresholds_are_integer_shares_of_the_budget() {
        let budget = Nanos::parse_decimal("10").unwrap();
        assert_eq!(threshold_amount(budget, 80).to_string(), "8");
        assert_eq!(threshold_amount(budget, 100), budget);
    }
}
