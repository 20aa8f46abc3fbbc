//! A real `redis-server` for one test, on a free loopback port, persistence
//! off. It runs under a watchdog shell whose stdin is a pipe held here: when
//! the `RedisServer` is dropped or the test process exits, however it exits,
//! the pipe closes and the shell kills that redis-server (by PID). `kill`,
//! `freeze` and `thaw` act on the server's own PID.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use super::process::free_port;

/// Databases of the shared server: one per gateway, so tests never share keys.
const DATABASES: u64 = 4096;

/// A port found free can be taken (by any test's outgoing connection) before
/// redis-server binds it; such a server exits at once, and a start tries
/// again on fresh ports.
const START_TRIES: usize = 4;
const ANSWER_POLLS: usize = 400;
const POLL: Duration = Duration::from_millis(25);

/// `TOLLGATE_TEST_REDIS=1` runs every gateway of the suite on Redis quotas,
/// each in its own database of one server started on first use.
pub fn suite_on_redis() -> bool {
    matches!(std::env::var("TOLLGATE_TEST_REDIS").as_deref(), Ok("1"))
}

static SHARED: LazyLock<Mutex<RedisServer>> = LazyLock::new(|| {
    for _ in 0..START_TRIES {
        let mut server = RedisServer::unstarted(Vec::new(), false);
        server.spawn();
        let started = (0..ANSWER_POLLS).find_map(|_| {
            let seen = server.started();
            if seen.is_none() {
                std::thread::sleep(POLL);
            }
            seen
        });
        if started == Some(true) {
            return Mutex::new(server);
        }
    }
    panic!("the suite's redis-server did not answer");
});
static NEXT_DATABASE: AtomicU64 = AtomicU64::new(1);

/// A database of its own on the suite's shared server.
pub fn fresh_database_url() -> String {
    let port = SHARED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .port;
    let n = NEXT_DATABASE.fetch_add(1, Ordering::SeqCst) % DATABASES;
    format!("redis://127.0.0.1:{port}/{n}")
}

const WATCHDOG: &str = r#"
redis-server "$@" </dev/null >/dev/null 2>&1 &
r=$!
echo "$r"
trap '' INT
read -r _line
kill -CONT "$r" 2>/dev/null
kill -KILL "$r" 2>/dev/null
wait "$r" 2>/dev/null
"#;

pub struct RedisServer {
    port: u16,
    pid: Option<u32>,
    watchdog: Option<(Child, ChildStdin)>,
    dir: tempfile::TempDir,
    /// More `redis-server` arguments (a cluster node's).
    extra: Vec<String>,
    /// A cluster node's bus port, found free like the port. Redis's default,
    /// the port + 10,000, is a port nobody checked: any test's outgoing
    /// connection may hold it, and the node then exits at start.
    bus_port: Option<u16>,
}

impl RedisServer {
    pub async fn start() -> RedisServer {
        RedisServer::start_on_fresh_ports(&[], false).await
    }

    /// A cluster node: `--cluster-enabled yes` on a bus port of its own,
    /// with more arguments (`--cluster-node-timeout`, …).
    pub async fn start_cluster_node(extra: &[&str]) -> RedisServer {
        RedisServer::start_on_fresh_ports(extra, true).await
    }

    async fn start_on_fresh_ports(extra: &[&str], cluster: bool) -> RedisServer {
        let extra: Vec<String> = extra.iter().map(|a| (*a).to_owned()).collect();
        for _ in 0..START_TRIES {
            let mut server = RedisServer::unstarted(extra.clone(), cluster);
            if server.launch().await {
                return server;
            }
        }
        panic!("redis-server did not answer on {START_TRIES} pairs of fresh ports");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn is_running(&self) -> bool {
        self.pid.is_some()
    }

    fn unstarted(extra: Vec<String>, cluster: bool) -> RedisServer {
        RedisServer {
            port: free_port().port(),
            pid: None,
            watchdog: None,
            dir: tempfile::tempdir().unwrap(),
            extra,
            bus_port: cluster.then(|| free_port().port()),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Starts redis-server and waits for its answer; false when it exited
    /// (its port was taken) or stayed silent, with nothing left running.
    async fn launch(&mut self) -> bool {
        self.spawn();
        for _ in 0..ANSWER_POLLS {
            match self.started() {
                Some(true) => return true,
                Some(false) => break,
                // On the runtime, so a gateway on this thread (a restart) runs on.
                None => actix_rt::time::sleep(POLL).await,
            }
        }
        self.kill();
        false
    }

    /// One look at a starting server: it answered, it is gone, or not yet.
    fn started(&self) -> Option<bool> {
        if self.ping() {
            return Some(true);
        }
        self.exited().then_some(false)
    }

    /// The server's process is gone: with the watchdog not reaping it, an
    /// exited redis-server stays a zombie, `Z` in its `stat`.
    fn exited(&self) -> bool {
        let Some(pid) = self.pid else { return true };
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
            Err(_) => true,
        }
    }

    fn spawn(&mut self) {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("redis-watchdog")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--dir", &self.dir.path().display().to_string()])
            .args(["--databases", &DATABASES.to_string()])
            .args(self.bus_port.iter().flat_map(|bus| {
                [
                    "--cluster-enabled".to_owned(),
                    "yes".to_owned(),
                    "--cluster-port".to_owned(),
                    bus.to_string(),
                ]
            }))
            .args(&self.extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("redis-server (scripts/test.sh installs it): {e}"));
        let stdin = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while stdout.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
            line.push(byte[0]);
        }
        self.pid = Some(String::from_utf8(line).unwrap().trim().parse().unwrap());
        self.watchdog = Some((child, stdin));
    }

    fn ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
        if stream.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut reply = [0u8; 7];
        stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
    }

    /// How many clients are connected, not counting this question's own.
    pub fn connected_clients(&self) -> usize {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        stream.write_all(b"CLIENT LIST\r\n").unwrap();
        let mut reply = Vec::new();
        let mut chunk = [0u8; 4096];
        // A bulk string: `$<len>\r\n<len bytes>\r\n`.
        loop {
            let n = stream.read(&mut chunk).unwrap();
            reply.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&reply);
            if let Some((header, body)) = text.split_once("\r\n") {
                let len: usize = header.trim_start_matches('$').parse().unwrap();
                if body.len() >= len + 2 {
                    return body[..len].lines().count() - 1;
                }
            }
        }
    }

    /// `redis-cli` against this server; its output, trimmed.
    pub fn cli(&self, args: &[&str]) -> String {
        let output = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .unwrap();
        assert!(output.status.success(), "redis-cli {args:?}: {output:?}");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// A tenant's committed and reserved spend this month, as Redis holds them.
    pub fn month_spend(&self, tenant: &str) -> (i64, i64) {
        let key = self.cli(&["--scan", "--pattern", &format!("tg:{{{tenant}}}:m:*")]);
        assert!(
            !key.is_empty() && !key.contains('\n'),
            "month keys: {key:?}"
        );
        let fields = self.cli(&["HMGET", &key, "c", "r"]);
        let mut values = fields.lines().map(|v| v.trim().parse::<i64>().unwrap_or(0));
        (values.next().unwrap_or(0), values.next().unwrap_or(0))
    }

    /// SIGKILL: the data is gone, as after a crash without persistence.
    pub fn kill(&mut self) {
        if let Some((mut child, stdin)) = self.watchdog.take() {
            drop(stdin);
            let _ = child.wait();
        }
        self.pid = None;
    }

    /// A fresh, empty server on the same port.
    pub async fn restart(&mut self) {
        self.kill();
        assert!(
            self.launch().await,
            "redis-server did not answer again on port {}",
            self.port
        );
    }

    fn signal(&self, signal: &str) {
        let pid = self.pid.unwrap().to_string();
        let status = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// SIGSTOP: connections stay open and nothing answers.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    pub fn thaw(&self) {
        self.signal("-CONT");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
