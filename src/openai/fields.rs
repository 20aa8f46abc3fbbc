//! The OpenAI doors' field tables (chat completions, Responses, embeddings):
//! what each body field is to the hold. `fields` is the vocabulary and the
//! check; README's "No path spends more than it held" lists these tables.

use serde_json::{Map, Value};

use crate::config::server_tools::{ServerTool, ServerTools};
use crate::fields::{Admitted, Class, Refused, Table, ToolScreen, each, one_of};

const UNKEPT: &str = "the gateway keeps responses, not conversations or background runs: name an earlier response with `previous_response_id`, or send the whole conversation in `input`";

const UNKNOWN_ITEM: &str =
    "an item reference needs the `id` of an item of a response this gateway stored";

/// `POST /v1/chat/completions`.
pub static CHAT: Table = Table {
    door: "chat",
    fields: &[
        ("model", Class::Counted),
        ("messages", Class::Values(chat_messages)),
        ("max_tokens", Class::Counted),
        ("max_completion_tokens", Class::Counted),
        ("n", Class::Counted),
        ("tools", Class::Values(chat_tools)),
        ("functions", Class::Counted),
        ("response_format", Class::Counted),
        // Reasoning tokens are output, under the output limit the gateway sets.
        ("reasoning_effort", Class::Counted),
        // Cache writes are held at the cache-write price where it is higher.
        ("prompt_cache_options", Class::Counted),
        ("tool_choice", Class::Neutral),
        ("function_call", Class::Neutral),
        ("parallel_tool_calls", Class::Neutral),
        ("stream", Class::Neutral),
        ("stream_options", Class::Neutral),
        ("temperature", Class::Neutral),
        ("top_p", Class::Neutral),
        ("frequency_penalty", Class::Neutral),
        ("presence_penalty", Class::Neutral),
        ("logit_bias", Class::Neutral),
        ("logprobs", Class::Neutral),
        ("top_logprobs", Class::Neutral),
        ("seed", Class::Neutral),
        ("stop", Class::Neutral),
        ("user", Class::Neutral),
        ("safety_identifier", Class::Neutral),
        ("metadata", Class::Neutral),
        ("store", Class::Neutral),
        ("prompt_cache_key", Class::Neutral),
        ("verbosity", Class::Neutral),
        ("service_tier", Class::Values(service_tier)),
        ("prompt_cache_retention", Class::Values(cache_retention)),
        ("modalities", Class::Values(text_modalities)),
        (
            "audio",
            Class::Refused(
                "audio output bills at audio rates, which no price entry covers; send the request without `audio`",
            ),
        ),
        (
            "prediction",
            Class::Refused(
                "a prediction's rejected tokens bill as output beyond the output limit; send the request without `prediction`",
            ),
        ),
        (
            "web_search_options",
            Class::Refused(
                "web search bills a fee per search that no price entry covers; send the request without `web_search_options`",
            ),
        ),
    ],
};

/// `POST /v1/responses`, translated and passed through. OpenAI's built-in
/// tools were removed from the offer before this table reads the body
/// (`screen_tools`).
pub static RESPONSES: Table = Table {
    door: "responses",
    fields: &[
        ("model", Class::Counted),
        ("input", Class::Values(responses_input)),
        ("instructions", Class::Counted),
        ("tools", Class::Values(responses_tools)),
        ("max_output_tokens", Class::Counted),
        ("max_tool_calls", Class::Counted),
        // `text.format`'s schema is counted as the chat translation's `response_format`.
        ("text", Class::Counted),
        ("reasoning", Class::Values(reasoning)),
        ("prompt_cache_options", Class::Counted),
        ("tool_choice", Class::Neutral),
        ("parallel_tool_calls", Class::Neutral),
        ("temperature", Class::Neutral),
        ("top_p", Class::Neutral),
        ("top_logprobs", Class::Neutral),
        ("truncation", Class::Neutral),
        ("stream", Class::Neutral),
        ("stream_options", Class::Neutral),
        ("user", Class::Neutral),
        ("safety_identifier", Class::Neutral),
        ("metadata", Class::Neutral),
        ("prompt_cache_key", Class::Neutral),
        ("include", Class::Neutral),
        ("client_metadata", Class::Neutral),
        ("access_programs", Class::Neutral),
        ("service_tier", Class::Values(service_tier)),
        ("prompt_cache_retention", Class::Values(cache_retention)),
        // The gateway keeps the answer in its own store (`stored/`); the
        // provider is never asked to.
        ("store", Class::Neutral),
        ("background", Class::Values(not_true)),
        // Expanded into the earlier input and output before this is read.
        ("previous_response_id", Class::Counted),
        ("conversation", Class::Refused(UNKEPT)),
        (
            "prompt",
            Class::Refused(
                "a stored prompt template's text and variables are not visible to the hold; send its text in `instructions` and `input`",
            ),
        ),
    ],
};

/// `POST /v1/embeddings`: its `input` is all that is billed.
pub static EMBEDDINGS: Table = Table {
    door: "embeddings",
    fields: &[
        ("model", Class::Counted),
        ("input", Class::Counted),
        ("dimensions", Class::Neutral),
        ("encoding_format", Class::Neutral),
        ("user", Class::Neutral),
    ],
};

/// OpenAI's tools that the provider runs and bills per use. An offer of
/// one is removed before the request leaves, unless the route prices it
/// (`server_tools`: web search).
pub const BUILT_IN_TOOLS: [&str; 13] = [
    "web_search",
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "web_search_2025_08_26",
    "file_search",
    "code_interpreter",
    "image_generation",
    "mcp",
    "computer",
    "computer_use_preview",
    "computer_use",
    "tool_search",
    "programmatic_tool_calling",
];

/// The built-in tools a body offers that the route does not let leave
/// (`allowed`), removed from `tools` (and a `tool_choice` that forces one
/// dropped with them). Searches the route prices leave, bounded by
/// `max_tool_calls` (which bounds every built-in tool's calls together).
pub fn screen_tools(body: &mut Map<String, Value>, allowed: &ServerTools) -> ToolScreen {
    let mut screen = ToolScreen::default();
    let Some(Value::Array(tools)) = body.get_mut("tools") else {
        return screen;
    };
    let mut searches = false;
    tools.retain(|tool| {
        let kind = tool["type"].as_str().unwrap_or_default();
        if !BUILT_IN_TOOLS.contains(&kind) {
            return true;
        }
        if kind.starts_with("web_search") && allowed.web_search.is_some() {
            searches = true;
            return true;
        }
        screen.removed.push(kind.to_owned());
        false
    });
    if tools.is_empty() && !screen.removed.is_empty() {
        body.remove("tools");
    }
    let forced = body
        .get("tool_choice")
        .and_then(|c| c.get("type"))
        .and_then(Value::as_str);
    if forced.is_some_and(|kind| screen.removed.iter().any(|r| r == kind)) {
        body.remove("tool_choice");
    }
    if let (true, Some(allowance)) = (searches, allowed.web_search) {
        let admitted = Admitted::at(ServerTool::WebSearch, allowance, body.get("max_tool_calls"));
        body.insert("max_tool_calls".to_owned(), admitted.uses.into());
        screen.admitted.push(admitted);
    }
    screen
}
fn service_tier(value: &Value) -> Result<(), Refused> {
    one_of(
        value,
        &["auto", "default", "flex"],
        "this tier bills above the route's prices; send `default`, `flex` or none",
    )
}

fn cache_retention(value: &Value) -> Result<(), Refused> {
    one_of(
        value,
        &["in_memory"],
        "extended prompt-cache retention is not priced by this gateway; send `in_memory` or none",
    )
}

fn text_modalities(value: &Value) -> Result<(), Refused> {
    each(value, |m| {
        one_of(
            m,
            &["text"],
            "only text output is priced by this gateway; send `modalities: [\"text\"]` or none",
        )
    })
}

/// `reasoning`: its tokens are output under the held limit; the `pro`
/// mode is priced as a model of its own.
fn reasoning(value: &Value) -> Result<(), Refused> {
    one_of(
        &value["mode"],
        &["standard"],
        "this reasoning mode bills above the route's prices; send `standard` or none",
    )
    .map_err(|r| Refused::new(".mode", r.why))
}

fn not_true(value: &Value) -> Result<(), Refused> {
    if value == &Value::Bool(true) {
        return Err(Refused::new(
            "",
            format!("`true` is not supported; {UNKEPT}"),
        ));
    }
    Ok(())
}

/// A chat message's roles and parts: audio and uploaded files are billed
/// in ways the estimate cannot see.
fn chat_messages(value: &Value) -> Result<(), Refused> {
    each(value, |message| {
        one_of(
            &message["role"],
            &[
                "system",
                "developer",
                "user",
                "assistant",
                "tool",
                "function",
            ],
            "not a chat role: system, developer, user, assistant or tool",
        )
        .map_err(|r| Refused::new(".role", r.why))?;
        each(&message["content"], chat_part)
            .map_err(|r| Refused::new(format!(".content{}", r.at), r.why))
    })
}

fn chat_part(part: &Value) -> Result<(), Refused> {
    match part["type"].as_str() {
        Some("file") if part["file"].get("file_id").is_some_and(|v| !v.is_null()) => {
            Err(Refused::new(".file.file_id", UPLOADED))
        }
        Some("text" | "image_url" | "refusal" | "file") | None => Ok(()),
        Some("input_audio") => Err(Refused::new(
            ".type",
            "audio input bills at audio rates, which no price entry covers",
        )),
        Some(other) => Err(Refused::new(
            ".type",
            format!("`{other}` parts are not priced by this gateway"),
        )),
    }
}

const UPLOADED: &str =
    "an uploaded file's content is not visible to the hold; send the file's data inline";

fn chat_tools(value: &Value) -> Result<(), Refused> {
    each(value, |tool| {
        one_of(
            &tool["type"],
            &["function", "custom"],
            "only function and custom tools are priced in chat completions",
        )
        .map_err(|r| Refused::new(".type", r.why))
    })
}

/// Tools the caller runs itself (their text is counted); the provider's own
/// were removed from the offer before this is read.
fn responses_tools(value: &Value) -> Result<(), Refused> {
    each(value, |tool| {
        one_of(
            &tool["type"],
            &[
                "function",
                "custom",
                "namespace",
                "local_shell",
                "shell",
                "apply_patch",
            ],
            "this tool is not priced by this gateway",
        )
        .map_err(|r| Refused::new(".type", r.why))
    })
}

/// Input items and their parts. An item that refers to stored state
/// (`item_reference`) is refused: what it expands to was never estimated.
fn responses_input(value: &Value) -> Result<(), Refused> {
    each(value, |item| {
        match item["type"].as_str() {
            // Resolved into its item before this is read: one left named nothing.
            Some("item_reference") => return Err(Refused::new(".type", UNKNOWN_ITEM)),
            Some(
                "message"
                | "function_call"
                | "function_call_output"
                | "reasoning"
                | "custom_tool_call"
                | "custom_tool_call_output"
                | "local_shell_call"
                | "local_shell_call_output"
                | "shell_call"
                | "shell_call_output"
                | "apply_patch_call"
                | "apply_patch_call_output"
                // A search the model made earlier: history, its results not in it.
                | "web_search_call",
            )
            | None => {}
            Some(other) => {
                return Err(Refused::new(
                    ".type",
                    format!("`{other}` items are not priced by this gateway"),
                ));
            }
        }
        each(&item["content"], responses_part)
            .map_err(|r| Refused::new(format!(".content{}", r.at), r.why))?;
        // A tool's output may carry parts too (images, files).
        each(&item["output"], responses_part)
            .map_err(|r| Refused::new(format!(".output{}", r.at), r.why))
    })
}

fn responses_part(part: &Value) -> Result<(), Refused> {
    match part["type"].as_str() {
        Some("input_file") if part.get("file_id").is_some_and(|v| !v.is_null()) => {
            Err(Refused::new(".file_id", UPLOADED))
        }
        Some("input_file") if part.get("file_url").is_some_and(|v| !v.is_null()) => {
            Err(Refused::new(
                ".file_url",
                "a file fetched by the provider is not visible to the hold; send the file's data inline",
            ))
        }
        Some("input_image") if part.get("file_id").is_some_and(|v| !v.is_null()) => {
            Err(Refused::new(".file_id", UPLOADED))
        }
        Some(
            "input_text" | "output_text" | "text" | "refusal" | "input_image" | "input_file"
            | "summary_text" | "reasoning_text",
        )
        | None => Ok(()),
        Some(other) => Err(Refused::new(
            ".type",
            format!("`{other}` parts are not priced by this gateway"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::{Unknown, refused_param};
    use serde_json::json;

    fn refused(table: &'static Table, body: Value) -> Option<String> {
        refused_param(table, body, Unknown::Refuse)
    }

    #[test]
    fn a_priced_search_leaves_bounded_by_max_tool_calls_and_the_rest_are_removed() {
        use crate::config::server_tools::Allowance;
        let allowed = ServerTools {
            web_search: Some(Allowance {
                max_uses: 2,
                input_tokens_per_use: 8_000,
            }),
            web_fetch: None,
        };
        let body = |calls: Value| {
            let Value::Object(body) = json!({"tools": [{"type": "web_search"},
                {"type": "file_search", "vector_store_ids": ["vs_1"]}], "max_tool_calls": calls})
            else {
                unreachable!()
            };
            body
        };
        let mut many = body(json!(10));
        let screen = screen_tools(&mut many, &allowed);
        assert_eq!(screen.removed, ["file_search"]);
        assert_eq!(screen.admitted[0].uses, 2);
        assert_eq!(many["max_tool_calls"], 2);
        assert_eq!(many["tools"], json!([{"type": "web_search"}]));
        let mut one = body(json!(1));
        assert_eq!(
            screen_tools(&mut one, &allowed).admitted[0].input_tokens(),
            8_000
        );
        assert_eq!(one["max_tool_calls"], 1);
        let mut unpriced = body(Value::Null);
        let screen = screen_tools(&mut unpriced, &ServerTools::default());
        assert_eq!(screen.removed, ["web_search", "file_search"]);
        assert!(screen.admitted.is_empty() && unpriced.get("tools").is_none());
        assert_eq!(unpriced["max_tool_calls"], Value::Null);
    }

    #[test]
    fn an_embeddings_body_with_chat_fields_is_refused() {
        let body = json!({"model": "e", "input": "x", "messages": null});
        assert_eq!(refused(&EMBEDDINGS, body), Some("messages".into()));
        let plain =
            json!({"model": "e", "input": ["x"], "dimensions": 8, "encoding_format": "float"});
        assert_eq!(refused(&EMBEDDINGS, plain), None);
    }

    #[test]
    fn premium_tiers_are_refused_and_cheaper_ones_pass() {
        let body = |tier: &str| json!({"model": "m", "messages": [], "service_tier": tier});
        assert_eq!(
            refused(&CHAT, body("priority")),
            Some("service_tier".into())
        );
        assert_eq!(refused(&CHAT, body("scale")), Some("service_tier".into()));
        assert_eq!(refused(&CHAT, body("flex")), None);
        assert_eq!(refused(&CHAT, body("default")), None);
        let retention = json!({"model": "m", "input": "x", "prompt_cache_retention": "24h"});
        assert_eq!(
            refused(&RESPONSES, retention),
            Some("prompt_cache_retention".into())
        );
    }

    #[test]
    fn what_the_estimate_cannot_see_is_refused_where_it_is() {
        let audio = json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "hi"}, {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]});
        assert_eq!(
            refused(&CHAT, audio),
            Some("messages[0].content[1].type".into())
        );
        let file = json!({"model": "m", "input": [{"role": "user", "content": [
            {"type": "input_file", "file_id": "file-1"}]}]});
        assert_eq!(
            refused(&RESPONSES, file),
            Some("input[0].content[0].file_id".into())
        );
        let reference = json!({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]});
        assert_eq!(refused(&RESPONSES, reference), Some("input[0].type".into()));
        let output = json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "c",
            "output": [{"type": "input_file", "file_id": "file-1"}]}]});
        assert_eq!(
            refused(&RESPONSES, output),
            Some("input[0].output[0].file_id".into())
        );
        let prompt = json!({"model": "m", "prompt": {"id": "pmpt_1", "variables": {}}});
        assert_eq!(refused(&RESPONSES, prompt), Some("prompt".into()));
        let search = json!({"model": "m", "messages": [], "web_search_options": {}});
        assert_eq!(refused(&CHAT, search), Some("web_search_options".into()));
    }
}
