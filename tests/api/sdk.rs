use serde_json::json;

use crate::support::{TestSetup, run_sdk, spawn_app};

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
    let base = format!("{}/v1", app.base_url);
    let seen = run_sdk(
        "python3",
        "openai_check.py",
        vec![base.clone(), key.clone(), limited_key.clone()],
    )
    .await;
    let expected: String = (0..4).map(fake_upstream::chunk_text).collect();
    assert_eq!(seen["streamed"], expected.as_str());
    assert!(seen["content"].as_str().is_some_and(|c| !c.is_empty()));
    assert_eq!(seen["cost"], "0.0004008");
    assert_eq!(seen["limited"], json!(["none", "RateLimitError"]));
    assert_eq!(seen["unknown_model"], "NotFoundError");
}
