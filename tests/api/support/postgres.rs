//! A real PostgreSQL for the test binary: `initdb` + `postgres` in a temp dir on
//! a free loopback port, started once per process and shared by every test;
//! each test gets its own fresh database (`CREATE DATABASE t_<pid>_<n>`).
//!
//! The server outlives no test process: it runs under a small watchdog shell
//! whose stdin is a pipe held by this process (in the static below). When the
//! test binary exits, however it exits, the kernel closes the pipe, the shell
//! reads end-of-file, stops the postgres it started (by PID) and removes the
//! temp dir. PostgreSQL refuses to run as root, so as root (CI, this machine)
//! the server and the shell run as `nobody` through `setpriv`.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use sea_orm::{ConnectOptions, ConnectionTrait, Database};

use super::process::free_port;

/// The role `initdb` creates; loopback connections are trusted.
const SUPERUSER: &str = "tollgate";
const PORT_ATTEMPTS: usize = 5;
/// 60 s in 50 ms steps: initdb and a first start on 2 busy cores can be slow.
const READY_POLLS: usize = 1200;

/// Runs postgres (its arguments) in the background, then blocks on stdin. At
/// end-of-file (the test process has exited or gave up on this attempt) it
/// stops that postgres with a fast shutdown and removes the temp dir.
/// SIGINT from a terminal's Ctrl-C must not kill the shell before it cleans up.
const WATCHDOG: &str = r#"
"$@" </dev/null >>"$TOLLGATE_PG_LOG" 2>&1 &
pg=$!
trap '' INT
read -r _line
kill -INT "$pg" 2>/dev/null
wait "$pg"
[ -n "$TOLLGATE_PG_DIR" ] && rm -rf "$TOLLGATE_PG_DIR"
"#;

struct Server {
    port: u16,
    /// Never dropped: the pipe closes when the process exits, which stops the server.
    _watchdog: Mutex<(Child, ChildStdin)>,
}

static SERVER: LazyLock<Server> = LazyLock::new(start);
static NEXT_DATABASE: AtomicU64 = AtomicU64::new(1);

/// A new, empty database on the shared server (started on first use).
pub fn fresh_database_url() -> String {
    let server = &*SERVER;
    let name = format!(
        "t_{}_{}",
        std::process::id(),
        NEXT_DATABASE.fetch_add(1, Ordering::SeqCst)
    );
    let maintenance = url(server.port, "postgres");
    let statement = format!("CREATE DATABASE {name}");
    // Callers may be inside an actix/tokio runtime (which cannot block on
    // another), or in plain sync code: a short-lived thread with its own runtime serves both.
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut options = ConnectOptions::new(maintenance);
            options.max_connections(1).sqlx_logging(false);
            let db = Database::connect(options).await.unwrap();
            db.execute_unprepared(&statement).await.unwrap();
            db.close().await.unwrap();
        });
    })
    .join()
    .unwrap();
    url(server.port, &name)
}

fn url(port: u16, database: &str) -> String {
    format!("postgres://{SUPERUSER}@127.0.0.1:{port}/{database}")
}

fn start() -> Server {
    let bin = bin_dir();
    let owner = unprivileged_owner();
    let mut collisions = Vec::new();
    for _ in 0..PORT_ATTEMPTS {
        let dir = new_data_dir(&bin, owner);
        let port = free_port().port();
        match launch(&bin, owner, &dir, port) {
            Ok(server) => return server,
            Err(log) => collisions.push(format!("port {port}:\n{log}")),
        }
    }
    panic!(
        "PostgreSQL could not bind a loopback port in {PORT_ATTEMPTS} attempts:\n{}",
        collisions.join("\n")
    );
}

/// Where `initdb` and `postgres` are: `pg_config --bindir`, then Debian's
/// `/usr/lib/postgresql/<version>/bin` (newest first), then `PATH`.
fn bin_dir() -> PathBuf {
    let mut candidates = Vec::new();
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output()
        && output.status.success()
    {
        candidates.push(PathBuf::from(
            String::from_utf8_lossy(&output.stdout).trim(),
        ));
    }
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut versions: Vec<(u32, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let version = e.file_name().to_str()?.parse().ok()?;
                Some((version, e.path().join("bin")))
            })
            .collect();
        versions.sort_by_key(|(version, _)| std::cmp::Reverse(*version));
        candidates.extend(versions.into_iter().map(|(_, bin)| bin));
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path));
    }
    candidates
        .into_iter()
        .find(|dir| dir.join("initdb").is_file() && dir.join("postgres").is_file())
        .unwrap_or_else(|| {
            panic!(
                "the PostgreSQL server binaries (initdb, postgres) are not installed: \
                 install the Debian package `postgresql` (./scripts/test.sh does)"
            )
        })
}

/// A PostgreSQL whose `share/` has pgvector: `TOLLGATE_TEST_PGVECTOR_BIN`,
/// else where `./scripts/test.sh` installs one, else the usual server if it has it.
fn pgvector_bin_dir() -> PathBuf {
    let has_vector = |bin: &Path| {
        bin.join("../share/postgresql/extension/vector.control")
            .is_file()
            || bin.join("../share/extension/vector.control").is_file()
    };
    let mut candidates: Vec<PathBuf> = std::env::var_os("TOLLGATE_TEST_PGVECTOR_BIN")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    candidates.push(PathBuf::from(PGVECTOR_INSTALL));
    candidates.push(bin_dir());
    candidates
        .into_iter()
        .find(|bin| bin.join("postgres").is_file() && has_vector(bin))
        .unwrap_or_else(|| {
            panic!(
                "no PostgreSQL with pgvector: set TOLLGATE_TEST_PGVECTOR_BIN to its bin dir \
                 (./scripts/test.sh installs one in {PGVECTOR_INSTALL})"
            )
        })
}

/// Where `./scripts/test.sh` puts a PostgreSQL that carries pgvector.
const PGVECTOR_INSTALL: &str = "/usr/local/lib/tollgate-test/pgserver/pgserver/pginstall/bin";

/// `Some((uid, gid))` of `nobody` when this process is root, which postgres refuses.
fn unprivileged_owner() -> Option<(u32, u32)> {
    // /proc/self belongs to the process's effective user.
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let owner = passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        match fields.as_slice() {
            ["nobody", _, uid, gid, ..] => Some((uid.parse().ok()?, gid.parse().ok()?)),
            _ => None,
        }
    });
    Some(owner.unwrap_or_else(|| {
        panic!("tests run as root and PostgreSQL refuses root: no user `nobody` to run it as")
    }))
}

/// `program` as the unprivileged owner when we are root (`setpriv`, util-linux).
fn command(owner: Option<(u32, u32)>, program: &Path) -> Command {
    match owner {
        Some((uid, gid)) => {
            let mut command = Command::new("setpriv");
            command
                .arg(format!("--reuid={uid}"))
                .arg(format!("--regid={gid}"))
                .arg("--clear-groups")
                .arg("--")
                .arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// A temp dir (owned by the server's user) holding a fresh cluster in `data/`.
fn new_data_dir(bin: &Path, owner: Option<(u32, u32)>) -> PathBuf {
    // Kept: the watchdog removes it once the server has stopped.
    let dir = tempfile::Builder::new()
        .prefix("tollgate-pg-")
        .tempdir()
        .unwrap()
        .keep();
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).unwrap();
    }
    let output = command(owner, &bin.join("initdb"))
        .arg("-D")
        .arg(dir.join("data"))
        .args(["-U", SUPERUSER, "--auth=trust", "--encoding=UTF8"])
        // C collation: text sorts by bytes, as on SQLite.
        .args(["--locale=C", "--no-sync", "--no-instructions"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run initdb (setpriv is in util-linux): {e}"));
    assert!(
        output.status.success(),
        "initdb failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    dir
}

/// Starts the server under its watchdog; `Err(log)` when it could not listen
/// on `port` (someone took it), after which this attempt's dir is gone.
fn launch(bin: &Path, owner: Option<(u32, u32)>, dir: &Path, port: u16) -> Result<Server, String> {
    let watchdog = launch_watchdog(bin, owner, dir, port, true)?;
    Ok(Server {
        port,
        _watchdog: Mutex::new(watchdog),
    })
}

/// postgres on `dir/data` under a watchdog; `remove_dir` says whether the
/// watchdog deletes `dir` after stopping it (a server to be restarted keeps it).
fn launch_watchdog(
    bin: &Path,
    owner: Option<(u32, u32)>,
    dir: &Path,
    port: u16,
    remove_dir: bool,
) -> Result<(Child, ChildStdin), String> {
    let log = dir.join("postgres.log");
    // A restart appends to the same log: only what this start wrote counts.
    let log_start = std::fs::metadata(&log).map_or(0, |m| m.len());
    let log_text = || {
        let bytes = std::fs::read(&log).unwrap_or_default();
        let start = usize::try_from(log_start).unwrap().min(bytes.len());
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    };
    let mut child = command(owner, Path::new("sh"))
        .args(["-c", WATCHDOG, "sh"])
        .arg(bin.join("postgres"))
        .arg("-D")
        .arg(dir.join("data"))
        .arg("-k")
        .arg(dir)
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        // Durability is not under test here: no fsync (-F), no full pages, async commit.
        .args(["-F", "-c", "full_page_writes=off", "-c", "synchronous_commit=off"])
        // The suite's gateways are not shut down when their test ends (their
        // arbiters outlive the test's System), so each keeps its pooled
        // connections until the test binary exits: about two per gateway,
        // and the suite starts several hundred.
        .args(["-c", "max_connections=1500"])
        .env("TOLLGATE_PG_LOG", &log)
        .env(
            "TOLLGATE_PG_DIR",
            if remove_dir { dir.as_os_str() } else { "".as_ref() },
        )
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the postgres watchdog: {e}"));
    let stdin = child.stdin.take().unwrap();
    for _ in 0..READY_POLLS {
        let text = log_text();
        if text.contains("database system is ready to accept connections") {
            return Ok((child, stdin));
        }
        // Clients connecting during start-up get "the database system is starting up": not a failure.
        let failed = text.lines().any(|line| {
            (line.contains("FATAL") || line.contains("PANIC")) && !line.contains("starting up")
        });
        if failed {
            // Closing the pipe lets the watchdog reap postgres and remove the dir.
            drop(stdin);
            let _ = child.wait();
            if text.contains("could not bind") || text.contains("could not create any TCP/IP") {
                return Err(text);
            }
            panic!("PostgreSQL did not start:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = log_text();
    drop(stdin);
    let _ = child.wait();
    panic!("PostgreSQL was not ready after 60 s:\n{text}");
}

/// A PostgreSQL of one test's own, which the test may stop and start again on
/// the same data dir and port (a database outage). Stopped and removed on drop.
pub struct PrivateServer {
    bin: PathBuf,
    owner: Option<(u32, u32)>,
    dir: PathBuf,
    port: u16,
    watchdog: Option<(Child, ChildStdin)>,
    /// While the server is stopped: its port, held so no other test's
    /// listener takes it before the restart.
    keeper: Option<PortKeeper>,
}

/// Holds a loopback port without listening on it: a connection is refused,
/// as the stopped server's would be, and no other test can bind it.
struct PortKeeper(socket2::Socket);

impl PortKeeper {
    fn hold(port: u16) -> Option<PortKeeper> {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).ok()?;
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        socket.bind(&addr.into()).ok()?;
        Some(PortKeeper(socket))
    }

    /// Lets the port go.
    fn release(self) {
        drop(self.0);
    }
}

impl PrivateServer {
    pub fn start() -> PrivateServer {
        PrivateServer::start_from(bin_dir())
    }

    /// A server with the pgvector extension (the semantic cache's shared store).
    pub fn start_with_pgvector() -> PrivateServer {
        PrivateServer::start_from(pgvector_bin_dir())
    }

    fn start_from(bin: PathBuf) -> PrivateServer {
        let owner = unprivileged_owner();
        let mut collisions = Vec::new();
        for _ in 0..PORT_ATTEMPTS {
            let dir = new_data_dir(&bin, owner);
            let port = free_port().port();
            match launch_watchdog(&bin, owner, &dir, port, false) {
                Ok(watchdog) => {
                    return PrivateServer {
                        bin,
                        owner,
                        dir,
                        port,
                        watchdog: Some(watchdog),
                        keeper: None,
                    };
                }
                Err(log) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    collisions.push(format!("port {port}:\n{log}"));
                }
            }
        }
        panic!(
            "PostgreSQL could not bind a loopback port in {PORT_ATTEMPTS} attempts:\n{}",
            collisions.join("\n")
        );
    }

    /// The server's own maintenance database.
    pub fn url(&self) -> String {
        url(self.port, "postgres")
    }

    /// A fast shutdown (the watchdog sends SIGINT to the postgres it started); returns once it is down.
    pub fn stop(&mut self) {
        if let Some((mut child, stdin)) = self.watchdog.take() {
            drop(stdin);
            child.wait().unwrap();
            self.keeper = PortKeeper::hold(self.port);
        }
    }

    /// Starts it again on the same data dir and port. Another test's
    /// listener may still take the port in the instant between the keeper
    /// letting it go and the server binding it: then it tries again.
    pub fn restart(&mut self) {
        assert!(self.watchdog.is_none(), "the server is running");
        let mut failures = Vec::new();
        for _ in 0..RESTART_ATTEMPTS {
            if let Some(keeper) = self.keeper.take() {
                keeper.release();
            }
            match launch_watchdog(&self.bin, self.owner, &self.dir, self.port, false) {
                Ok(watchdog) => {
                    self.watchdog = Some(watchdog);
                    return;
                }
                Err(log) => failures.push(log),
            }
            std::thread::sleep(Duration::from_millis(200));
            self.keeper = PortKeeper::hold(self.port);
        }
        panic!("PostgreSQL did not restart:\n{}", failures.join("\n"));
    }
}

/// Restarts tried before a test fails: 20 × 200 ms for a port another test holds.
const RESTART_ATTEMPTS: u32 = 20;

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.stop();
        if let Some(keeper) = self.keeper.take() {
            keeper.release();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
