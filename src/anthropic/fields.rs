//! The Messages door's field tables (`/v1/messages` and its count_tokens)
//! and the `anthropic-beta` values it knows: what each is to the hold.
//! Anthropic's server tools were removed from the offer before the table
//! reads the body (`screen_tools`).

use serde_json::{Map, Value};

use crate::config::server_tools::{ServerTool, ServerTools};
use crate::fields::{Admitted, Class, Refused, Table, ToolScreen, bounded, each, one_of};

/// `POST /v1/messages`.
pub static MESSAGES: Table = Table {
    door: "messages",
    fields: MESSAGE_FIELDS,
};

const MESSAGE_FIELDS: &[(&str, Class)] = &[
    ("model", Class::Counted),
    ("messages", Class::Values(messages)),
    ("max_tokens", Class::Counted),
    ("system", Class::Values(system)),
    ("tools", Class::Values(tools)),
    // Its budget is output, under `max_tokens`.
    ("thinking", Class::Counted),
    // Effort spends thinking (output, under `max_tokens`); a format's
    // schema is counted beside the chat body; a task budget only limits.
    ("output_config", Class::Counted),
    // The previous message's id, for the provider's diagnostics.
    ("diagnostics", Class::Neutral),
    ("tool_choice", Class::Neutral),
    ("metadata", Class::Neutral),
    ("stop_sequences", Class::Neutral),
    ("stream", Class::Neutral),
    ("temperature", Class::Neutral),
    ("top_k", Class::Neutral),
    ("top_p", Class::Neutral),
    // Clearing old tool results and thinking only shortens the prompt.
    ("context_management", Class::Neutral),
    ("service_tier", Class::Values(service_tier)),
    ("inference_geo", Class::Values(inference_geo)),
    ("speed", Class::Values(speed)),
    ("cache_control", Class::Values(cache_control)),
    (
        "container",
        Class::Refused(
            "a code-execution container bills by the hour, which no price entry covers; send the request without `container`",
        ),
    ),
    (
        "mcp_servers",
        Class::Refused(
            "remote MCP servers add tool results the hold never sees; send the request without `mcp_servers`",
        ),
    ),
];

/// `POST /v1/messages/count_tokens`: nothing leaves, but the same body
/// rules hold so a count never promises what `/v1/messages` would refuse.
pub static COUNT_TOKENS: Table = Table {
    door: "count_tokens",
    fields: MESSAGE_FIELDS,
};

/// Anthropic's tools that the provider runs and bills per use (and whose
/// results are input the hold never sees). An offer of one is removed
/// before the request leaves, unless the route prices it (`server_tools`).
const SERVER_TOOL_PREFIXES: [&str; 6] = [
    "web_search_",
    "web_fetch_",
    "code_execution_",
    "tool_search_tool_",
    "mcp_toolset",
    "advisor_",
];

/// Anthropic-defined tools the caller runs (bash, the text editor, computer
/// use, memory): each adds a system prompt of its own of up to about 735
/// tokens (computer use), held at this figure per tool.
pub const DEFINED_TOOL_TOKENS: u64 = 1_000;
const DEFINED_TOOL_PREFIXES: [&str; 4] = ["bash_", "text_editor_", "computer_", "memory_"];

/// `anthropic-beta` values and what each is to the hold; any other value
/// is refused (a route may forward unknown ones, at its operator's risk).
pub static BETAS: Table = Table {
    door: "messages_beta",
    fields: &[
        ("claude-code-20250219", Class::Neutral),
        ("oauth-2025-04-20", Class::Neutral),
        ("interleaved-thinking-2025-05-14", Class::Neutral),
        ("fine-grained-tool-streaming-2025-05-14", Class::Neutral),
        ("token-efficient-tools-2025-02-19", Class::Neutral),
        ("prompt-caching-2024-07-31", Class::Neutral),
        ("context-management-2025-06-27", Class::Neutral),
        ("structured-outputs-2025-11-13", Class::Neutral),
        ("effort-2025-11-24", Class::Neutral),
        ("redact-thinking-2026-02-12", Class::Neutral),
        ("advanced-tool-use-2025-11-20", Class::Neutral),
        ("tool-examples-2025-10-29", Class::Neutral),
        ("structured-outputs-2025-12-15", Class::Neutral),
        // What Claude Code adds to every call: protocol and reporting only.
        ("mid-conversation-system-2026-04-07", Class::Neutral),
        ("mid-conversation-tool-changes-2026-07-01", Class::Neutral),
        ("thinking-token-count-2026-05-13", Class::Neutral),
        ("thinking-display-updates-2026-08-18", Class::Neutral),
        ("prompt-caching-scope-2026-01-05", Class::Neutral),
        ("prompt-caching-evict-2026-05-12", Class::Neutral),
        ("task-budgets-2026-03-13", Class::Neutral),
        ("timing-2026-09-09", Class::Neutral),
        ("cache-diagnosis-2026-04-07", Class::Neutral),
        ("tool-provenance-2026-10-26", Class::Neutral),
        // What these enable is decided in the body: a server tool leaves
        // only where the route prices it, and a 1-hour cache write and
        // `speed: "fast"` are refused there.
        ("web-search-2025-03-05", Class::Neutral),
        ("web-search-results-only-2026-11-15", Class::Neutral),
        ("web-fetch-2025-09-10", Class::Neutral),
        ("tool-search-tool-2025-10-19", Class::Neutral),
        ("advisor-tool-2026-03-01", Class::Neutral),
        ("extended-cache-ttl-2025-04-11", Class::Neutral),
        ("fast-mode-2026-02-01", Class::Neutral),
        // Output is held at `max_tokens`, whatever limit the beta allows.
        ("output-128k-2025-02-19", Class::Counted),
        ("computer-use-2024-10-22", Class::Counted),
        ("computer-use-2025-01-24", Class::Counted),
        ("computer-use-2025-11-24", Class::Counted),
        (
            "context-1m-2025-08-07",
            Class::Refused(
                "a prompt past 200,000 tokens bills long-context rates; send the request without this beta",
            ),
        ),
        (
            "files-api-2025-04-14",
            Class::Refused(
                "an uploaded file's content is not visible to the hold; send the file's data inline",
            ),
        ),
        ("mcp-client-2025-04-04", Class::Refused(SERVER_TOOLS)),
        ("mcp-client-2025-11-20", Class::Refused(SERVER_TOOLS)),
        ("code-execution-2025-05-22", Class::Refused(SERVER_TOOLS)),
        ("code-execution-2025-08-25", Class::Refused(SERVER_TOOLS)),
        ("skills-2025-10-02", Class::Refused(SERVER_TOOLS)),
    ],
};

const SERVER_TOOLS: &str =
    "server tools bill per use, which no price entry covers; send the request without this beta";

/// The server tools a body offers that the route does not let leave
/// (`allowed`), removed from `tools` (and a `tool_choice` that names one
/// dropped with them); the rest leave at the bounds set on them.
pub fn screen_tools(body: &mut Map<String, Value>, allowed: &ServerTools) -> ToolScreen {
    let mut screen = ToolScreen::default();
    let Some(Value::Array(tools)) = body.get_mut("tools") else {
        return screen;
    };
    let mut names = Vec::new();
    tools.retain_mut(|tool| {
        let kind = tool["type"].as_str().unwrap_or_default().to_owned();
        if !SERVER_TOOL_PREFIXES.iter().any(|p| kind.starts_with(p)) {
            return true;
        }
        if let Some(admitted) = admit(tool, &kind, allowed) {
            screen.admitted.push(admitted);
            return true;
        }
        names.extend(tool["name"].as_str().map(str::to_owned));
        screen.removed.push(kind);
        false
    });
    if tools.is_empty() && !screen.removed.is_empty() {
        body.remove("tools");
    }
    let forced = body
        .get("tool_choice")
        .and_then(|c| c.get("name"))
        .and_then(Value::as_str);
    if forced.is_some_and(|name| names.iter().any(|n| n == name)) {
        body.remove("tool_choice");
    }
    screen
}

/// A server tool the route prices, bounded: Anthropic's own `max_uses`
/// (and a fetch's `max_content_tokens`) set to what the hold covers.
fn admit(tool: &mut Value, kind: &str, allowed: &ServerTools) -> Option<Admitted> {
    let server_tool = if kind.starts_with("web_search_") {
        ServerTool::WebSearch
    } else if kind.starts_with("web_fetch_") {
        ServerTool::WebFetch
    } else {
        return None;
    };
    let allowance = allowed.allowance(server_tool)?;
    let tool = tool.as_object_mut()?;
    let admitted = Admitted::at(server_tool, allowance, tool.get("max_uses"));
    tool.insert("max_uses".to_owned(), admitted.uses.into());
    if server_tool == ServerTool::WebFetch {
        let content = bounded(
            tool.get("max_content_tokens"),
            allowance.input_tokens_per_use,
        );
        tool.insert("max_content_tokens".to_owned(), content.into());
    }
    Some(admitted)
}

/// How many Anthropic-defined client tools a body offers.
pub fn defined_tools(body: &Map<String, Value>) -> u64 {
    body.get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|tool| {
            let kind = tool["type"].as_str().unwrap_or_default();
            DEFINED_TOOL_PREFIXES.iter().any(|p| kind.starts_with(p))
        })
        .count()
        .try_into()
        .unwrap_or(u64::MAX)
}

fn service_tier(value: &Value) -> Result<(), Refused> {
    one_of(
        value,
        &["auto", "standard_only"],
        "this tier is not priced by this gateway; send `auto`, `standard_only` or none",
    )
}

fn inference_geo(value: &Value) -> Result<(), Refused> {
    one_of(
        value,
        &["global"],
        "data residency bills above the route's prices; send `global` or none",
    )
}

fn speed(value: &Value) -> Result<(), Refused> {
    one_of(
        value,
        &["standard"],
        "fast mode bills above the route's prices; send `standard` or none",
    )
}

/// A cache breakpoint: the 5-minute write is what prices say; a 1-hour
/// write bills twice the input rate.
fn cache_control(value: &Value) -> Result<(), Refused> {
    one_of(
        &value["ttl"],
        &["5m"],
        "1-hour cache writes bill twice the input rate and this gateway prices 5-minute writes; send `ttl: \"5m\"` or none",
    )
    .map_err(|r| Refused::new(".ttl", r.why))
}

/// `cache_control` on a block or tool, where it has one.
fn block_cache(block: &Value) -> Result<(), Refused> {
    match block.get("cache_control") {
        Some(control) if !control.is_null() => cache_control(control)
            .map_err(|r| Refused::new(format!(".cache_control{}", r.at), r.why)),
        _ => Ok(()),
    }
}

fn system(value: &Value) -> Result<(), Refused> {
    each(value, block_cache)
}

fn tools(value: &Value) -> Result<(), Refused> {
    each(value, |tool| {
        let kind = tool["type"].as_str().unwrap_or("custom");
        let client = kind == "custom" || DEFINED_TOOL_PREFIXES.iter().any(|p| kind.starts_with(p));
        if !client {
            return Err(Refused::new(
                ".type",
                format!("the tool `{kind}` is not priced by this gateway"),
            ));
        }
        block_cache(tool)
    })
}

fn messages(value: &Value) -> Result<(), Refused> {
    each(value, |message| {
        each(&message["content"], block)
            .map_err(|r| Refused::new(format!(".content{}", r.at), r.why))
    })
}

/// One content block: its source must be visible to the hold, its cache
/// breakpoint priced, and a tool result's blocks alike.
fn block(block: &Value) -> Result<(), Refused> {
    block_cache(block)?;
    let source = |what: &str| match block["source"]["type"].as_str() {
        Some("file") => Err(Refused::new(
            ".source.type",
            "an uploaded file's content is not visible to the hold; send the data inline",
        )),
        Some("url") if what == "document" => Err(Refused::new(
            ".source.type",
            "a document the provider fetches is not visible to the hold; send its data inline (base64 or text)",
        )),
        _ => Ok(()),
    };
    match block["type"].as_str() {
        Some(kind @ ("image" | "document")) => source(kind),
        Some("tool_result") => each(&block["content"], self::block)
            .map_err(|r| Refused::new(format!(".content{}", r.at), r.why)),
        Some(
            "text"
            | "search_result"
            | "tool_use"
            | "thinking"
            | "redacted_thinking"
            | "server_tool_use"
            | "web_search_tool_result"
            | "web_fetch_tool_result"
            | "code_execution_tool_result"
            | "bash_code_execution_tool_result"
            | "text_editor_code_execution_tool_result"
            | "tool_search_tool_result"
            | "mcp_tool_use"
            | "mcp_tool_result"
            | "container_upload",
        )
        | None => Ok(()),
        Some(other) => Err(Refused::new(
            ".type",
            format!("`{other}` blocks are not priced by this gateway"),
        )),
    }
}

/// The first `anthropic-beta` value `BETAS` refuses (an unknown one unless
/// the route forwards unknown values), as the door's 400 naming the header.
pub fn check_betas(
    header: &str,
    unknown: crate::fields::Unknown,
) -> Result<(), crate::error::ApiError> {
    for beta in header.split(',').map(str::trim).filter(|b| !b.is_empty()) {
        let why = match BETAS.class(beta) {
            Some(Class::Refused(why)) => why.to_owned(),
            None if unknown == crate::fields::Unknown::Refuse => format!(
                "not a beta this gateway knows how to price, so it is not forwarded; a route \
                 may forward unknown values with `{}`, at its operator's risk",
                crate::fields::FORWARD_SETTING
            ),
            _ => continue,
        };
        let label = BETAS
            .fields
            .iter()
            .find(|(name, _)| *name == beta)
            .map_or("unknown", |(name, _)| name);
        return Err(BETAS.refuse(
            label,
            "anthropic-beta".to_owned(),
            &format!("`{beta}` {why}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::{Unknown, refused_param};
    use serde_json::json;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    fn refused(body: Value) -> Option<String> {
        refused_param(&MESSAGES, body, Unknown::Refuse)
    }

    #[test]
    fn a_priced_search_stays_at_the_route_s_bound_and_a_fetch_at_its_allowance() {
        use crate::config::server_tools::Allowance;
        let allowed = ServerTools {
            web_search: Some(Allowance {
                max_uses: 3,
                input_tokens_per_use: 2_000,
            }),
            web_fetch: Some(Allowance {
                max_uses: 2,
                input_tokens_per_use: 9_000,
            }),
        };
        let mut body = object(json!({"tools": [
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 50},
            {"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": 1,
             "max_content_tokens": 100_000},
            {"type": "code_execution_20250825", "name": "code_execution"}
        ], "tool_choice": {"type": "tool", "name": "web_search"}}));
        let screen = screen_tools(&mut body, &allowed);
        assert_eq!(screen.removed, ["code_execution_20250825"]);
        let bounds: Vec<_> = screen
            .admitted
            .iter()
            .map(|a| (a.tool, a.uses, a.input_tokens()))
            .collect();
        assert_eq!(
            bounds,
            [
                (ServerTool::WebSearch, 3, 6_000),
                (ServerTool::WebFetch, 1, 9_000)
            ]
        );
        assert_eq!(body["tools"][0]["max_uses"], 3);
        assert_eq!(body["tools"][1]["max_uses"], 1);
        assert_eq!(body["tools"][1]["max_content_tokens"], 9_000);
        assert_eq!(body["tool_choice"]["name"], "web_search");
        // Without a bound of its own, a search gets the route's.
        let mut unbounded =
            object(json!({"tools": [{"type": "web_search_20260209", "name": "web_search"}]}));
        let screen = screen_tools(&mut unbounded, &allowed);
        assert_eq!(screen.admitted[0].uses, 3);
        assert_eq!(unbounded["tools"][0]["max_uses"], 3);
    }

    #[test]
    fn server_tools_are_taken_out_of_the_offer_and_client_tools_stay() {
        let mut body = object(json!({"model": "m", "tools": [
            {"name": "lookup", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
            {"type": "bash_20250124", "name": "bash"},
            {"type": "web_fetch_20250910", "name": "web_fetch"}
        ], "tool_choice": {"type": "tool", "name": "web_search"}}));
        let removed = screen_tools(&mut body, &ServerTools::default()).removed;
        assert_eq!(removed, ["web_search_20250305", "web_fetch_20250910"]);
        assert_eq!(body["tools"].as_array().map(Vec::len), Some(2));
        assert!(body.get("tool_choice").is_none());
        assert_eq!(defined_tools(&body), 1);
        let mut only_search =
            object(json!({"tools": [{"type": "web_search_20250305", "name": "s"}]}));
        let removed = screen_tools(&mut only_search, &ServerTools::default()).removed;
        assert_eq!(removed.len(), 1);
        assert!(only_search.get("tools").is_none());
    }

    #[test]
    fn what_the_hold_cannot_see_is_refused_where_it_is() {
        let url_document = json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}]}]});
        assert_eq!(
            refused(url_document),
            Some("messages[0].content[0].source.type".into())
        );
        let hour = json!({"model": "m", "system": [
            {"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]});
        assert_eq!(refused(hour), Some("system[0].cache_control.ttl".into()));
        let five = json!({"model": "m", "system": [
            {"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "5m"}}]});
        assert_eq!(refused(five), None);
        assert_eq!(
            refused(json!({"mcp_servers": [{"url": "x"}]})),
            Some("mcp_servers".into())
        );
        assert_eq!(refused(json!({"container": "c"})), Some("container".into()));
        assert_eq!(
            refused(json!({"inference_geo": "us"})),
            Some("inference_geo".into())
        );
        assert_eq!(refused(json!({"speed": "fast"})), Some("speed".into()));
        let nested = json!({"messages": [{"role": "user", "content": [{"type": "tool_result",
            "tool_use_id": "t", "content": [{"type": "document", "source": {"type": "file", "file_id": "f"}}]}]}]});
        assert_eq!(
            refused(nested),
            Some("messages[0].content[0].content[0].source.type".into())
        );
    }

    #[test]
    fn betas_are_known_or_refused() {
        let known = "claude-code-20250219, interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14";
        assert!(check_betas(known, Unknown::Refuse).is_ok());
        assert!(check_betas("context-1m-2025-08-07", Unknown::Refuse).is_err());
        assert!(check_betas("brand-new-2027-01-01", Unknown::Refuse).is_err());
        assert!(check_betas("brand-new-2027-01-01", Unknown::Forward).is_ok());
        assert!(check_betas("code-execution-2025-08-25", Unknown::Forward).is_err());
    }
}
