//! The Responses API's tools as chat functions, and their calls back. A
//! namespace (Codex groups an MCP server's tools in one) is flattened into
//! functions named `{namespace}__{name}`; a custom tool (free-form input,
//! such as Codex's `apply_patch`) becomes a function with one string
//! parameter, `input`. The names are remembered per request, so a call the
//! chat model makes comes back as the item the caller's SDK expects: a
//! `function_call` with its `namespace`, or a `custom_tool_call` with its
//! `input`. Tool types chat cannot carry (the local shell, the hosted shell,
//! `apply_patch` as OpenAI runs it) are a gap: an error only where the
//! request is translated, never where it passes through.

use std::collections::HashMap;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::anthropic::request::Gap;

/// Chat providers take function names of 64 bytes at most.
const MAX_NAME_BYTES: usize = 64;

/// What a chat function name stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Named {
    Function { namespace: String, name: String },
    Custom { name: String },
}

/// The chat names given to the request's namespaced and custom tools.
#[derive(Debug, Clone, Default)]
pub struct ToolNames {
    by_chat: HashMap<String, Named>,
}

impl ToolNames {
    /// `tools` as chat functions; what chat cannot carry is noted in `gap`
    /// (the first only) and left out.
    pub fn chat_tools(&mut self, tools: &[Value], gap: &mut Option<Gap>) -> Vec<Value> {
        let mut out = Vec::with_capacity(tools.len());
        for (i, tool) in tools.iter().enumerate() {
            let field = format!("tools[{i}]");
            match tool["type"].as_str() {
                Some("function") => out.push(function(tool, None)),
                Some("custom") => out.push(self.custom(tool)),
                Some("namespace") => {
                    let namespace = tool["name"].as_str().unwrap_or_default();
                    for inner in tool["tools"].as_array().into_iter().flatten() {
                        match inner["type"].as_str() {
                            Some("custom") => out.push(self.custom(inner)),
                            _ => out.push(self.namespaced(namespace, inner)),
                        }
                    }
                }
                other => {
                    gap.get_or_insert(Gap {
                        param: field,
                        problem: format!(
                            "`{}` tools have no chat counterpart",
                            other.unwrap_or("untyped")
                        ),
                    });
                }
            }
        }
        out
    }

    /// The chat name of a call the caller replays (`function_call` with its
    /// `namespace`, `custom_tool_call`).
    pub fn chat_name(&self, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(namespace) => flattened(namespace, name),
            None => name.to_owned(),
        }
    }

    /// A chat model's tool call as the Responses output item its tool is.
    pub fn item(&self, call_id: &str, chat_name: &str, arguments: &str, status: &str) -> Value {
        match self.by_chat.get(chat_name) {
            Some(Named::Custom { name }) => json!({
                "type": "custom_tool_call", "id": format!("ctc_{call_id}"), "call_id": call_id,
                "name": name, "input": custom_input(arguments), "status": status,
            }),
            Some(Named::Function { namespace, name }) => json!({
                "type": "function_call", "id": format!("fc_{call_id}"), "call_id": call_id,
                "name": name, "namespace": namespace, "arguments": arguments, "status": status,
            }),
            None => json!({
                "type": "function_call", "id": format!("fc_{call_id}"), "call_id": call_id,
                "name": chat_name, "arguments": arguments, "status": status,
            }),
        }
    }

    /// Whether a chat function stands for a custom tool (its input streams whole).
    pub fn is_custom(&self, chat_name: &str) -> bool {
        matches!(self.by_chat.get(chat_name), Some(Named::Custom { .. }))
    }

    fn namespaced(&mut self, namespace: &str, tool: &Value) -> Value {
        let name = tool["name"].as_str().unwrap_or_default();
        let chat_name = flattened(namespace, name);
        self.by_chat.insert(
            chat_name.clone(),
            Named::Function {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            },
        );
        function(tool, Some(chat_name))
    }

    fn custom(&mut self, tool: &Value) -> Value {
        let name = tool["name"].as_str().unwrap_or_default();
        self.by_chat.insert(
            name.to_owned(),
            Named::Custom {
                name: name.to_owned(),
            },
        );
        let mut description = tool["description"].as_str().unwrap_or_default().to_owned();
        // A grammar the model must follow is part of what it reads.
        if let Some(definition) = tool["format"]["definition"].as_str() {
            description.push_str("\n\nThe input follows this grammar:\n");
            description.push_str(definition);
        }
        json!({"type": "function", "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {"input": {"type": "string"}},
                           "required": ["input"]},
        }})
    }
}

/// A Responses function tool as a chat function, under `name` if given.
fn function(tool: &Value, name: Option<String>) -> Value {
    let mut function = Map::new();
    for field in ["name", "description", "parameters", "strict"] {
        if let Some(value) = tool.get(field).filter(|v| !v.is_null()) {
            function.insert(field.to_owned(), value.clone());
        }
    }
    if let Some(name) = name {
        function.insert("name".to_owned(), Value::String(name));
    }
    json!({"type": "function", "function": function})
}

/// `{namespace}__{name}`, or, past the length chat allows, its start and a
/// hash of the whole (the same tool always gets the same name).
fn flattened(namespace: &str, name: &str) -> String {
    let joined = format!("{namespace}__{name}");
    if joined.len() <= MAX_NAME_BYTES {
        return joined;
    }
    let digest = Sha256::digest(joined.as_bytes());
    let suffix = crate::auth::hex(&digest[..4]);
    let mut start = MAX_NAME_BYTES - suffix.len() - 1;
    while !joined.is_char_boundary(start) {
        start -= 1;
    }
    format!("{}_{suffix}", &joined[..start])
}

/// A custom tool's input from its chat call's arguments (`{"input": …}`);
/// arguments that are not that object are the input as they are.
fn custom_input(arguments: &str) -> String {
    serde_json::from_str::<Value>(arguments)
        .ok()
        .and_then(|v| v.get("input").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| arguments.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_flatten_customs_take_an_input_and_calls_come_back_as_their_items() {
        let tools = json!([
            {"type": "function", "name": "shell", "parameters": {"type": "object"}},
            {"type": "namespace", "name": "mcp__docs", "description": "Docs server",
             "tools": [{"type": "function", "name": "search", "parameters": {"type": "object"}}]},
            {"type": "custom", "name": "apply_patch", "description": "Edit files.",
             "format": {"type": "grammar", "syntax": "lark", "definition": "start: patch"}},
            {"type": "local_shell"}
        ]);
        let mut names = ToolNames::default();
        let mut gap = None;
        let chat = names.chat_tools(tools.as_array().unwrap(), &mut gap);
        let chat_names: Vec<&str> = chat
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(chat_names, ["shell", "mcp__docs__search", "apply_patch"]);
        assert_eq!(gap.unwrap().param, "tools[3]");
        let grammar = chat[2]["function"]["description"].as_str().unwrap();
        assert!(grammar.ends_with("start: patch"), "{grammar}");

        let call = names.item("c1", "mcp__docs__search", "{\"q\":1}", "completed");
        assert_eq!(
            (&call["type"], &call["name"], &call["namespace"]),
            (
                &json!("function_call"),
                &json!("search"),
                &json!("mcp__docs")
            )
        );
        let patch = names.item(
            "c2",
            "apply_patch",
            "{\"input\":\"*** Begin\"}",
            "completed",
        );
        assert_eq!(
            (&patch["type"], &patch["input"]),
            (&json!("custom_tool_call"), &json!("*** Begin"))
        );
        assert_eq!(
            names.item("c3", "shell", "{}", "completed")["type"],
            "function_call"
        );
        assert_eq!(
            names.chat_name(Some("mcp__docs"), "search"),
            "mcp__docs__search"
        );
    }

    #[test]
    fn a_long_flattened_name_is_cut_to_chat_s_limit_and_stays_the_same() {
        let name = flattened(&"n".repeat(50), &"f".repeat(40));
        assert_eq!(name.len(), MAX_NAME_BYTES);
        assert_eq!(name, flattened(&"n".repeat(50), &"f".repeat(40)));
    }
}
