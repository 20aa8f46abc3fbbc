//! The agents themselves, as installed from npm and PyPI (pinned in
//! `tests/agents/`, installed by `scripts/test.sh`): Claude Code in print
//! mode, Codex `exec`, the Vercel AI SDK and the OpenAI Agents SDK, each run
//! unchanged against the gateway with the fake upstream in its `agent`
//! scenario (a tool call when tools are offered, text after the tool's
//! result, JSON for a schema), each completing a tool loop. Every client runs
//! with its own empty home directory and its telemetry off.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{TestApp, TestSetup, Upstream, spawn_app};

/// A client that has not finished by then has hung: the test fails.
const CLIENT_TIMEOUT: Duration = Duration::from_mins(2);

fn agents_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agents")
}

fn setup() -> TestSetup {
    TestSetup::new()
        .provider("claude", "anthropic", Upstream::Anthropic)
        .set("providers.claude.api_key_env", "TEST_ANTHROPIC_KEY")
        .env("TEST_ANTHROPIC_KEY", "sk-ant-test")
        .provider("responder", "openai", Upstream::FakeV1)
        .set("providers.responder.api_key_env", "TEST_PRIMARY_KEY")
        .set("providers.responder.responses", true)
        // README's route name, on a model of each kind.
        .route("fast", &["primary/agent"])
        .route("claude-fast", &["claude/agent"])
        .route("native", &["responder/agent"])
        .tier("free", &["fast", "claude-fast", "native"], 1000, 512)
}

/// A client's process, killed if the test fails while it runs.
struct Client(Option<std::process::Child>);

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `program` in a fresh home and working directory with `env`, and
/// returns its output once it ends (or fails the test past the timeout).
async fn run(program: PathBuf, args: Vec<String>, env: Vec<(String, String)>) -> Output {
    let home = tempfile::tempdir().unwrap();
    let work = home.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let child = Command::new(&program)
        .args(&args)
        .current_dir(&work)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (scripts/test.sh installs the agents)",
                program.display()
            )
        });
    let mut client = Client(Some(child));
    crate::support::wait_until(
        CLIENT_TIMEOUT,
        &format!("{} to end", program.display()),
        async || {
            let child = client.0.as_mut().unwrap();
            child.try_wait().unwrap().ok_or("still running")
        },
    )
    .await;
    let child = client.0.take().unwrap();
    let output = actix_web::rt::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    drop(home);
    output
}

fn text(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Claude Code's environment: the gateway as its API, telemetry and updates off.
fn claude_env(app: &TestApp, key: &str) -> Vec<(String, String)> {
    [
        ("ANTHROPIC_BASE_URL", app.base_url.as_str()),
        ("ANTHROPIC_API_KEY", key),
        ("DISABLE_TELEMETRY", "1"),
        ("DISABLE_ERROR_REPORTING", "1"),
        ("DISABLE_AUTOUPDATER", "1"),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect()
}

async fn claude_code(app: &TestApp, key: &str, model: &str) -> Value {
    let program = agents_dir().join("node_modules/.bin/claude");
    let args = [
        "-p",
        "Use the Bash tool to run: echo hi",
        "--model",
        model,
        "--allowedTools",
        "Bash",
        "--output-format",
        "json",
    ];
    let output = run(
        program,
        args.iter().map(|a| (*a).to_owned()).collect(),
        claude_env(app, key),
    )
    .await;
    assert!(output.status.success(), "{}", text(&output));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|_| panic!("{}", text(&output)))
}

/// Claude Code with README's instructions (`--model fast`), as installed:
/// its 32,000-token limit, thinking, JSON user id, betas and side requests
/// pass, and a tool loop completes, on a route of an OpenAI-kind model
/// (translated) and of an Anthropic one (passed through), streaming.
#[actix_web::test]
async fn claude_code_runs_a_tool_loop_unchanged() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    for model in ["fast", "claude-fast"] {
        let result = claude_code(&app, &key, model).await;
        assert_eq!(result["is_error"], false, "{model}: {result}");
        assert_eq!(result["num_turns"], 2, "{model}: {result}");
        let answer = result["result"].as_str().unwrap_or_default();
        assert!(answer.starts_with("Done:"), "{model}: {result}");
    }
    let rows = app.ledger_rows_eventually(&tenant, 4).await;
    assert!(rows.iter().all(|r| r.status == "ok"), "{rows:?}");
    assert!(rows.iter().any(|r| r.route == "claude-fast"));
}

/// A free-tier tenant with 0.05 runs Claude Code (32,000 `max_tokens` and
/// omitted thinking on every call) call after call, on a Claude model priced
/// as the catalog prices Claude (`hidden_output = "reasoning"`): Claude Code
/// asks for Anthropic's estimate of the tokens it thinks, so each stream is
/// admitted with one step of output held and grows by those estimates; when
/// the budget cannot fund a step the stream is cut, and after that calls are
/// refused. The ledger never passes 0.05.
#[actix_web::test]
async fn claude_code_runs_on_a_small_budget_until_it_is_spent_and_never_past_it() {
    // Claude Code's prompt is ~20k tokens: 0.006 of input a call, each step of
    // output (1,024 tokens) 0.01, more than a call costs (300 tokens of
    // thinking and a few of text), so the budget ends in a stream that can no
    // longer grow rather than in a refusal.
    let model = "claude/agent+thinks-300";
    let app = spawn_app(
        setup()
            .route("claude-thinking", &[model])
            .price(model, "0.3", "0.3", "10")
            .price_field(model, "hidden_output", "reasoning")
            .tier("thinking", &["claude-thinking"], 1000, 512),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key("thinking", json!({"monthly_budget": "0.05"}))
        .await;
    let program = agents_dir().join("node_modules/.bin/claude");
    let mut refused = false;
    for _ in 0..12 {
        let args = [
            "-p",
            "Say hi",
            "--model",
            "claude-thinking",
            "--output-format",
            "json",
        ];
        let output = run(
            program.clone(),
            args.iter().map(|a| (*a).to_owned()).collect(),
            claude_env(&app, &key),
        )
        .await;
        if !output.status.success()
            || String::from_utf8_lossy(&output.stdout).contains("\"is_error\":true")
        {
            let printed = text(&output);
            if printed.contains("budget") || printed.contains("402") {
                refused = true;
                break;
            }
        }
    }
    assert!(refused, "the budget never ran out");
    let rows = app.ledger_rows(&tenant).await;
    let spent: i64 = rows.iter().map(|r| r.charged_nanos).sum();
    assert!(spent <= 50_000_000, "spent {spent} of 0.05: {rows:?}");
    assert!(rows.len() >= 3, "{rows:?}");
    let cut = rows
        .iter()
        .filter(|r| {
            r.error
                .as_deref()
                .unwrap_or("")
                .contains("ended by the gateway at its hold")
        })
        .count();
    assert!(cut >= 1, "no stream was cut: {rows:?}");
    assert!(
        rows.iter().all(|r| r.charged_nanos <= r.reserved_nanos),
        "{rows:?}"
    );
    let budget = app.budget(&tenant).await;
    assert_eq!(budget["reserved"], "0", "{budget}");
}

/// Codex `exec` with its default configuration and tools, pointed at the
/// gateway as a provider of the Responses API: its shell call runs and its
/// output goes back, on a translated route and on a passthrough one.
#[actix_web::test]
async fn codex_exec_runs_a_tool_loop_unchanged() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    for model in ["fast", "native"] {
        let home = tempfile::tempdir().unwrap();
        let config = format!(
            "model = \"{model}\"\nmodel_provider = \"tollgate\"\n\
             [model_providers.tollgate]\nname = \"Tollgate\"\nbase_url = \"{}/v1\"\n\
             env_key = \"TOLLGATE_API_KEY\"\nwire_api = \"responses\"\n\
             [analytics]\nenabled = false\n",
            app.base_url
        );
        std::fs::write(home.path().join("config.toml"), config).unwrap();
        let env = vec![
            ("CODEX_HOME".to_owned(), home.path().display().to_string()),
            ("TOLLGATE_API_KEY".to_owned(), key.clone()),
        ];
        let args = [
            "exec",
            "--skip-git-repo-check",
            "Use the shell tool to run: echo hi",
        ];
        let program = agents_dir().join("node_modules/.bin/codex");
        let output = run(program, args.iter().map(|a| (*a).to_owned()).collect(), env).await;
        assert!(output.status.success(), "{model}: {}", text(&output));
        let said = String::from_utf8_lossy(&output.stdout);
        assert!(said.contains("Done:"), "{model}: {}", text(&output));
    }
}

async fn script(program: &str, script: &str, args: Vec<String>) -> Value {
    let path = agents_dir().join(script);
    let mut all = vec![path.display().to_string()];
    all.extend(args);
    let env = vec![(
        "NODE_PATH".to_owned(),
        agents_dir().join("node_modules").display().to_string(),
    )];
    let output = run(PathBuf::from(program), all, env).await;
    assert!(output.status.success(), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|_| panic!("{}", text(&output)))
}

/// The AI SDK's `generateText` with a tool over two steps, its defaults
/// kept: the second step names the first step's call by `item_reference`.
#[actix_web::test]
async fn the_ai_sdk_runs_two_steps_with_a_tool_unchanged() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    for model in ["fast", "native"] {
        let base = format!("{}/v1", app.base_url);
        let seen = script(
            "node",
            "ai_sdk.mjs",
            vec![base, key.clone(), model.to_owned()],
        )
        .await;
        assert_eq!(seen["steps"], 2, "{model}: {seen}");
        assert_eq!(seen["calls"].as_array().map(Vec::len), Some(1), "{seen}");
        assert!(
            seen["text"]
                .as_str()
                .unwrap_or_default()
                .starts_with("Done:"),
            "{seen}"
        );
    }
}

/// The Agents SDK with a function tool and an `output_type`: the tool runs,
/// then the answer parses as the type.
#[actix_web::test]
async fn the_agents_sdk_runs_a_tool_and_a_typed_output_unchanged() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    for model in ["fast", "native"] {
        let base = format!("{}/v1", app.base_url);
        let seen = script(
            "python3",
            "agents_sdk.py",
            vec![base, key.clone(), model.to_owned()],
        )
        .await;
        assert_eq!(
            seen["calls"].as_array().map(Vec::len),
            Some(1),
            "{model}: {seen}"
        );
        assert!(seen["output"]["city"].is_string(), "{model}: {seen}");
        assert_eq!(seen["turns"], 2, "{seen}");
    }
}
