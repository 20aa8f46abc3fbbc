//! The Anthropic adapter against the Messages fake, which rejects what the real API rejects:
//! the bodies the adapter builds are accepted with their `cache_control` intact, and the
//! answers, whole or streamed, map back to OpenAI shapes.

use actix_web::http::StatusCode;
use actix_web::http::header::HeaderMap;
use bytes::Bytes;
use serde_json::{Value, json};

use super::anthropic as adapter;
use crate::openai::chat::ChatRequest;

const MIXED_REQUEST: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/anthropic/mixed_request.json"
));

async fn send(
    url: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> (StatusCode, HeaderMap, Bytes) {
    let mut request = awc::Client::default()
        .post(url)
        .content_type("application/json");
    for (name, value) in headers {
        request = request.insert_header((*name, value.as_str()));
    }
    let mut response = request.send_body(body.to_vec()).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.body().await.unwrap();
    (status, headers, body)
}

/// The OpenAI chunks the adapter makes of a Messages event stream, and whether it saw the end.
fn mapped_chunks(sse: &[u8], mapper: &mut adapter::StreamMapper) -> Vec<Value> {
    let text = std::str::from_utf8(sse).unwrap();
    let mut chunks = Vec::new();
    for frame in text.split("\n\n").filter(|frame| !frame.is_empty()) {
        let event = frame
            .lines()
            .find_map(|l| l.strip_prefix("event: "))
            .unwrap();
        let data = frame
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap();
        for chunk in mapper.on_event(event, data).unwrap() {
            chunks.push(serde_json::from_str(&chunk).unwrap());
        }
    }
    chunks
}

/// The tool call arguments and the finish reason streamed chunks carry.
fn arguments_and_finish(chunks: &[Value]) -> (Value, Option<String>) {
    let mut arguments = String::new();
    let mut finish = None;
    for choice in chunks.iter().map(|chunk| &chunk["choices"][0]) {
        if let Some(fragment) = choice["delta"]["tool_calls"][0]["function"]["arguments"].as_str() {
            arguments.push_str(fragment);
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            finish = Some(reason.to_owned());
        }
    }
    (serde_json::from_str(&arguments).unwrap(), finish)
}

#[actix_rt::test]
async fn the_fake_accepts_the_adapters_bodies_and_its_answers_map_back() {
    let fake = fake_upstream::anthropic::start("127.0.0.1:0".parse().unwrap()).unwrap();
    let url = format!("{}/v1/messages", fake.base_url());
    let request = ChatRequest::parse(MIXED_REQUEST.as_bytes()).unwrap();
    let headers = adapter::headers("sk-ant-test", "");

    let model = "claude+usage-120-2048-4096-57";
    let body = adapter::build_body(&request, model, 256, false).unwrap();
    let (status, _, reply) = send(&url, &headers, &body).await;
    assert_eq!(status, StatusCode::OK, "{reply:?}");
    let captured = fake.state.captured().pop().unwrap();
    assert_eq!(
        captured.body["system"][1]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert_eq!(
        captured.body["messages"][0]["content"][0]["cache_control"],
        json!({"type": "ephemeral", "ttl": "1h"})
    );
    assert_eq!(
        captured.body["tools"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    let message: Value = serde_json::from_slice(&reply).unwrap();
    let (openai, usage) = adapter::map_response(&reply, "claude-route").unwrap();
    let openai: Value = serde_json::from_slice(&openai).unwrap();
    assert_eq!(
        openai["choices"][0]["message"]["content"],
        message["content"][0]["text"]
    );
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.cached_tokens,
            usage.cache_write_tokens,
            usage.completion_tokens
        ),
        (120 + 2048 + 4096, 4096, 2048, 57)
    );

    let body = adapter::build_body(&request, "claude+tool", 256, true).unwrap();
    let (status, headers, reply) = send(&url, &headers, &body).await;
    assert_eq!(status, StatusCode::OK, "{reply:?}");
    assert_eq!(headers.get("content-type").unwrap(), "text/event-stream");
    let mut mapper = adapter::StreamMapper::new("claude-route");
    let chunks = mapped_chunks(&reply, &mut mapper);
    let (arguments, finish) = arguments_and_finish(&chunks);
    assert!(arguments.is_object(), "{arguments}");
    assert_eq!(finish.as_deref(), Some("tool_calls"));
    assert!(mapper.is_finished());
    assert!(mapper.usage().unwrap().prompt_tokens > 0);
    assert!(mapper.usage_chunk().is_some());
    fake.stop().await;
}

#[actix_rt::test]
async fn an_agents_streamed_tool_use_maps_to_one_tool_call() {
    let config = fake_upstream::FakeConfig {
        agent: true,
        ..fake_upstream::FakeConfig::default()
    };
    let fake =
        fake_upstream::anthropic::start_with(config, "127.0.0.1:0".parse().unwrap()).unwrap();
    let url = format!("{}/v1/messages", fake.base_url());
    let schema = json!({"type": "object", "properties": {"file_path": {"type": "string"}},
                        "required": ["file_path"]});
    let body = json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "stream": true,
        "messages": [{"role": "user", "content": "read the file"}],
        "tools": [{"name": "Read", "description": "Reads a file", "input_schema": schema}],
    });
    let headers = adapter::headers("sk-ant-test", "");
    let (status, _, reply) = send(&url, &headers, body.to_string().as_bytes()).await;
    assert_eq!(status, StatusCode::OK, "{reply:?}");
    let mut mapper = adapter::StreamMapper::with_created("route", 0);
    let chunks = mapped_chunks(&reply, &mut mapper);
    let (arguments, finish) = arguments_and_finish(&chunks);
    assert_eq!(arguments, json!({"file_path": "tollgate"}));
    assert_eq!(finish.as_deref(), Some("tool_calls"));
    assert!(mapper.is_finished());
    fake.stop().await;
}
