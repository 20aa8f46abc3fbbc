use super::*;

fn chat_of(request: &Value) -> Value {
    let translation = to_chat(Bytes::from(request.to_string())).unwrap();
    serde_json::from_slice(&translation.chat).unwrap()
}

#[test]
fn input_items_instructions_and_tools_become_a_chat_body() {
    let chat = chat_of(&json!({
        "model": "fast", "instructions": "Be brief.", "max_output_tokens": 64, "stream": true,
        "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
        "tool_choice": {"type": "function", "name": "lookup"},
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"},
                {"type": "input_image", "image_url": "https://x/y.png"}]},
            {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "lookup", "arguments": "{\"q\":1}"},
            {"type": "function_call_output", "call_id": "c1", "output": "42"},
        ]
    }));
    assert_eq!(
        chat["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    assert_eq!(
        chat["messages"][1]["content"][1]["image_url"]["url"],
        "https://x/y.png"
    );
    assert_eq!(
        chat["messages"][2]["tool_calls"].as_array().unwrap().len(),
        2
    );
    assert_eq!(
        chat["messages"][3],
        json!({"role": "tool", "tool_call_id": "c1", "content": "42"})
    );
    assert_eq!(chat["tools"][0]["function"]["name"], "lookup");
    assert_eq!(chat["tool_choice"]["function"]["name"], "lookup");
    assert_eq!(
        (
            chat["max_tokens"].as_u64(),
            chat["stream_options"]["include_usage"].as_bool()
        ),
        (Some(64), Some(true))
    );
}

#[test]
fn state_and_unknown_items_are_refused_naming_the_field() {
    let param = |request: Value| {
        let error = to_chat(Bytes::from(request.to_string())).unwrap_err();
        let envelope: Value = serde_json::from_slice(&error.envelope_json()).unwrap();
        envelope["error"]["param"].as_str().unwrap().to_owned()
    };
    // A reference left after expansion named nothing stored.
    assert_eq!(
        param(json!({"model": "m", "input": [{"type": "item_reference"}]})),
        "input[0].type"
    );
    assert_eq!(
        param(json!({"model": "m", "input": "x", "background": true})),
        "background"
    );
    assert_eq!(
        param(json!({"model": "m", "input": "x", "conversation": "conv_1"})),
        "conversation"
    );
    // Saying what the gateway does anyway is fine; it stores itself.
    for stateless in [
        json!({"store": false}),
        json!({"store": true}),
        json!({"background": false}),
        json!({"conversation": null}),
    ] {
        let mut request = json!({"model": "m", "input": "x"});
        request
            .as_object_mut()
            .unwrap()
            .extend(stateless.as_object().unwrap().clone());
        assert!(
            to_chat(Bytes::from(request.to_string())).is_ok(),
            "{request}"
        );
    }
    assert_eq!(
        param(json!({"model": "m", "input": [{"type": "image_generation_call"}]})),
        "input[0].type"
    );
    assert_eq!(param(json!({"model": "m"})), "input");
}

/// OpenAI's built-in tools bill per use: an offer of one is taken out of
/// the request (what leaves, translated or passed through, lacks it) and named.
#[test]
fn built_in_tools_leave_the_offer_and_are_named() {
    let request = json!({"model": "m", "input": "x", "tools": [
        {"type": "web_search"}, {"type": "function", "name": "f", "parameters": {}},
        {"type": "code_interpreter", "container": {"type": "auto"}}],
        "tool_choice": {"type": "web_search"}});
    let translation = to_chat(Bytes::from(request.to_string())).unwrap();
    assert_eq!(
        translation.screen.removed_tools,
        ["web_search", "code_interpreter"]
    );
    let native: Value = serde_json::from_slice(&translation.native).unwrap();
    assert_eq!(
        native["tools"],
        json!([{"type": "function", "name": "f", "parameters": {}}])
    );
    assert!(native.get("tool_choice").is_none(), "{native}");
    let chat: Value = serde_json::from_slice(&translation.chat).unwrap();
    assert_eq!(chat["tools"].as_array().map(Vec::len), Some(1));
}

/// An image a function returns is billed as an image, however short its URL.
#[test]
fn an_image_in_a_function_output_is_counted_as_an_image() {
    let request = json!({"model": "m", "input": [
        {"type": "function_call", "call_id": "c", "name": "shot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": [
            {"type": "input_image", "image_url": "https://example.com/a.png"}]}]});
    let translation = to_chat(Bytes::from(request.to_string())).unwrap();
    assert_eq!(translation.untranslated.images, 1);
}

#[test]
fn a_json_schema_text_format_becomes_the_chat_response_format() {
    let chat = chat_of(&json!({"model": "m", "input": "x", "text": {"format": {
        "type": "json_schema", "name": "answer", "strict": true,
        "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}}}));
    assert_eq!(
        chat["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "answer", "strict": true,
            "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}})
    );
}

#[test]
fn a_chat_answer_becomes_a_response_with_its_usage() {
    let chat = json!({"model": "gpt", "choices": [{"message": {"content": "Hello", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4},
                  "completion_tokens_details": {"reasoning_tokens": 1}}});
    let identity = Identity {
        id: "resp_1".into(),
        created_at: 5,
    };
    let response: Value = serde_json::from_slice(&to_response(
        chat.to_string().as_bytes(),
        &identity,
        &Echo::default(),
    ))
    .unwrap();
    assert_eq!(response["status"], "completed");
    assert_eq!(response["output"][0]["content"][0]["text"], "Hello");
    assert_eq!(response["output"][1]["call_id"], "c1");
    assert_eq!(
        response["usage"]["input_tokens_details"]["cached_tokens"],
        4
    );
    assert_eq!(
        response["usage"]["output_tokens_details"]["reasoning_tokens"],
        1
    );
    assert_eq!(response["usage"]["total_tokens"], 13);
}

#[test]
fn a_text_deltas_event_is_written_as_its_value_would_be() {
    let identity = || Identity {
        id: "resp_\"1".into(),
        created_at: 5,
    };
    let mut fast = StreamMapper::new(identity(), Echo::default());
    let mut slow = StreamMapper::new(identity(), Echo::default());
    for delta in [
        "plain",
        "quote \" backslash \\ newline \n tab \t",
        "\u{1} ctrl, é, 😀",
    ] {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        fast.emit_text_delta(&mut a, 3, delta);
        let id = slow.message_id.clone();
        slow.emit(
            &mut b,
            "response.output_text.delta",
            json!({"item_id": id, "output_index": 3,
            "content_index": 0, "delta": delta, "logprobs": []}),
        );
        assert_eq!(String::from_utf8(a).unwrap(), String::from_utf8(b).unwrap());
    }
}

#[test]
fn a_chat_stream_becomes_typed_events_ending_with_the_usage() {
    let identity = Identity {
        id: "resp_1".into(),
        created_at: 5,
    };
    let mut mapper = StreamMapper::new(identity, Echo::default());
    let mut out = Vec::new();
    for data in [
        r#"{"model":"gpt","choices":[{"index":0,"delta":{"content":"Hel"}}]}"#,
        r#"{"model":"gpt","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"length"}]}"#,
        r#"{"model":"gpt","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}"#,
        "[DONE]",
    ] {
        out.extend(mapper.on_data(data.as_bytes()));
    }
    let text = String::from_utf8(out).unwrap();
    let kinds: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.incomplete",
        ]
    );
    let last_data = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .next_back()
        .unwrap();
    let last: Value = serde_json::from_str(last_data).unwrap();
    assert_eq!(last["response"]["output"][0]["content"][0]["text"], "Hello");
    assert_eq!(last["response"]["usage"]["output_tokens"], 2);
    assert_eq!(last["sequence_number"], 9);
}
