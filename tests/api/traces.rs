//! OTLP traces: a local collector receives one server span per request and a
//! client span per upstream attempt, under the caller's `traceparent`, with
//! the GenAI and Tollgate attributes and no prompt text; the upstream sees the
//! attempt's span as its parent. A collector that is down costs requests
//! nothing: its spans are dropped and counted.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{TestSetup, chat_body, metric_value, spawn_app};

/// A collector on a free loopback port; what it received, request by request.
fn collector() -> (String, Arc<Mutex<Vec<Value>>>) {
    let received: Arc<Mutex<Vec<Value>>> = Arc::default();
    let sink = received.clone();
    let server = actix_web::HttpServer::new(move || {
        let sink = sink.clone();
        actix_web::App::new()
            .app_data(actix_web::web::JsonConfig::default().limit(1 << 24))
            .route(
                "/v1/traces",
                actix_web::web::post().to(move |body: actix_web::web::Json<Value>| {
                    let sink = sink.clone();
                    async move {
                        sink.lock().unwrap().push(body.into_inner());
                        actix_web::HttpResponse::Ok().json(json!({}))
                    }
                }),
            )
    })
    .workers(1)
    .disable_signals()
    .bind("127.0.0.1:0")
    .unwrap();
    let endpoint = format!("http://{}", server.addrs()[0]);
    actix_rt::spawn(server.run());
    (endpoint, received)
}

/// Every span received so far.
fn spans(received: &Mutex<Vec<Value>>) -> Vec<Value> {
    received
        .lock()
        .unwrap()
        .iter()
        .flat_map(|body| {
            body["resourceSpans"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .flat_map(|resource| {
            resource["scopeSpans"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .flat_map(|scope| scope["spans"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

#[actix_web::test]
async fn a_request_and_its_attempts_reach_the_collector_under_the_callers_trace() {
    let (endpoint, received) = collector();
    let route = "traced";
    let app = spawn_app(
        TestSetup::new()
            .route(route, &["primary/usage-7-0-11"])
            .tier("free", &[route], 1000, 100)
            .set("telemetry.otlp_endpoint", endpoint),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let mut body = chat_body(route);
    body["messages"][0]["content"] = json!("a secret prompt");
    let reply = app
        .chat_with(
            &key,
            &body,
            &[("traceparent", &format!("00-{trace_id}-{parent}-01"))],
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);

    let found =
        crate::support::wait_until(Duration::from_secs(5), "two exported spans", async || {
            let found = spans(&received);
            crate::support::done_if(found.len() >= 2, found)
        })
        .await;
    let server = found
        .iter()
        .find(|s| s["kind"] == 2)
        .unwrap_or_else(|| panic!("no server span in {found:?}"));
    let client = found
        .iter()
        .find(|s| s["kind"] == 3)
        .unwrap_or_else(|| panic!("no client span in {found:?}"));
    assert_eq!(server["traceId"], trace_id);
    assert_eq!(server["parentSpanId"], parent);
    assert_eq!(client["traceId"], trace_id);
    assert_eq!(client["parentSpanId"], server["spanId"]);
    let text = |span: &Value, key: &str| {
        attribute(span, key)
            .and_then(|v| v["stringValue"].as_str())
            .map(str::to_owned)
    };
    let int = |span: &Value, key: &str| {
        attribute(span, key)
            .and_then(|v| v["intValue"].as_str())
            .and_then(|v| v.parse::<u64>().ok())
    };
    assert_eq!(
        text(server, "gen_ai.operation.name").as_deref(),
        Some("chat")
    );
    assert_eq!(text(server, "gen_ai.request.model").as_deref(), Some(route));
    assert_eq!(
        text(server, "gen_ai.response.model").as_deref(),
        Some("usage-7-0-11")
    );
    assert_eq!(
        text(server, "gen_ai.provider.name").as_deref(),
        Some("primary")
    );
    assert_eq!(text(server, "tollgate.tenant"), Some(tenant.clone()));
    assert_eq!(text(server, "tollgate.route").as_deref(), Some(route));
    assert_eq!(int(server, "gen_ai.usage.input_tokens"), Some(7));
    assert_eq!(int(server, "gen_ai.usage.output_tokens"), Some(11));
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(
        int(server, "tollgate.charge_nanos"),
        Some(u64::try_from(rows[0].charged_nanos).unwrap())
    );
    assert_eq!(int(client, "tollgate.attempt"), Some(1));
    assert!(int(client, "tollgate.reservation_nanos").is_some_and(|n| n > 0));
    assert_eq!(int(client, "http.response.status_code"), Some(200));
    // No prompt text anywhere in what was exported.
    let exported = serde_json::to_string(&*received.lock().unwrap()).unwrap();
    assert!(!exported.contains("a secret prompt"));

    // The upstream saw the attempt's span as its parent.
    let sent = app.fake.stats.captured();
    let upstream = sent
        .last()
        .unwrap()
        .header("traceparent")
        .unwrap()
        .to_owned();
    assert_eq!(
        upstream,
        format!("00-{trace_id}-{}-01", client["spanId"].as_str().unwrap())
    );
}

#[actix_web::test]
async fn a_collector_that_is_down_drops_spans_counted_and_requests_go_on() {
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let route = "traced-down";
    let app = spawn_app(
        TestSetup::new()
            .route(route, &["primary/usage-1-0-1"])
            .tier("free", &[route], 1000, 100)
            .set("telemetry.otlp_endpoint", endpoint)
            .set("telemetry.otlp_timeout_ms", 200),
    )
    .await;
    let (_, key) = app.tenant_with_key("free", json!({})).await;
    for _ in 0..3 {
        let reply = app.chat(&key, &chat_body(route)).await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
    }
    let dropped = |text: &str| {
        metric_value(
            text,
            "tollgate_trace_spans_dropped_total{reason=\"export_failed\"}",
        )
    };
    // Six spans (three requests, three attempts), perhaps among others' in this process.
    crate::support::wait_until(
        Duration::from_secs(5),
        "six dropped spans counted",
        async || {
            let scrape = app.get("/metrics", "").await.raw;
            crate::support::done_if(dropped(&scrape) >= 6, scrape)
        },
    )
    .await;
}
