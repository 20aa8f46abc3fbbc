//! The gateway binary as a child process: started on a given config, killed
//! (by its PID) on drop if still running, and signalled by tests that need a
//! real process (SIGKILL, SIGTERM).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

pub struct GatewayProcess(Option<Child>);

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl GatewayProcess {
    /// Starts `tollgate serve` and waits until `addr` answers `/readyz` with 200.
    pub async fn serve(
        config: &Path,
        env: &HashMap<String, String>,
        addr: std::net::SocketAddr,
        stderr: Stdio,
    ) -> GatewayProcess {
        let child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("--config")
            .arg(config)
            .arg("serve")
            .envs(env)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let mut gateway = GatewayProcess(Some(child));
        let client = awc::Client::default();
        super::wait_until(
            Duration::from_secs(30),
            "the gateway to become ready",
            async || {
                let ready = client
                    .get(format!("http://{addr}/readyz"))
                    .send()
                    .await
                    .map(|r| r.status());
                if ready.as_ref().is_ok_and(|s| *s == 200) {
                    return Ok(());
                }
                if let Some(status) = gateway.child().try_wait().unwrap() {
                    panic!("the gateway exited before it was ready: {status}");
                }
                Err(ready)
            },
        )
        .await;
        gateway
    }

    fn child(&mut self) -> &mut Child {
        self.0.as_mut().unwrap()
    }

    fn signal(&mut self, name: &str) {
        let pid = self.child().id().to_string();
        assert!(
            Command::new("kill")
                .args([name, &pid])
                .status()
                .unwrap()
                .success()
        );
    }

    /// SIGKILL: no handler runs, nothing is flushed.
    pub async fn kill_9(mut self) {
        self.signal("-KILL");
        wait(self.0.take().unwrap()).await;
    }

    pub fn terminate(&mut self) {
        self.signal("-TERM");
    }

    /// SIGHUP: reload the configuration.
    pub fn hangup(&mut self) {
        self.signal("-HUP");
    }

    /// Waits for the process to exit, off the test's runtime thread.
    pub async fn exit_status(mut self) -> ExitStatus {
        wait(self.0.take().unwrap()).await
    }
}

async fn wait(mut child: Child) -> ExitStatus {
    actix_web::rt::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap()
}

/// Two replicas' configurations of `setup`, on one database: each its own
/// listener on a free port and its own journal. The directory holds both.
pub fn two_replicas(
    setup: &super::TestSetup,
    fake_url: &str,
) -> (tempfile::TempDir, [(PathBuf, SocketAddr); 2]) {
    let (dir, first) = super::write_config(setup, fake_url);
    let second = dir.path().join("second.toml");
    std::fs::copy(&first, &second).unwrap();
    let replicas = [(first, free_port()), (second, free_port())];
    for (i, (path, addr)) in replicas.iter().enumerate() {
        let journal = dir
            .path()
            .join(format!("journal-{i}"))
            .display()
            .to_string();
        super::edit_config(path, |doc| {
            let server = doc["server"].as_table_mut().unwrap();
            server.insert("listen".into(), addr.to_string().into());
            let ledger = doc
                .entry("ledger")
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            let ledger = ledger.as_table_mut().unwrap();
            ledger.insert("journal_dir".into(), journal.into());
        });
    }
    (dir, replicas)
}

pub fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Runs a `tollgate` CLI command on `config`; its stdout.
pub fn cli(config: &Path, env: &HashMap<String, String>, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("--config")
        .arg(config)
        .args(args)
        .envs(env)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Creates a tenant with the CLI and issues it a key; the key.
pub fn tenant_with_key(
    config: &Path,
    env: &HashMap<String, String>,
    tenant: &str,
    tier: &str,
) -> String {
    cli(
        config,
        env,
        &["tenant", "create", "--id", tenant, "--tier", tier],
    );
    let issued: serde_json::Value =
        serde_json::from_str(&cli(config, env, &["key", "issue", tenant])).unwrap();
    issued["key"].as_str().unwrap().to_owned()
}
