//! `tollgate check-config` on a file with several mistakes: one run names
//! every one at its TOML path, one per line, and exits non-zero.

use std::process::Command;

const BROKEN: &str = r#"
[ledger]
max_batch_rows = 0

[providers.openai]
kind = "openai"
base_url = "https://api.openai.com/v1"
api_key_env = "OPENAI_API_KEY"
max_tokens_ceiling = 0

[routes.chat]
targets = ["openai/gpt-5", "kimi/k2"]

[tiers.free]
routes = ["chat", "slow"]
rpm = 60
default_max_tokens = 1024

[[prices]]
provider = "openai"
model = "gpt-5"
input = "1.25"
output = "10"
"#;

#[test]
fn check_config_prints_every_problem_with_its_path_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broken.toml");
    std::fs::write(&file, BROKEN).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["check-config", file.to_str().unwrap()])
        .env_remove("TOLLGATE_CONFIG")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    for expected in [
        "ledger.max_batch_rows: must be at least 1",
        "providers.openai.max_tokens_ceiling: must be positive",
        "routes.chat.targets[1]: unknown provider `kimi`",
        "tiers.free.routes[1]: unknown route `slow`",
    ] {
        assert!(lines.contains(&expected), "{expected} in:\n{stderr}");
    }
    assert!(
        stderr.contains("is not a valid configuration: 4 problems"),
        "{stderr}"
    );
}
