//! Providers over HTTPS, as the real ones are: the gateway trusts a provider's own authority only
//! through its `ca_file`, and a provider that speaks HTTP/2 carries concurrent calls as streams
//! of one connection instead of one connection each.

use std::time::Duration;

use fake_upstream::{FakeConfig, RunningFake};
use futures_util::future::join_all;
use serde_json::json;
use tollgate::config::UpstreamTls;
use tollgate::provider::clients::UpstreamClients;

use crate::support::{TestApp, TestSetup, Upstream, spawn_app};

const CONCURRENT: usize = 20;

fn tls_fake() -> RunningFake {
    fake_upstream::start_tls(FakeConfig::default(), ([127, 0, 0, 1], 0).into(), 1).unwrap()
}

/// A gateway with one worker (so one connection pool) whose `tls` provider is `fake`'s HTTPS
/// side, trusting its authority when `trust` is set.
async fn gateway(fake: &RunningFake, trust: bool, ca_dir: &std::path::Path) -> TestApp {
    let ca = ca_dir.join("fake-ca.pem");
    std::fs::write(&ca, fake.ca_pem().unwrap()).unwrap();
    let mut setup = TestSetup::new()
        .set("server.workers", 1)
        .provider("tls", "openai", Upstream::At(fake.tls_base_url().unwrap()))
        .set("providers.tls.max_attempts", 1)
        .route("held", &["tls/delay-1000ms+chunks-3"])
        .route("quick", &["tls/chunks-2"])
        .tier("free", &["held", "quick"], 1000, 100);
    if trust {
        setup = setup.set("providers.tls.ca_file", ca.to_str().unwrap());
    }
    spawn_app(setup).await
}

fn stream_body(route: &str) -> serde_json::Value {
    json!({"model": route, "stream": true, "messages": [{"role": "user", "content": "hi"}]})
}

#[actix_web::test]
async fn concurrent_streams_to_a_provider_over_https_share_one_http2_connection() {
    let fake = tls_fake();
    let dir = tempfile::tempdir().unwrap();
    let app = gateway(&fake, true, dir.path()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    // The first call opens the connection; the held ones then find it in the pool.
    let first = app.chat(&key, &stream_body("quick")).await;
    assert_eq!(first.status, 200, "{}", first.raw);
    let held = stream_body("held");
    let calls = (0..CONCURRENT).map(|_| app.chat(&key, &held));
    for reply in join_all(calls).await {
        assert_eq!(reply.status, 200, "{}", reply.raw);
        assert!(
            reply.raw.trim_end().ends_with("data: [DONE]"),
            "{}",
            reply.raw
        );
    }

    let answered = u64::try_from(CONCURRENT + 1).unwrap();
    assert_eq!(fake.stats.http2_requests(), answered);
    // Over HTTP/1.1 the held calls would need a connection each.
    assert!(
        fake.stats.connections() <= 2,
        "{} connections for {CONCURRENT} concurrent streams",
        fake.stats.connections()
    );
    let rows = app.ledger_rows_eventually(&tenant, CONCURRENT + 1).await;
    assert!(rows.iter().all(|row| row.status == "ok"), "{rows:?}");
}

#[actix_web::test]
async fn a_provider_whose_authority_is_not_trusted_is_never_sent_the_request() {
    let fake = tls_fake();
    let dir = tempfile::tempdir().unwrap();
    let app = gateway(&fake, false, dir.path()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app.chat(&key, &stream_body("quick")).await;
    assert!(reply.status >= 500, "{}: {}", reply.status, reply.raw);
    assert_eq!(fake.stats.requests(), 0);
}

/// A caller that reads its stream slowly stops the relay reading that stream upstream; what the
/// provider sends meanwhile waits in the stream's HTTP/2 window. Those windows must not add up
/// to the whole connection's, or a few streams left unread would stall every other call on the
/// connection, other tenants' too.
#[actix_web::test]
async fn streams_left_unread_do_not_stall_the_others_on_their_connection() {
    let fake = tls_fake();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("fake-ca.pem");
    std::fs::write(&ca, fake.ca_pem().unwrap()).unwrap();
    let tls = UpstreamTls::load(ca.to_str().unwrap(), std::path::Path::new("")).unwrap();
    let clients = UpstreamClients::default();
    let client = clients.get(5_000, Some(&tls));
    let url = format!("{}/chat/completions", fake.tls_base_url().unwrap());
    let mut first = client
        .post(&url)
        .send_json(&stream_body("m+chunks-2"))
        .await
        .unwrap();
    first.body().await.unwrap();
    // Each of these answers is several MB; none is read.
    let mut unread = Vec::new();
    for _ in 0..3 {
        let body = stream_body("m+chunks-20000");
        unread.push(client.post(&url).send_json(&body).await.unwrap());
    }

    // Paced: its later events are sent once the unread answers have had the
    // time to take whatever window the connection gives them.
    let paced = stream_body("m+chunks-3+chunk-delay-200ms");
    let mut last =
        actix_rt::time::timeout(Duration::from_secs(10), client.post(&url).send_json(&paced))
            .await
            .expect("the answer's headers never came")
            .unwrap();
    let text = actix_rt::time::timeout(Duration::from_secs(10), last.body().limit(1 << 20))
        .await
        .expect("the answer stalled behind the unread streams")
        .unwrap();
    assert!(
        String::from_utf8_lossy(&text)
            .trim_end()
            .ends_with("data: [DONE]")
    );
    // One connection carried them all, so the unread streams shared its window.
    assert_eq!(fake.stats.connections(), 1);
    assert_eq!(fake.stats.http2_requests(), 5);
    drop(unread);
}
