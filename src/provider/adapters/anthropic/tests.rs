use super::*;
use crate::config::Price;
use crate::money::PricePerMTok;
use crate::pricing::Usage;

const MIXED_REQUEST: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/anthropic/mixed_request.json"
));
const MIXED_REQUEST_EXPECTED: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/anthropic/mixed_request.expected.json"
));
const RESPONSE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/anthropic/response_text_tool_use.json"
));
const RESPONSE_EXPECTED: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/anthropic/response_text_tool_use.expected.json"
));
const STREAM: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/anthropic/stream_text_tool_use.sse"
));
const STREAM_EXPECTED: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/anthropic/stream_text_tool_use.expected.json"
));
const CREATED: u64 = 1_700_000_000;

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

fn build(request: &Value) -> Result<Value, AnthropicMapError> {
    let request = ChatRequest::parse(request.to_string().as_bytes()).unwrap();
    build_body(&request, "claude-sonnet-4-5", 256, false)
        .map(|bytes| serde_json::from_slice(&bytes).unwrap())
}

fn build_error(request: &Value) -> String {
    build(request).unwrap_err().to_string()
}

/// `event:`/`data:` pairs of an SSE text.
fn sse_events(text: &str) -> Vec<(String, String)> {
    text.split("\n\n")
        .filter(|frame| !frame.trim().is_empty())
        .map(|frame| {
            let mut event = String::new();
            let mut data = String::new();
            for line in frame.lines() {
                if let Some(name) = line.strip_prefix("event:") {
                    name.trim().clone_into(&mut event);
                } else if let Some(payload) = line.strip_prefix("data:") {
                    data.push_str(payload.strip_prefix(' ').unwrap_or(payload));
                }
            }
            (event, data)
        })
        .collect()
}

#[test]
fn mixed_request_maps_to_the_exact_messages_body() {
    let body = build(&parse(MIXED_REQUEST)).unwrap();
    assert_eq!(body, parse(MIXED_REQUEST_EXPECTED));
    // Key order matters to nobody but a human reading captures; keep it stable anyway.
    let keys: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(&keys[..4], ["model", "max_tokens", "system", "messages"]);
    // The 1h TTL is Anthropic-specific and must arrive untouched.
    assert_eq!(
        body["messages"][0]["content"][0]["cache_control"],
        json!({"type": "ephemeral", "ttl": "1h"})
    );
}

#[test]
fn plain_requests_stay_plain() {
    let body = build(&json!({
        "model": "r",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use French."}]},
            {"role": "user", "content": "Hi"},
            {"role": "user", "content": "there"},
            {"role": "assistant", "content": ""},
        ],
        "stop": ["a", "b"],
        "temperature": 1.7,
        "tool_choice": "required",
        "parallel_tool_calls": false,
    }))
    .unwrap();
    assert_eq!(
        body,
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 256,
            "system": "Be brief.\n\nUse French.",
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "Hi"},
                {"type": "text", "text": "there"},
            ]}],
            "temperature": 1.0,
            "stop_sequences": ["a", "b"],
        })
    );
    let request = ChatRequest::parse(
        br#"{"model":"r","messages":[{"role":"user","content":"x"}],"stream":true}"#,
    )
    .unwrap();
    let streamed: Value =
        serde_json::from_slice(&build_body(&request, "m", 5, true).unwrap()).unwrap();
    assert_eq!(streamed["stream"], true);
    assert_eq!(streamed["messages"][0]["content"], "x");
}

#[test]
fn tool_choice_shapes() {
    let with_choice = |choice: Value, parallel: Value| {
        let body = build(&json!({
            "model": "r",
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": choice,
            "parallel_tool_calls": parallel,
        }))
        .unwrap();
        assert_eq!(
            body["tools"],
            json!([{"name": "f", "input_schema": {"type": "object", "properties": {}}}])
        );
        body.get("tool_choice").cloned()
    };
    assert_eq!(
        with_choice(json!("auto"), Value::Null),
        Some(json!({"type": "auto"}))
    );
    assert_eq!(
        with_choice(json!("required"), json!(false)),
        Some(json!({"type": "any", "disable_parallel_tool_use": true}))
    );
    assert_eq!(
        with_choice(json!("none"), json!(false)),
        Some(json!({"type": "none"}))
    );
    assert_eq!(
        with_choice(
            json!({"type": "function", "function": {"name": "f"}}),
            json!(true)
        ),
        Some(json!({"type": "tool", "name": "f"}))
    );
    assert_eq!(
        with_choice(Value::Null, json!(false)),
        Some(json!({"type": "auto", "disable_parallel_tool_use": true}))
    );
    assert_eq!(with_choice(Value::Null, Value::Null), None);
}

#[test]
fn request_errors_name_the_message_field() {
    let user = json!({"role": "user", "content": "x"});
    let cases = [
        (
            json!([user, {"role": "assistant", "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{"}}
            ]}]),
            "messages[1].tool_calls[0].function.arguments: not valid JSON",
        ),
        (
            json!([user, {"role": "assistant", "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}
            ]}]),
            "messages[1].tool_calls[0].function.arguments: must encode a JSON object",
        ),
        (
            json!([user, {"role": "assistant", "tool_calls": [
                {"type": "function", "function": {"name": "f", "arguments": "{}"}}
            ]}]),
            "messages[1].tool_calls[0].id: must be a non-empty string",
        ),
        (
            json!([user, {"role": "tool", "content": "r"}]),
            "messages[1].tool_call_id: must be a non-empty string",
        ),
        (
            json!([{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]),
            "messages[0].content[0].type: unsupported content part type \"input_audio\"",
        ),
        (
            json!([{"role": "user", "content": [
                {"type": "text", "text": "x"},
                {"type": "image_url", "image_url": {"url": "ftp://host/a.png"}},
            ]}]),
            "messages[0].content[1].image_url.url: must be a data: URL or an http(s) URL",
        ),
        (
            json!([{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png,abc"}},
            ]}]),
            "messages[0].content[0].image_url.url: only base64 data: URLs with a media type \
             are supported",
        ),
        (
            json!([{"role": "system", "content": [
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ]}, user]),
            "messages[0].content[0].type: system messages may only contain text, not \
             \"image_url\"",
        ),
        (
            json!([{"role": "function", "name": "f", "content": "x"}]),
            "messages[0].role: unsupported role \"function\"",
        ),
        (
            json!([{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]),
            "messages[1].role: anthropic requires the first non-system message to be from \
             the user",
        ),
        (
            json!([{"role": "system", "content": "s"}]),
            "messages: at least one user or assistant message with content is required",
        ),
    ];
    for (messages, expected) in cases {
        let error = build_error(&json!({"model": "r", "messages": messages}));
        assert_eq!(error, expected);
    }
}

#[test]
fn request_errors_name_the_top_level_field() {
    let user = json!({"role": "user", "content": "x"});
    let with = |extra: Value| {
        let mut request = json!({"model": "r", "messages": [user]});
        for (key, value) in extra.as_object().unwrap() {
            request[key] = value.clone();
        }
        build_error(&request)
    };
    assert_eq!(
        with(json!({"n": 2})),
        "n: anthropic returns a single choice; only 1 is supported"
    );
    assert_eq!(
        with(json!({"tools": [{"type": "web_search"}]})),
        "tools[0].type: unsupported tool type \"web_search\"; only function tools map"
    );
    assert_eq!(
        with(
            json!({"tools": [{"type": "function", "function": {"name": "f"}}],
                    "tool_choice": "sometimes"})
        ),
        "tool_choice: unsupported value \"sometimes\""
    );
    assert_eq!(with(json!({"stop": ["a", 1]})), "stop[1]: must be a string");
    assert_eq!(
        with(json!({"temperature": "hot"})),
        "temperature: must be a number"
    );
    let error = build(&json!({"model": "r", "messages": [user], "user": 5})).unwrap_err();
    assert_eq!(error.field(), Some("user"));
}

#[test]
fn headers_carry_key_and_version() {
    assert_eq!(
        headers("sk-ant", ""),
        vec![
            ("x-api-key", "sk-ant".to_owned()),
            ("anthropic-version", DEFAULT_VERSION.to_owned()),
            ("content-type", "application/json".to_owned()),
        ]
    );
    assert_eq!(headers("k", "2024-01-01")[1].1, "2024-01-01");
}

#[test]
fn response_with_text_and_tool_use_maps_to_openai() {
    let (body, usage) = map_response_at(RESPONSE.as_bytes(), "claude-route", CREATED).unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body, parse(RESPONSE_EXPECTED));
    assert_eq!(
        usage,
        Usage {
            prompt_tokens: 120 + 2048 + 4096,
            cached_tokens: 4096,
            cache_write_tokens: 2048,
            completion_tokens: 57,
            web_searches: 0,
        }
    );
    let (live, _) = map_response(RESPONSE.as_bytes(), "claude-route").unwrap();
    let live: Value = serde_json::from_slice(&live).unwrap();
    assert!(live["created"].as_u64().unwrap() > CREATED);
}

#[test]
fn cache_write_and_cache_read_are_priced_exactly() {
    let (_, usage) = map_response_at(RESPONSE.as_bytes(), "m", CREATED).unwrap();
    let per_mtok = |text| PricePerMTok::parse_decimal(text).unwrap();
    let price = Price {
        input: per_mtok("3"),
        cached_input: per_mtok("0.30"),
        cache_write: per_mtok("3.75"),
        output: per_mtok("15"),
        long_context: None,
        web_search: None,
        hidden_output: crate::config::HiddenOutput::default(),
    };
    // 120 × 3 + 4096 × 0.30 + 2048 × 3.75 + 57 × 15, per million tokens.
    assert_eq!(
        crate::pricing::charge(&price, &usage).to_string(),
        "0.0101238"
    );
}

#[test]
fn response_edge_cases() {
    let only_tool = br#"{"id":"m","content":[{"type":"tool_use","id":"t","name":"f","input":{}}],
        "stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":2}}"#;
    let (body, usage) = map_response_at(only_tool, "r", 0).unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], Value::Null);
    assert_eq!(
        body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "{}"
    );
    assert_eq!((usage.prompt_tokens, usage.cached_tokens), (1, 0));
    for (stop_reason, expected) in [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
    ] {
        let body = json!({"content": [{"type": "text", "text": "x"}],
            "stop_reason": stop_reason, "usage": {"input_tokens": 1, "output_tokens": 1}});
        let (body, _) = map_response_at(body.to_string().as_bytes(), "r", 0).unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["choices"][0]["finish_reason"], expected);
    }
    assert_eq!(
        map_response_at(b"not json", "r", 0)
            .unwrap_err()
            .to_string(),
        "anthropic response body: not a JSON object"
    );
    assert_eq!(
        map_response_at(br#"{"content":[]}"#, "r", 0)
            .unwrap_err()
            .to_string(),
        "anthropic response usage: missing"
    );
    assert_eq!(
        map_response_at(
            br#"{"content":[{"type":"tool_use","name":"f"}],"usage":{}}"#,
            "r",
            0
        )
        .unwrap_err()
        .to_string(),
        "anthropic response content[0].id: must be a string"
    );
    let overloaded =
        br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    assert_eq!(
        map_response_at(overloaded, "r", 0).unwrap_err(),
        AnthropicMapError::Upstream {
            kind: "overloaded_error".to_owned(),
            message: "Overloaded".to_owned()
        }
    );
}

#[test]
fn recorded_stream_maps_to_openai_chunks() {
    let mut mapper = StreamMapper::with_created("claude-route", CREATED);
    assert_eq!(mapper.usage(), None);
    assert_eq!(mapper.usage_chunk(), None);
    let mut chunks = Vec::new();
    for (event, data) in sse_events(STREAM) {
        for chunk in mapper.on_event(&event, &data).unwrap() {
            chunks.push(parse(&chunk));
        }
    }
    assert!(mapper.is_finished());
    let expected = parse(STREAM_EXPECTED);
    assert_eq!(Value::Array(chunks), expected["chunks"]);
    assert_eq!(
        parse(&mapper.usage_chunk().unwrap()),
        expected["usage_chunk"]
    );
    assert_eq!(
        mapper.usage(),
        Some(Usage {
            prompt_tokens: 472 + 1024 + 2048,
            cached_tokens: 2048,
            cache_write_tokens: 1024,
            completion_tokens: 89,
            web_searches: 0,
        })
    );
}

#[test]
fn stream_usage_is_known_from_message_start() {
    let mut mapper = StreamMapper::with_created("r", 0);
    let start = r#"{"type":"message_start","message":{"id":"msg_1","usage":
        {"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":1}}}"#;
    // The event name may be absent; the data's own type then decides.
    let chunks = mapper.on_event("", start).unwrap();
    assert_eq!(parse(&chunks[0])["id"], "msg_1");
    let usage = mapper.usage().unwrap();
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (15, 1));
    assert!(!mapper.is_finished());
}

#[test]
fn stream_errors() {
    let mut mapper = StreamMapper::with_created("r", 0);
    let error = mapper
        .on_event(
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        )
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "anthropic error overloaded_error: Overloaded"
    );
    assert_eq!(
        mapper
            .on_event("content_block_delta", "{oops")
            .unwrap_err()
            .to_string(),
        "anthropic response content_block_delta event: data is not a JSON object"
    );
    let orphan = r#"{"type":"content_block_delta","index":3,
        "delta":{"type":"input_json_delta","partial_json":"{}"}}"#;
    assert_eq!(
        mapper
            .on_event("content_block_delta", orphan)
            .unwrap_err()
            .field(),
        Some("content_block_delta.index")
    );
    assert!(mapper.on_event("ping", "").unwrap().is_empty());
    assert!(mapper.on_event("brand_new_event", "{}").unwrap().is_empty());
}
