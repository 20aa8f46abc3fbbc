//! The shared quota store: every replica's TenantActor decides through the
//! same Redis, one atomic Lua script per decision (`scripts.rs`), so the
//! budget holds across replicas as it holds across requests in one.
//! Each call gives up after `storage.redis_timeout_ms`; a failure marks the
//! store down (`health.rs`) and the actor falls back to its tenant's policy.

mod args;
mod connection;
pub mod epoch;
pub mod expiry;
mod health;
mod keys;
pub mod restart;
mod scripts;
mod store;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::ThreadId;
use std::time::Duration;

use redis::Script;

use args::{EndUserArgs, ReserveArgs, SessionArgs};
use connection::{Backend, Conn};
pub use epoch::RestartPolicy;
use epoch::{Epochs, Next};

pub use health::StoreHealth;
use keys::TenantKeys;
pub use store::RedisQuota;

use super::book::{
    BalanceStatus, Granted, Limits, RateDecision, Refusal, Refused, ReserveRequest, Scope, Seed,
    Settled, UNITS_PER_REQUEST, bucket_capacity, clamped_max_tokens, worst_case,
};
use super::book::{EndUserRateLimited, EndUserTokensLimited};
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
    seed_window: Script,
    epoch: Script,
    settled: Script,
}

impl Scripts {
    fn all(&self) -> [&Script; 18] {
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
            &self.seed_window,
            &self.epoch,
            &self.settled,
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
                seed_window: Script::new(scripts::SEED_WINDOW),
                epoch: Script::new(epoch::EPOCH),
                settled: Script::new(epoch::SETTLED),
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

enum Attempt {
    Ok(Granted),
    Budget(Scope, Nanos),
    Refused(Refusal),
    NeedSeed,
    NeedEndUser,
    NeedCredit,
    NeedWindow(Period),
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

    pub async fn check_rate(
        &self,
        limits: &Limits,
        now_ms: u64,
    ) -> Result<RateDecision, StoreFailure> {
        let reply = self
            .store
            .run(
                &self.store.scripts.rate,
                &[self.keys.buckets()],
                &rate_args(limits, now_ms),
            )
            .await?;
        rate_decision(&reply, limits)
    }

    /// `check_rate`, then `reserve` if the rate allows: one script for both
    /// on the first attempt. `None` when the rate refused.
    pub async fn check_rate_and_reserve(
        &self,
        id: ReservationId,
        request: &ReserveRequest,
        limits: &Limits,
        meta: &str,
        now_ms: u64,
    ) -> Result<(RateDecision, Option<Reserved>), StoreFailure> {
        let full = worst_case(request, request.max_tokens);
        let call = self.attempt_call(id, request, limits, request.max_tokens, full, meta, now_ms);
        let mut args = rate_args(limits, now_ms);
        args.extend(call.args);
        let reply = self
            .store
            .run(&self.store.scripts.rate_reserve, &call.keys, &args)
            .await?;
        let rate = rate_decision(&reply, limits)?;
        if !rate.allowed {
            return Ok((rate, None));
        }
        let first = self.parse_attempt(
            reply.get(2..).unwrap_or_default(),
            id,
            request,
            limits,
            request.max_tokens,
            full,
            now_ms,
        )?;
        let reserved = self
            .after_first(first, id, request, limits, meta, now_ms)
            .await?;
        self.track(&reserved);
        Ok((rate, Some(reserved)))
    }

    /// Holds the worst case against every scope in one script; `clamp` mode
    /// retries once with what the tightest scope affords.
    /// `id` is the caller's: a refused attempt holds nothing, so the clamped
    /// retry reuses it, and a reply lost to a timeout can be released by it.
    pub async fn reserve(
        &self,
        id: ReservationId,
        request: &ReserveRequest,
        limits: &Limits,
        meta: &str,
        now_ms: u64,
    ) -> Result<Reserved, StoreFailure> {
        let full = worst_case(request, request.max_tokens);
        let first = self
            .attempt(id, request, limits, request.max_tokens, full, meta, now_ms)
            .await?;
        let reserved = self
            .after_first(first, id, request, limits, meta, now_ms)
            .await?;
        self.track(&reserved);
        Ok(reserved)
    }

    /// A hold Redis took is this replica's until it closes (see `epoch.rs`).
    fn track(&self, reserved: &Reserved) {
        if let Reserved::Granted(granted) = reserved {
            self.store.epochs.opened(granted.id.0);
        }
    }

    /// What follows a first attempt at the full worst case: in `clamp` mode a
    /// budget refusal is retried once with what the tightest scope affords.
    async fn after_first(
        &self,
        first: Attempt,
        id: ReservationId,
        request: &ReserveRequest,
        limits: &Limits,
        meta: &str,
        now_ms: u64,
    ) -> Result<Reserved, StoreFailure> {
        let full = worst_case(request, request.max_tokens);
        let (scope, remaining) = match first {
            Attempt::Ok(granted) => return Ok(Reserved::Granted(granted)),
            Attempt::Refused(refusal) => return Ok(Reserved::Refused(refusal)),
            Attempt::NeedSeed => return Ok(Reserved::NeedSeed),
            Attempt::NeedEndUser => return Ok(Reserved::NeedEndUser),
            Attempt::NeedCredit => return Ok(Reserved::NeedCredit),
            Attempt::NeedWindow(period) => return Ok(Reserved::NeedWindow(period)),
            Attempt::Budget(scope, remaining) => (scope, remaining),
        };
        let refused = |scope, remaining, needed| {
            Reserved::Refused(Refusal::Budget(Refused {
                scope,
                remaining,
                needed,
            }))
        };
        if limits.mode != BudgetMode::Clamp {
            return Ok(refused(scope, remaining, full));
        }
        let Some(max_tokens) = clamped_max_tokens(request, remaining, limits.clamp_floor_tokens)
        else {
            return Ok(refused(scope, remaining, full));
        };
        let amount = worst_case(request, max_tokens);
        Ok(
            match self
                .attempt(id, request, limits, max_tokens, amount, meta, now_ms)
                .await?
            {
                Attempt::Ok(granted) => Reserved::Granted(Granted {
                    clamped: true,
                    ..granted
                }),
                Attempt::Refused(refusal) => Reserved::Refused(refusal),
                Attempt::NeedSeed => Reserved::NeedSeed,
                Attempt::NeedEndUser => Reserved::NeedEndUser,
                Attempt::NeedCredit => Reserved::NeedCredit,
                Attempt::NeedWindow(period) => Reserved::NeedWindow(period),
                Attempt::Budget(scope, remaining) => refused(scope, remaining, amount),
            },
        )
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one script call with everything it decides on"
    )]
    async fn attempt(
        &self,
        id: ReservationId,
        request: &ReserveRequest,
        limits: &Limits,
        max_tokens: u32,
        amount: Nanos,
        meta: &str,
        now_ms: u64,
    ) -> Result<Attempt, StoreFailure> {
        let call = self.attempt_call(id, request, limits, max_tokens, amount, meta, now_ms);
        let reply = self
            .store
            .run(&self.store.scripts.reserve, &call.keys, &call.args)
            .await?;
        self.parse_attempt(&reply, id, request, limits, max_tokens, amount, now_ms)
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one script call with everything it decides on"
    )]
    fn attempt_call(
        &self,
        id: ReservationId,
        request: &ReserveRequest,
        limits: &Limits,
        max_tokens: u32,
        amount: Nanos,
        meta: &str,
        now_ms: u64,
    ) -> ScriptCall {
        let (mut keys, month) = self.book_keys(now_ms);
        let tokens = request
            .input_tokens
            .saturating_add(request.output_tokens(max_tokens));
        let budget = |b: Option<Nanos>| b.map_or_else(|| "-1".to_owned(), |b| b.get().to_string());
        let limit = |l: Option<u64>| l.map_or_else(|| "-1".to_owned(), |l| l.to_string());
        let end_user = request.end_user.as_ref().map(|hold| {
            let window = self.store.calendar.window(hold.limits.period, now_ms);
            keys.push(self.keys.end_user(&hold.id, &window.key));
            let previous = self.previous_window(hold, &window);
            keys.push(self.keys.end_user(&hold.id, &previous.key));
            EndUserArgs {
                field: format!(
                    "{}:{}:{}:{}",
                    keys::hex_id(&hold.id),
                    window.key,
                    hold.limits.period,
                    self.local_day(now_ms)
                ),
                budget: budget(hold.limits.budget),
                rpm: limit(hold.limits.rpm.map(u64::from)),
                ttl: end_user_ttl_ms(&window, now_ms).to_string(),
                daily_tokens: limit(hold.limits.daily_tokens),
                tpm: limit(hold.limits.tpm),
            }
        });
        // Kept while a call of the run may still be open, and its idle time after.
        let session = request.session.as_ref().map(|session| SessionArgs {
            key: self.keys.session(&session.id),
            budget: session.budget.get().to_string(),
            ttl: session
                .idle_ms
                .saturating_add(request.expires_at_ms.saturating_sub(now_ms))
                .max(1)
                .to_string(),
        });
        let args = ReserveArgs {
            now: now_ms.to_string(),
            day: self.today(now_ms),
            month,
            expires_at: request.expires_at_ms.to_string(),
            amount: amount.get().to_string(),
            alert: limits.mode == BudgetMode::Alert,
            tenant_budget: budget(limits.budget),
            key: request.key.as_str(),
            key_budget: budget(request.key_budget),
            feature: &request.feature,
            feature_budget: budget(limits.feature_budgets.get(&request.feature).copied()),
            tokens: tokens.to_string(),
            tpm: limit(limits.tokens.tpm),
            daily: limit(limits.tokens.daily),
            monthly: limit(limits.tokens.monthly),
            meta,
            ttl: MONTH_TTL_MS.to_string(),
            id: id.0.to_string(),
            local_day: self.local_day(now_ms),
            end_user,
            tenant_credits: limits.credits,
            key_credits: request.key_credits,
            periods: [
                limits.period,
                request.key_period,
                limits.feature_period(&request.feature),
            ],
            session,
        };
        ScriptCall {
            keys,
            args: vec![args.json()],
        }
    }

    /// The end-user context of a script that closes (see `euctx` in `scripts.rs`).
    fn end_user_context(&self, now_ms: u64) -> Vec<String> {
        let calendar = &self.store.calendar;
        let periods = [Period::Day, Period::Week, Period::Month];
        let windows: Vec<Window> = periods
            .iter()
            .map(|p| calendar.window(*p, now_ms))
            .collect();
        let mut args = vec![self.keys.end_user_prefix()];
        args.extend(windows.iter().map(|w| w.key.clone()));
        args.extend(
            windows
                .iter()
                .map(|w| end_user_ttl_ms(w, now_ms).to_string()),
        );
        args.push(LIFETIME_IDLE_TTL_MS.to_string());
        args.push(calendar.day_key(now_ms));
        args
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

    /// Starts an end user's window in Redis from the ledger's spend in it.
    pub async fn seed_end_user(
        &self,
        hold: &EndUserHold,
        seed: EndUserSeed,
        now_ms: u64,
    ) -> Result<(), StoreFailure> {
        let window = self.store.calendar.window(hold.limits.period, now_ms);
        let key = self.keys.end_user(&hold.id, &window.key);
        let args = [
            seed.committed.get().to_string(),
            end_user_ttl_ms(&window, now_ms).to_string(),
            self.local_day(now_ms),
            seed.tokens_today.to_string(),
        ];
        self.store
            .run(&self.store.scripts.seed_end_user, &[key], &args)
            .await?;
        Ok(())
    }

    /// An end user's committed in their current window (`None`: not seeded,
    /// the ledger has it) and what their calls hold, in this window or the one before.
    pub async fn end_user_status(
        &self,
        hold: &EndUserHold,
        now_ms: u64,
    ) -> Result<(Option<Nanos>, Nanos), StoreFailure> {
        let window = self.store.calendar.window(hold.limits.period, now_ms);
        let key = self.keys.end_user(&hold.id, &window.key);
        let previous = self.previous_window(hold, &window);
        let before = self.keys.end_user(&hold.id, &previous.key);
        let reply = self
            .store
            .run(&self.store.scripts.end_user_status, &[key, before], &[])
            .await?;
        if field(&reply, 0)? == "seed" {
            return Ok((None, nanos(&reply, 1)?));
        }
        Ok((Some(nanos(&reply, 1)?), nanos(&reply, 2)?))
    }

    /// Reads a `RESERVE` reply.
    #[expect(
        clippy::too_many_arguments,
        reason = "a reply is read against everything its script decided on"
    )]
    fn parse_attempt(
        &self,
        reply: &[String],
        id: ReservationId,
        request: &ReserveRequest,
        limits: &Limits,
        max_tokens: u32,
        amount: Nanos,
        now_ms: u64,
    ) -> Result<Attempt, StoreFailure> {
        let tokens = request
            .input_tokens
            .saturating_add(request.output_tokens(max_tokens));
        let end_user = request.end_user.as_ref();
        match field(reply, 0)? {
            "seed" => Ok(Attempt::NeedSeed),
            "seed_eu" => Ok(Attempt::NeedEndUser),
            "seed_credit" => Ok(Attempt::NeedCredit),
            "seed_w" => Period::parse(field(reply, 1)?)
                .map(Attempt::NeedWindow)
                .ok_or_else(|| StoreFailure("a window to seed of no known period".to_owned())),
            "eu_rate" => {
                let hold = end_user.ok_or_else(|| {
                    StoreFailure("an end user rate without an end user".to_owned())
                })?;
                let rpm = hold.limits.rpm.unwrap_or(1).max(1);
                let units = u64::try_from(number(reply, 1)?).unwrap_or(0);
                Ok(Attempt::Refused(Refusal::EndUserRate(EndUserRateLimited {
                    id: hold.id.clone(),
                    rpm,
                    retry_after_ms: UNITS_PER_REQUEST
                        .saturating_sub(units)
                        .div_ceil(u64::from(rpm)),
                })))
            }
            "eu_tokens" => {
                let hold = end_user.ok_or_else(|| {
                    StoreFailure("an end user token limit without an end user".to_owned())
                })?;
                let day_end = self.store.calendar.window(Period::Day, now_ms).end_ms;
                Ok(Attempt::Refused(Refusal::EndUserTokens(
                    EndUserTokensLimited {
                        id: hold.id.clone(),
                        kind: TokenLimitKind::Daily,
                        limit: hold.limits.daily_tokens.unwrap_or(0),
                        needed: tokens,
                        retry_after_ms: day_end.saturating_sub(now_ms),
                    },
                )))
            }
            "eu_tpm" => {
                let hold = end_user.ok_or_else(|| {
                    StoreFailure("an end user token limit without an end user".to_owned())
                })?;
                let tpm = hold.limits.tpm.unwrap_or(1).max(1);
                let units = i128::from(number(reply, 1)?);
                let missing = (i128::from(tokens) * 60_000 - units).max(0);
                Ok(Attempt::Refused(Refusal::EndUserTokens(
                    EndUserTokensLimited {
                        id: hold.id.clone(),
                        kind: TokenLimitKind::PerMinute,
                        limit: tpm,
                        needed: tokens,
                        retry_after_ms: u64::try_from(missing / i128::from(tpm))
                            .unwrap_or(u64::MAX),
                    },
                )))
            }
            "budget" => Ok(Attempt::Budget(
                refusing_scope(field(reply, 1)?, request),
                nanos(reply, 2)?,
            )),
            "tokens" => {
                let value = number(reply, 2)?;
                let refusal = match field(reply, 1)? {
                    "monthly" => monthly_refusal(
                        limits.tokens.monthly.unwrap_or(0),
                        tokens,
                        &self.store.calendar,
                        now_ms,
                    ),
                    "daily" => daily_refusal(
                        limits.tokens.daily.unwrap_or(0),
                        tokens,
                        &self.store.calendar,
                        now_ms,
                    ),
                    _ => per_minute_refusal(
                        limits.tokens.tpm.unwrap_or(0),
                        tokens,
                        i128::from(value),
                    ),
                };
                Ok(Attempt::Refused(Refusal::Tokens(refusal)))
            }
            "ok" => Ok(Attempt::Ok(granted(reply, id, limits, max_tokens, amount)?)),
            other => Err(StoreFailure(format!("unexpected reserve reply `{other}`"))),
        }
    }

    /// Commits `charged`, releases the rest; a second settle of the same id is a no-op.
    pub async fn settle(
        &self,
        id: ReservationId,
        charged: Nanos,
        used_tokens: u64,
        limits: &Limits,
        thresholds: &[u32],
        now_ms: u64,
    ) -> Result<Closed, StoreFailure> {
        let (keys, month) = self.book_keys(now_ms);
        let mut args = vec![
            id.0.to_string(),
            charged.get().to_string(),
            used_tokens.to_string(),
            month,
            self.today(now_ms),
            limits
                .tokens
                .tpm
                .map_or_else(|| "-1".to_owned(), |t| t.to_string()),
        ];
        args.extend(self.end_user_context(now_ms));
        args.push(limits.period.as_str().to_owned());
        if let Some(budget) = limits.budget {
            for percent in thresholds {
                args.push(percent.to_string());
                args.push(threshold_amount(budget, *percent).get().to_string());
            }
        }
        let reply = self
            .store
            .run(&self.store.scripts.settle, &keys, &args)
            .await?;
        self.store.epochs.closed(id.0);
        let unclosed = match field(&reply, 0)? {
            "closed" => Some(Settled::AlreadyClosed),
            "lost" => Some(Settled::Lost),
            _ => None,
        };
        if let Some(settled) = unclosed {
            return Ok(Closed {
                settled,
                committed: Nanos::ZERO,
                reserved: Nanos::ZERO,
                fired: Vec::new(),
            });
        }
        Ok(Closed {
            settled: Settled::Committed {
                reserved: nanos(&reply, 1)?,
            },
            committed: nanos(&reply, 2)?,
            reserved: nanos(&reply, 3)?,
            fired: reply
                .iter()
                .skip(4)
                .filter_map(|p| p.parse().ok())
                .collect(),
        })
    }

    /// Reservations past their expiry, still held (see `EXPIRED`).
    pub async fn expired(&self, now_ms: u64, limit: usize) -> Result<Vec<Expired>, StoreFailure> {
        let reply = self
            .store
            .run(
                &self.store.scripts.expired,
                &[self.keys.expiry(), self.keys.held()],
                &[now_ms.to_string(), limit.to_string()],
            )
            .await?;
        reply
            .chunks(2)
            .map(|chunk| {
                let id = number(chunk, 0)?;
                let record = field(chunk, 1)?;
                // `C`: counted in the credit hash (see `scripts.rs`).
                let record = record.strip_prefix('C').unwrap_or(record);
                let amount = record.split('|').next().unwrap_or_default();
                Ok(Expired {
                    id: ReservationId(u64::try_from(id).unwrap_or(0)),
                    amount: Nanos::new(amount.parse().unwrap_or(0)),
                    meta: record.splitn(8, '|').nth(7).unwrap_or_default().to_owned(),
                })
            })
            .collect()
    }

    /// Starts the month from the ledger unless another replica already did.
    pub async fn seed(
        &self,
        seed: &Seed,
        reached: &[u32],
        now_ms: u64,
    ) -> Result<(), StoreFailure> {
        let (month_key, _, _) = self.month_keys(now_ms);
        let mut args = vec![
            MONTH_TTL_MS.to_string(),
            seed.committed.get().to_string(),
            seed.tokens_this_month.to_string(),
            self.today(now_ms),
            seed.tokens_today.to_string(),
        ];
        push_scopes(&mut args, &seed.keys, &seed.features);
        args.extend(reached.iter().map(ToString::to_string));
        self.store
            .run(&self.store.scripts.seed, &[month_key], &args)
            .await?;
        Ok(())
    }

    /// Raises Redis's counters to the ledger's where they are lower; returns
    /// Redis's committed spend before (`None`: the month is not seeded).
    pub async fn raise(&self, seed: &Seed, now_ms: u64) -> Result<Option<Nanos>, StoreFailure> {
        let (month_key, _, _) = self.month_keys(now_ms);
        let mut args = vec![
            seed.committed.get().to_string(),
            seed.tokens_this_month.to_string(),
            self.today(now_ms),
            seed.tokens_today.to_string(),
        ];
        push_scopes(&mut args, &seed.keys, &seed.features);
        let reply = self
            .store
            .run(&self.store.scripts.raise, &[month_key], &args)
            .await?;
        if field(&reply, 0)? == "unseeded" {
            return Ok(None);
        }
        nanos(&reply, 1).map(Some)
    }

    /// Adds spend settled locally after the store came back.
    pub async fn absorb(
        &self,
        charged: Nanos,
        key: &str,
        feature: &str,
        tokens: u64,
        now_ms: u64,
    ) -> Result<(), StoreFailure> {
        let (month_key, _, _) = self.month_keys(now_ms);
        let mut keys = vec![month_key];
        keys.extend(self.window_keys(now_ms));
        self.store
            .run(
                &self.store.scripts.absorb,
                &keys,
                &[
                    charged.get().to_string(),
                    key.to_owned(),
                    feature.to_owned(),
                    tokens.to_string(),
                    self.today(now_ms),
                ],
            )
            .await?;
        Ok(())
    }

    /// After a journal replay: closes what `request` still holds, at
    /// `charged` (`None`: at its reserved amount, an orphan). Returns whether
    /// it held anything.
    pub async fn close_request(
        &self,
        request: &str,
        charged: Option<Nanos>,
        tokens: Option<u64>,
        now_ms: u64,
    ) -> Result<bool, StoreFailure> {
        let (keys, month) = self.book_keys(now_ms);
        let mut args = vec![
            request.to_owned(),
            charged.map_or_else(|| "-1".to_owned(), |c| c.get().to_string()),
            tokens.map_or_else(|| "-1".to_owned(), |t| t.to_string()),
            month,
            self.today(now_ms),
        ];
        args.extend(self.end_user_context(now_ms));
        let reply = self
            .store
            .run(&self.store.scripts.close_request, &keys, &args)
            .await?;
        Ok(field(&reply, 0)? == "closed")
    }

    /// Starts the tenant's balances from the ledger unless another replica did.
    pub async fn seed_credit(&self, seed: &Seed) -> Result<(), StoreFailure> {
        let mut args = vec![
            seed.lifetime.tenant.get().to_string(),
            seed.lifetime.keys.len().to_string(),
        ];
        for (key, spent) in &seed.lifetime.keys {
            args.push(key.to_string());
            args.push(spent.get().to_string());
        }
        for (row, key, amount) in &seed.credits.rows {
            args.push(row.to_string());
            args.push(key.as_ref().map(ToString::to_string).unwrap_or_default());
            args.push(amount.get().to_string());
        }
        self.store
            .run(
                &self.store.scripts.seed_credit,
                &[self.keys.credit(), self.keys.held()],
                &args,
            )
            .await?;
        Ok(())
    }

    /// Adds a top-up the ledger wrote (once by its row).
    pub async fn add_credit(
        &self,
        row: i64,
        key: Option<&KeyId>,
        amount: Nanos,
    ) -> Result<(), StoreFailure> {
        let args = [
            row.to_string(),
            key.map(ToString::to_string).unwrap_or_default(),
            amount.get().to_string(),
        ];
        self.store
            .run(&self.store.scripts.credit, &[self.keys.credit()], &args)
            .await?;
        Ok(())
    }

    /// The tenant's (`None`) or a key's balance (`None` outside: not seeded yet).
    pub async fn balance(
        &self,
        key: Option<&KeyId>,
    ) -> Result<Option<BalanceStatus>, StoreFailure> {
        let arg = key.map(ToString::to_string).unwrap_or_default();
        let reply = self
            .store
            .run(
                &self.store.scripts.credit_status,
                &[self.keys.credit()],
                &[arg],
            )
            .await?;
        if field(&reply, 0)? == "seed" {
            return Ok(None);
        }
        let at = if key.is_some() { 4 } else { 1 };
        Ok(Some(BalanceStatus::new(
            nanos(&reply, at)?,
            nanos(&reply, at + 1)?,
            nanos(&reply, at + 2)?,
        )))
    }

    /// Committed and reserved this month (`None`: not seeded yet).
    /// The tenant's committed spend in its budget's `period` and what calls
    /// in flight hold, or which hash must be seeded first.
    pub async fn status(
        &self,
        period: Period,
        now_ms: u64,
    ) -> Result<Result<(Nanos, Nanos), Unseeded>, StoreFailure> {
        let (month_key, previous_key, _) = self.month_keys(now_ms);
        let committed_in = match period {
            Period::Month => month_key.clone(),
            other => self
                .keys
                .window(&self.store.calendar.window(other, now_ms).key),
        };
        let reply = self
            .store
            .run(
                &self.store.scripts.status,
                &[month_key, previous_key, committed_in],
                &[],
            )
            .await?;
        Ok(match field(&reply, 0)? {
            "seed" => Err(Unseeded::Month),
            "seed_w" => Err(Unseeded::Window(period)),
            _ => Ok((nanos(&reply, 1)?, nanos(&reply, 2)?)),
        })
    }

    /// Starts a day, week or lifetime window from the ledger unless another replica did.
    pub async fn seed_window(
        &self,
        period: Period,
        seed: &Seed,
        now_ms: u64,
    ) -> Result<(), StoreFailure> {
        let window = self.store.calendar.window(period, now_ms);
        let ttl = if period == Period::Lifetime {
            LIFETIME_IDLE_TTL_MS
        } else {
            end_user_ttl_ms(&window, now_ms)
        };
        let spend = seed.spend(period);
        let mut args = vec![ttl.to_string(), spend.tenant.get().to_string()];
        push_scopes(&mut args, &spend.keys, &spend.features);
        self.store
            .run(
                &self.store.scripts.seed_window,
                &[self.keys.window(&window.key)],
                &args,
            )
            .await?;
        Ok(())
    }
}

/// A `RESERVE` that held: {'ok', id, over, committed, reserved, tpm units, balance}.
fn granted(
    reply: &[String],
    id: ReservationId,
    limits: &Limits,
    max_tokens: u32,
    amount: Nanos,
) -> Result<Granted, StoreFailure> {
    let committed = nanos(reply, 3)?;
    let reserved = nanos(reply, 4)?;
    let units = number(reply, 5)?;
    let remaining = if limits.credits {
        Some(nanos(reply, 6)?)
    } else {
        limits
            .budget
            .map(|b| b.saturating_sub(committed.saturating_add(reserved)))
    };
    Ok(Granted {
        id,
        amount,
        max_tokens,
        clamped: false,
        remaining,
        over_budget: field(reply, 2)? == "1",
        tokens: limits.tokens.tpm.map(|tpm| window(tpm, i128::from(units))),
    })
}

/// The scope a `RESERVE` budget refusal names.
fn refusing_scope(name: &str, request: &ReserveRequest) -> Scope {
    match (name, &request.end_user) {
        ("key", _) => Scope::Key(request.key.clone()),
        ("feature", _) => Scope::Feature(request.feature.clone()),
        ("end_user", Some(hold)) => Scope::EndUser(hold.id.clone()),
        ("session", _) => request
            .session
            .as_ref()
            .map_or(Scope::Tenant, |session| Scope::Session(session.id.clone())),
        ("credits", _) => Scope::Credits,
        ("key_credits", _) => Scope::KeyCredits(request.key.clone()),
        _ => Scope::Tenant,
    }
}

/// Keys' and features' spend as a script takes it: a count, then (name, amount) pairs, for each.
fn push_scopes(
    args: &mut Vec<String>,
    keys: &std::collections::HashMap<KeyId, Nanos>,
    features: &std::collections::HashMap<String, Nanos>,
) {
    args.push(keys.len().to_string());
    for (key, committed) in keys {
        args.push(key.to_string());
        args.push(committed.get().to_string());
    }
    args.push(features.len().to_string());
    for (feature, committed) in features {
        args.push(feature.clone());
        args.push(committed.get().to_string());
    }
}

/// The committed amount at which `percent` of `budget` is reached.
pub fn threshold_amount(budget: Nanos, percent: u32) -> Nanos {
    let amount = (u128::from(budget.get()) * u128::from(percent)).div_ceil(100);
    Nanos::new(u64::try_from(amount).unwrap_or(u64::MAX))
}

/// A script's keys and arguments.
struct ScriptCall {
    keys: Vec<String>,
    args: Vec<String>,
}

fn rate_args(limits: &Limits, now_ms: u64) -> Vec<String> {
    vec![
        now_ms.to_string(),
        limits.rpm.max(1).to_string(),
        bucket_capacity(limits).to_string(),
        UNITS_PER_REQUEST.to_string(),
    ]
}

/// Reads a `RATE` reply (also the head of a `RATE_RESERVE` one).
fn rate_decision(reply: &[String], limits: &Limits) -> Result<RateDecision, StoreFailure> {
    let allowed = field(reply, 0)? == "1";
    let units = number(reply, 1)?;
    Ok(RateDecision::from_bucket(
        allowed,
        u64::try_from(units).unwrap_or(0),
        limits,
    ))
}

fn field(reply: &[String], index: usize) -> Result<&str, StoreFailure> {
    reply
        .get(index)
        .map(String::as_str)
        .ok_or_else(|| StoreFailure(format!("short script reply {reply:?}")))
}

fn number(reply: &[String], index: usize) -> Result<i64, StoreFailure> {
    let text = field(reply, index)?;
    text.parse()
        .map_err(|_| StoreFailure(format!("not a number in script reply: `{text}`")))
}

fn nanos(reply: &[String], index: usize) -> Result<Nanos, StoreFailure> {
    Ok(Nanos::new(
        u64::try_from(number(reply, index)?.max(0)).unwrap_or(0),
    ))
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
