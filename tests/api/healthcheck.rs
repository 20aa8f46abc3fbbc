//! `tollgate healthcheck` and `tollgate check-config`, run as the binary the
//! container image ships: their exit status is the contract probes rely on.

use std::process::Output;

use crate::support::{TestSetup, spawn_app};

fn setup() -> TestSetup {
    TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("free", &["fast"], 1000, 100)
}

async fn tollgate(args: Vec<String>) -> Output {
    actix_web::rt::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(&args)
            // The probe must not depend on a config file when given a URL.
            .env_remove("TOLLGATE_CONFIG")
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[actix_web::test]
async fn healthcheck_exits_zero_on_a_ready_gateway_and_non_zero_when_nothing_answers() {
    let app = spawn_app(setup()).await;
    let ready = tollgate(vec![
        "healthcheck".into(),
        "--url".into(),
        format!("{}/readyz", app.admin_url),
    ])
    .await;
    assert!(ready.status.success(), "{}", stderr(&ready));

    // A path the gateway answers 404 for is not ready either.
    let missing = tollgate(vec![
        "healthcheck".into(),
        "--url".into(),
        format!("{}/no-such-probe", app.admin_url),
    ])
    .await;
    assert!(!missing.status.success());
    assert!(stderr(&missing).contains("404"), "{}", stderr(&missing));

    // A port nobody listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = tollgate(vec![
        "healthcheck".into(),
        "--timeout-ms".into(),
        "500".into(),
        "--url".into(),
        format!("http://127.0.0.1:{port}/readyz"),
    ])
    .await;
    assert!(!down.status.success());
    assert!(stderr(&down).contains("no answer"), "{}", stderr(&down));
}

#[actix_web::test]
async fn check_config_accepts_the_example_and_names_what_is_wrong_in_a_broken_file() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/tollgate.example.toml");
    let ok = tollgate(vec!["check-config".into(), example.into()]).await;
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert!(String::from_utf8_lossy(&ok.stdout).contains(": ok ("));
    // The file as `serve` takes it works too.
    let flag = tollgate(vec![
        "check-config".into(),
        "--config".into(),
        example.into(),
    ])
    .await;
    assert!(flag.status.success(), "{}", stderr(&flag));

    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.toml");
    let text = std::fs::read_to_string(example)
        .unwrap()
        .replace("[server]", "[server]\nlisten_on = \"0.0.0.0:1\"");
    std::fs::write(&broken, text).unwrap();
    let bad = tollgate(vec!["check-config".into(), broken.display().to_string()]).await;
    assert!(!bad.status.success());
    let reason = stderr(&bad);
    assert!(reason.contains("listen_on"), "{reason}");
    assert!(reason.contains("not a valid configuration"), "{reason}");

    let absent = tollgate(vec!["check-config".into(), "/nonexistent/t.toml".into()]).await;
    assert!(!absent.status.success());
    assert!(stderr(&absent).contains("/nonexistent/t.toml"));
}
