//! Where each provider API takes the placed prompts: first system messages
//! of an OpenAI chat body, first blocks of an Anthropic `system` (with a
//! breakpoint after each), the start of a Responses body's `instructions`.

use serde_json::{Map, Value, json};

use super::Prefix;

/// Anthropic accepts at most this many `cache_control` breakpoints per request.
const MAX_BREAKPOINTS: usize = 4;

/// OpenAI chat: one system message per placed prompt, before the caller's messages.
pub fn chat_messages(body: &mut Map<String, Value>, prefix: &Prefix<'_>) {
    let placed = prefix
        .texts()
        .map(|text| json!({"role": "system", "content": text}));
    match body.get_mut("messages") {
        Some(Value::Array(messages)) => {
            let caller = std::mem::take(messages);
            messages.extend(placed);
            messages.extend(caller);
        }
        _ => {
            body.insert("messages".to_owned(), Value::Array(placed.collect()));
        }
    }
}

/// Anthropic Messages: the placed prompts as the first `system` blocks. The
/// caller's own breakpoints count against Anthropic's limit first; ours go
/// where room is left, the last placed prompt first (a breakpoint caches
/// everything before it, so it alone covers both prompts). A caller who asked
/// for one-hour caching gets no breakpoints of ours: a five-minute breakpoint
/// may not come before a one-hour one.
pub fn anthropic_system(body: &mut Map<String, Value>, prefix: &Prefix<'_>) {
    let texts: Vec<&str> = prefix.texts().collect();
    let mut breakpoints = 0;
    if prefix.breakpoints {
        let (used, long_ttl) = caller_breakpoints(body);
        if !long_ttl {
            breakpoints = MAX_BREAKPOINTS.saturating_sub(used).min(texts.len());
        }
    }
    let unmarked = texts.len() - breakpoints;
    let mut system: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let mut block = json!({"type": "text", "text": text});
            if i >= unmarked {
                block["cache_control"] = json!({"type": "ephemeral"});
            }
            block
        })
        .collect();
    match body.remove("system") {
        Some(Value::String(text)) if !text.is_empty() => {
            system.push(json!({"type": "text", "text": text}));
        }
        Some(Value::Array(blocks)) => system.extend(blocks),
        _ => {}
    }
    body.insert("system".to_owned(), Value::Array(system));
}

/// Responses: the placed prompts open `instructions`, before the caller's.
pub fn responses_instructions(body: &mut Map<String, Value>, prefix: &Prefix<'_>) {
    let mut parts: Vec<&str> = prefix.texts().collect();
    let caller = body.remove("instructions");
    if let Some(Value::String(text)) = &caller
        && !text.is_empty()
    {
        parts.push(text);
    }
    let joined = parts.join("\n\n");
    body.insert("instructions".to_owned(), Value::String(joined));
}

/// How many `cache_control` breakpoints the caller set, and whether any asks for one hour.
fn caller_breakpoints(body: &Map<String, Value>) -> (usize, bool) {
    fn walk(value: &Value, found: &mut (usize, bool)) {
        match value {
            Value::Object(object) => {
                if let Some(control @ Value::Object(_)) = object.get("cache_control") {
                    found.0 += 1;
                    found.1 |= control.get("ttl").and_then(Value::as_str) == Some("1h");
                }
                object.values().for_each(|v| walk(v, found));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, found)),
            _ => {}
        }
    }
    let mut found = (0, false);
    for field in ["tools", "system", "messages"] {
        if let Some(value) = body.get(field) {
            walk(value, &mut found);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: Prefix<'static> = Prefix {
        platform: Some("Platform rules."),
        tenant: Some("Tenant voice."),
        breakpoints: true,
    };

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn chat_gets_the_prompts_first_and_the_callers_messages_after() {
        let mut body = object(json!({"messages": [
            {"role": "system", "content": "Caller system."},
            {"role": "user", "content": "Hi"}
        ]}));
        chat_messages(&mut body, &BOTH);
        let roles: Vec<(&str, &str)> = body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                (
                    m["role"].as_str().unwrap_or(""),
                    m["content"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            roles,
            [
                ("system", "Platform rules."),
                ("system", "Tenant voice."),
                ("system", "Caller system."),
                ("user", "Hi"),
            ]
        );
    }

    #[test]
    fn anthropic_gets_a_breakpoint_after_each_prompt_before_the_callers_system() {
        let mut body = object(json!({"system": "Caller system.", "messages": []}));
        anthropic_system(&mut body, &BOTH);
        assert_eq!(
            body["system"],
            json!([
                {"type": "text", "text": "Platform rules.", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "Tenant voice.", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "Caller system."}
            ])
        );
    }

    #[test]
    fn anthropic_breakpoints_leave_room_for_the_callers_and_stop_at_four() {
        let marked = json!({"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}});
        let mut body = object(json!({
            "system": [marked.clone()],
            "tools": [{"name": "t", "input_schema": {}, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [marked]}]
        }));
        anthropic_system(&mut body, &BOTH);
        let system = &body["system"];
        // Three of the caller's: room for one, after the tenant prompt (it covers both).
        assert!(system[0].get("cache_control").is_none());
        assert_eq!(system[1]["cache_control"], json!({"type": "ephemeral"}));
        assert_eq!(system[2]["text"], "x");
        assert_eq!(caller_breakpoints(&body).0, 4);
    }

    #[test]
    fn anthropic_breakpoints_off_or_after_a_one_hour_one_are_not_placed() {
        let off = Prefix {
            breakpoints: false,
            ..BOTH
        };
        let mut body = object(json!({"messages": []}));
        anthropic_system(&mut body, &off);
        assert_eq!(caller_breakpoints(&body), (0, false));
        assert_eq!(body["system"][1]["text"], "Tenant voice.");

        let hour = json!({"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "1h"}});
        let mut body = object(json!({"messages": [{"role": "user", "content": [hour]}]}));
        anthropic_system(&mut body, &BOTH);
        assert_eq!(caller_breakpoints(&body), (1, true));
    }

    #[test]
    fn responses_instructions_open_with_the_prompts() {
        let mut body = object(json!({"instructions": "Be brief.", "input": "Hi"}));
        responses_instructions(&mut body, &BOTH);
        assert_eq!(
            body["instructions"],
            "Platform rules.\n\nTenant voice.\n\nBe brief."
        );
        let platform_only = Prefix {
            tenant: None,
            ..BOTH
        };
        let mut body = object(json!({"input": "Hi"}));
        responses_instructions(&mut body, &platform_only);
        assert_eq!(body["instructions"], "Platform rules.");
    }
}
