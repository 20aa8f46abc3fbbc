use serde_json::{Value, json};

use crate::support::{TestSetup, spawn_app};

#[actix_web::test]
async fn the_official_openai_python_sdk_streams_calls_and_raises_the_right_errors() {
    let app = spawn_app(
        TestSetup::new()
            .route("quick", &["primary/usage-100-20-30+chunks-4"])
            .tier("free", &["quick"], 1000, 100),
    )
    .await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    let (_limited, limited_key) = app.tenant_with_key("free", json!({"rpm_limit": 1})).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/openai_check.py");
    let base = format!("{}/v1", app.base_url);

    let output = actix_web::rt::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args([script, &base, &key, &limited_key])
            .output()
    })
    .await
    .unwrap()
    .expect("python3 must be installed (scripts/test.sh installs it with the openai package)");

    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_slice(&output.stdout).unwrap();
    let expected: String = (0..4).map(tollgate::fake_upstream::chunk_text).collect();
    assert_eq!(seen["streamed"], expected.as_str());
    assert!(seen["content"].as_str().is_some_and(|c| !c.is_empty()));
    assert_eq!(seen["cost"], "0.0004008");
    assert_eq!(seen["limited"], json!(["none", "RateLimitError"]));
    assert_eq!(seen["unknown_model"], "NotFoundError");
}
