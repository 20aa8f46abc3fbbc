//! The end-user cells' set-up and readings. Before the cells, one request for each end user
//! (its first: its window in Redis is seeded from the ledger, then reserved in), so the cells
//! measure end users that Redis already holds; Redis's memory and keys and the Redis-mode
//! gateway's resident memory are read before that request wave, after it and after the cells,
//! so memory per end user can be read off. Each reading also closes a window of Redis's command
//! statistics (it resets them last), so the commands of the wave and of the cells are apart
//! from the tenant-only cells' before them.

use std::time::Duration;

use anyhow::{Result, bail};
use serde::Serialize;

use crate::generator::{self, Outcome};
use crate::plan::{CLOSED_CONNS, Mode, Runner};
use crate::procs::rss_kib;
use crate::report::RedisCommands;
use crate::resp::{RedisConn, info_field};
use crate::stack::{Redis, Stack};

/// End users a full run names: the wave before the cells gives each one its first request.
pub const END_USERS: u64 = 100_000;
/// A smoke run's: ten times fewer, so its wave takes seconds (`--end-users N` sets either).
pub const QUICK_END_USERS: u64 = 10_000;
/// Every tenant's end-user hashes: `tg:{<tenant>}:u:<hex id>:<window>` (`src/tenant/shared/keys.rs`).
pub const END_USER_KEYS: &str = "tg:{*}:u:*";
/// Bounds the wave against a stuck gateway: 100,000 first requests take about a minute here.
const WAVE_LIMIT: Duration = Duration::from_mins(10);
/// After the last answer, for the last settlements to leave Redis before it is read.
const SETTLE: Duration = Duration::from_secs(1);

/// The Redis server and the Redis-mode gateway at one moment.
#[derive(Debug, Default, Serialize)]
pub struct Reading {
    /// Redis's `used_memory` (`INFO memory`), bytes.
    pub redis_used_memory: Option<u64>,
    /// Keys matching `END_USER_KEYS`: one per end user and budget window.
    pub end_user_keys: Option<u64>,
    /// Every key of the database (`DBSIZE`).
    pub redis_keys: Option<u64>,
    /// The Redis-mode gateway's `VmRSS`.
    pub gateway_rss_kib: Option<u64>,
    /// Its `tollgate_end_user_loads_total`: end users whose window was read from the ledger.
    pub end_user_loads: Option<u64>,
    /// Its `tollgate_requests_total`, every route and status.
    pub requests: Option<u64>,
    /// Redis's `INFO commandstats` since the previous reading (or since it started).
    #[serde(skip)]
    pub commandstats: Option<String>,
    /// What could not be read.
    pub problems: Vec<String>,
}

impl Reading {
    /// What the gateway asked of Redis per request it answered since `earlier` (since Redis
    /// started without one).
    pub fn commands_since(&self, earlier: Option<&Reading>) -> Option<RedisCommands> {
        let before = earlier.map_or(Some(0), |earlier| earlier.requests)?;
        let requests = self.requests?.checked_sub(before)?;
        Some(RedisCommands::parse(
            requests,
            self.commandstats.as_deref()?,
        ))
    }
}

/// The wave of first requests.
#[derive(Debug, Serialize)]
pub struct Wave {
    pub requests: u64,
    pub ok: u64,
    pub errors: u64,
    pub unfinished: u64,
    pub first_error: Option<String>,
    pub millis: u64,
    pub rps: u64,
}

impl Wave {
    fn of(requests: u64, outcome: &Outcome) -> Self {
        Self {
            requests,
            ok: outcome.ok,
            errors: outcome.errors,
            unfinished: outcome.unfinished,
            first_error: outcome.first_error.clone(),
            millis: u64::try_from(outcome.window.as_millis()).unwrap_or(u64::MAX),
            rps: outcome.rps(),
        }
    }
}

/// Everything the end-user cells leave besides their cells.
#[derive(Debug, Serialize)]
pub struct EndUserRun {
    pub users: u64,
    pub wave: Wave,
    /// After the tenant-only Redis cells, before the wave.
    pub before: Reading,
    /// After the wave.
    pub seeded: Reading,
    /// After the end-user cells.
    pub after: Reading,
    /// Redis commands per request of the wave, and of the end-user cells.
    pub wave_commands: Option<RedisCommands>,
    pub cell_commands: Option<RedisCommands>,
}

impl EndUserRun {
    /// Redis's `used_memory` growth from before the wave to the end, per end-user key.
    pub fn redis_bytes_per_key(&self) -> Option<u64> {
        let grown = self
            .after
            .redis_used_memory?
            .checked_sub(self.before.redis_used_memory?)?;
        let keys = self
            .after
            .end_user_keys?
            .checked_sub(self.before.end_user_keys?)?;
        grown.checked_div(keys)
    }

    /// The gateway's resident memory growth over the same span, per end user.
    pub fn gateway_bytes_per_user(&self) -> Option<u64> {
        let grown = self
            .after
            .gateway_rss_kib?
            .checked_sub(self.before.gateway_rss_kib?)?;
        (grown * 1024).checked_div(self.users)
    }
}

/// The wave is done; the cells come next.
pub struct Ready {
    users: u64,
    wave: Wave,
    before: Reading,
    seeded: Reading,
}

/// Takes the reading before the wave: its command statistics are the tenant-only cells'.
pub async fn before(stack: &Stack) -> Reading {
    read(stack).await
}

/// Sends the wave, each end user's first request, and checks that Redis now holds them.
pub async fn seed(runner: &Runner<'_>, users: u64, before: Reading) -> Result<Ready> {
    let target = runner.mode_target("short", Mode::EndUsers { users })?;
    println!(
        "giving each of {users} end users a first request ({CLOSED_CONNS} connections, not measured)"
    );
    let outcome = generator::fill(&target, CLOSED_CONNS, users, WAVE_LIMIT).await;
    let wave = Wave::of(users, &outcome);
    println!(
        "  {} ok, {} errors, {} unfinished in {} ms ({} req/s){}",
        wave.ok,
        wave.errors,
        wave.unfinished,
        wave.millis,
        wave.rps,
        wave.first_error
            .as_deref()
            .map_or_else(String::new, |e| format!("; first error: {e}"))
    );
    tokio::time::sleep(SETTLE).await;
    let seeded = read(runner.stack).await;
    // Without the tier's template no request holds an end-user scope: the cells would measure
    // the tenant-only path under another name.
    if seeded.end_user_keys == Some(0) {
        bail!(
            "after {} answered first requests Redis holds no end-user key ({END_USER_KEYS}): \
             the tier's end_user template is not in force",
            wave.ok
        );
    }
    Ok(Ready {
        users,
        wave,
        before,
        seeded,
    })
}

impl Ready {
    /// The reading after the cells, and the whole record.
    pub async fn finish(self, stack: &Stack) -> EndUserRun {
        tokio::time::sleep(SETTLE).await;
        let after = read(stack).await;
        EndUserRun {
            users: self.users,
            wave_commands: self.seeded.commands_since(Some(&self.before)),
            cell_commands: after.commands_since(Some(&self.seeded)),
            wave: self.wave,
            before: self.before,
            seeded: self.seeded,
            after,
        }
    }
}

/// One reading; what cannot be read is noted in it, never fatal.
async fn read(stack: &Stack) -> Reading {
    let Redis::Running { gateway, addr, .. } = &stack.redis else {
        return Reading {
            problems: vec!["the Redis mode is not running".to_owned()],
            ..Reading::default()
        };
    };
    let mut reading = Reading {
        gateway_rss_kib: rss_kib(gateway.process.pid()),
        requests: crate::metric_sum(gateway.addr, "tollgate_requests_total").await,
        end_user_loads: crate::metric_sum(gateway.addr, "tollgate_end_user_loads_total").await,
        ..Reading::default()
    };
    let mut conn = match RedisConn::connect(*addr).await {
        Ok(conn) => conn,
        Err(error) => {
            reading.problems.push(format!("{error:#}"));
            return reading;
        }
    };
    if let Err(error) = redis_figures(&mut conn, &mut reading).await {
        reading.problems.push(format!("{error:#}"));
    }
    reading
}

/// Command statistics first and their reset last, so the window they close holds the
/// gateway's commands only, none of these readings'.
async fn redis_figures(conn: &mut RedisConn, reading: &mut Reading) -> Result<()> {
    reading.commandstats = Some(conn.info("commandstats").await?);
    reading.redis_used_memory = info_field(&conn.info("memory").await?, "used_memory");
    reading.redis_keys = Some(conn.dbsize().await?);
    reading.end_user_keys = Some(conn.count_keys(END_USER_KEYS).await?);
    conn.call(&["CONFIG", "RESETSTAT"]).await?;
    Ok(())
}
