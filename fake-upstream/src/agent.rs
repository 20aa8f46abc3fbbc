//! The fakes' `agent` behaviour, shared by the chat, Messages and Responses fakes, so an agent
//! client can run a whole tool loop with no provider key. Each fake reads its own wire shape
//! into a `Conversation`; `turn` decides what a model would do next (call a tool while none has
//! answered, then answer in text, or in JSON where a schema is asked for); the fake renders the
//! `Turn` in its own shape. Values for arguments and structured answers come from the JSON
//! schema alone, so the same request always gets the same answer.

use serde_json::{Map, Value, json};

/// What every generated string says, so a reader can tell the fake's values from a caller's.
const WORD: &str = "tollgate";
/// What a command-like property runs: harmless in any shell an agent may hand it to.
const COMMAND: &str = "echo tollgate";
/// How much of a tool result the closing answer quotes.
const QUOTE_CHARS: usize = 100;
/// A `$ref` cycle (a tree whose nodes hold nodes) ends here.
const MAX_DEPTH: usize = 16;
/// A typo in a `minItems` must not build a huge value.
const MAX_ITEMS: u64 = 16;
static NULL: Value = Value::Null;

/// A tool the request offers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tool<'a> {
    pub name: &'a str,
    /// The namespace it is offered in (a Responses `namespace` tool); its calls carry it.
    pub namespace: Option<&'a str>,
    /// The JSON schema of its input; `None` reads as an object with no properties.
    pub schema: Option<&'a Value>,
    /// A Responses custom tool: free-form text input, no schema.
    pub custom: bool,
}

/// The request's `tool_choice`, read in each API's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Choice<'a> {
    Auto,
    /// No tool may be called: the model answers in text.
    None,
    /// This tool must be called.
    Named(&'a str),
}

/// What `turn` needs to know of a request.
#[derive(Debug, Clone)]
pub(crate) struct Conversation<'a> {
    /// The tools offered, in the request's order.
    pub tools: Vec<Tool<'a>>,
    pub choice: Choice<'a>,
    /// The text of the last user message, where a tool may be named.
    pub user_text: String,
    /// The latest tool result given since the model last spoke, if any: the model has called a
    /// tool and must now answer.
    pub tool_result: Option<String>,
    /// The schema of the structured output asked for, if any.
    pub schema: Option<&'a Value>,
}

/// What the model does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Turn {
    Call(Call),
    /// A text answer other than the fake's canned one.
    Text(String),
    /// No tools and no schema: the fake answers as it does without `agent`.
    Canned,
}

/// One tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    pub name: String,
    pub namespace: Option<String>,
    pub input: CallInput,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CallInput {
    /// A JSON object for the tool's schema.
    Arguments(Value),
    /// A custom tool's free-form text.
    FreeForm(String),
}

impl Call {
    /// The input as the wire carries it: the JSON text of the arguments, or the free-form text.
    pub fn arguments(&self) -> String {
        match &self.input {
            CallInput::Arguments(arguments) => arguments.to_string(),
            CallInput::FreeForm(text) => text.clone(),
        }
    }

    /// The arguments as a JSON object (a custom tool's text under `input`).
    pub fn arguments_value(&self) -> Value {
        match &self.input {
            CallInput::Arguments(arguments) => arguments.clone(),
            CallInput::FreeForm(text) => json!({ "input": text }),
        }
    }

    pub fn is_custom(&self) -> bool {
        matches!(self.input, CallInput::FreeForm(_))
    }
}

/// The model's next step: a tool call while tools are offered and none has answered yet;
/// otherwise text, as JSON for the schema if one is asked for, else quoting the tool result.
pub(crate) fn turn(conversation: &Conversation) -> Turn {
    if conversation.tool_result.is_none()
        && let Some(tool) = chosen(conversation)
    {
        return Turn::Call(call(tool));
    }
    if let Some(schema) = conversation.schema {
        return Turn::Text(value(schema, Fill::RequiredElseAll).to_string());
    }
    match &conversation.tool_result {
        Some(result) => Turn::Text(done(result)),
        None => Turn::Canned,
    }
}

/// The tool to call: the one `tool_choice` names, else the first one the user's last message
/// names, else the first offered.
fn chosen<'c>(conversation: &'c Conversation) -> Option<&'c Tool<'c>> {
    let tools = &conversation.tools;
    let named = match conversation.choice {
        Choice::None => return None,
        Choice::Named(name) => tools.iter().find(|tool| tool.name == name),
        Choice::Auto => tools
            .iter()
            .find(|tool| names(&conversation.user_text, tool.name)),
    };
    named.or_else(|| tools.first())
}

fn call(tool: &Tool) -> Call {
    let input = if tool.custom {
        CallInput::FreeForm(WORD.to_owned())
    } else {
        let arguments = tool.schema.map(|schema| value(schema, Fill::Required));
        // Arguments are an object even where the schema is empty or odd.
        CallInput::Arguments(arguments.filter(Value::is_object).unwrap_or(json!({})))
    };
    Call {
        name: tool.name.to_owned(),
        namespace: tool.namespace.map(str::to_owned),
        input,
    }
}

/// Whether `text` names `tool` as a whole word, whatever the case.
pub(crate) fn names(text: &str, tool: &str) -> bool {
    if tool.is_empty() {
        return false;
    }
    let text = text.to_lowercase();
    let tool = tool.to_lowercase();
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    text.match_indices(&tool).any(|(at, _)| {
        !word(text[..at].chars().next_back()) && !word(text[at + tool.len()..].chars().next())
    })
}

/// The closing answer: what the tool said, shortened.
fn done(result: &str) -> String {
    let quote: String = result.trim().chars().take(QUOTE_CHARS).collect();
    if quote.is_empty() {
        "Done.".to_owned()
    } else {
        format!("Done: {quote}")
    }
}

/// The text of the last user message: where a prompt names the tool to call.
pub(crate) fn last_user_text(messages: &[Value]) -> String {
    messages
        .iter()
        .rev()
        .find(|message| message["role"] == "user")
        .map(|message| text_of(&message["content"]))
        .unwrap_or_default()
}

/// The text a message's content carries: a string, or the `text` of each part of a list
/// (chat parts, Messages blocks and Responses parts all name it so).
pub(crate) fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

// === values from schemas ===

/// Which properties of an object the generator fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fill {
    /// The required ones only: a tool call sends no optional arguments.
    Required,
    /// The required ones, or every one where the schema lists none: a structured answer is
    /// read field by field.
    RequiredElseAll,
}

/// A value valid for `schema`: the first of an `enum` or the `const`; strings `"tollgate"`
/// (`"echo tollgate"` for a `command` or `cmd`), numbers 1 within the bounds, booleans false,
/// arrays empty (`minItems` items where asked), objects filled as `fill` says, recursively.
/// `$ref`s within the schema are followed; the first non-null variant of a union is taken.
pub(crate) fn value(schema: &Value, fill: Fill) -> Value {
    Generator { root: schema, fill }.value(schema, None, 0)
}

struct Generator<'a> {
    /// What `#/…` references point into.
    root: &'a Value,
    fill: Fill,
}

impl Generator<'_> {
    /// The value of `schema` for the property `name` (`None` at the root and in arrays).
    fn value(&self, schema: &Value, name: Option<&str>, depth: usize) -> Value {
        if depth > MAX_DEPTH {
            return Value::Null;
        }
        if let Some(target) = self.reference(schema) {
            return self.value(target, name, depth + 1);
        }
        if let Some(constant) = schema.get("const") {
            return constant.clone();
        }
        if let Some(first) = schema
            .get("enum")
            .and_then(Value::as_array)
            .and_then(|values| values.first())
        {
            return first.clone();
        }
        if let Some(variant) = variant(schema) {
            return self.value(variant, name, depth + 1);
        }
        match kind(schema) {
            "object" => self.object(schema, depth),
            "array" => self.array(schema, name, depth),
            "integer" | "number" => number(schema),
            "boolean" => json!(false),
            "null" => Value::Null,
            _ if name.is_some_and(is_command) => json!(COMMAND),
            _ => json!(WORD),
        }
    }

    fn reference(&self, schema: &Value) -> Option<&Value> {
        let path = schema.get("$ref")?.as_str()?.strip_prefix('#')?;
        self.root.pointer(path)
    }

    fn object(&self, schema: &Value, depth: usize) -> Value {
        let properties = schema.get("properties").and_then(Value::as_object);
        let names: Vec<&str> = match (schema.get("required"), self.fill) {
            (Some(required), _) => required
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect(),
            (None, Fill::RequiredElseAll) => properties
                .into_iter()
                .flat_map(Map::keys)
                .map(String::as_str)
                .collect(),
            (None, Fill::Required) => Vec::new(),
        };
        let object = names
            .into_iter()
            .map(|name| {
                // A required name without a schema may be anything: a string will do.
                let property = properties.and_then(|p| p.get(name)).unwrap_or(&NULL);
                let value = self.value(property, Some(name), depth + 1);
                (name.to_owned(), value)
            })
            .collect();
        Value::Object(object)
    }

    fn array(&self, schema: &Value, name: Option<&str>, depth: usize) -> Value {
        let items = schema.get("items").unwrap_or(&NULL);
        let items_kind = self.reference(items).map_or_else(|| kind(items), kind);
        // An argv-style command (`["echo", "tollgate"]`) must not be empty to run.
        if name.is_some_and(is_command) && items_kind == "string" {
            return json!(["echo", WORD]);
        }
        let least = schema
            .get("minItems")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .min(MAX_ITEMS);
        (0..least)
            .map(|_| self.value(items, None, depth + 1))
            .collect()
    }
}

/// The schema's type: the first non-null one listed, else what its keywords imply.
fn kind(schema: &Value) -> &str {
    match schema.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|kind| *kind != "null")
            .unwrap_or("null"),
        _ if schema.get("properties").is_some() => "object",
        _ if schema.get("items").is_some() => "array",
        _ => "string",
    }
}

/// The variant of an untyped union to generate: its first that is not `null`.
fn variant(schema: &Value) -> Option<&Value> {
    if schema.get("type").is_some() || schema.get("properties").is_some() {
        return None;
    }
    let variants = ["anyOf", "oneOf", "allOf"]
        .iter()
        .find_map(|key| schema.get(*key).and_then(Value::as_array))?;
    variants
        .iter()
        .find(|variant| variant.get("type").and_then(Value::as_str) != Some("null"))
        .or_else(|| variants.first())
}

/// 1, unless the schema's bounds exclude it.
fn number(schema: &Value) -> Value {
    let bound = |key: &str| schema.get(key).and_then(Value::as_i64);
    match (bound("minimum"), bound("maximum")) {
        (Some(least), _) if least > 1 => json!(least),
        (_, Some(most)) if most < 1 => json!(most),
        _ => json!(1),
    }
}

fn is_command(name: &str) -> bool {
    name.eq_ignore_ascii_case("command") || name.eq_ignore_ascii_case("cmd")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool<'a>(name: &'a str, schema: &'a Value) -> Tool<'a> {
        Tool {
            name,
            namespace: None,
            schema: Some(schema),
            custom: false,
        }
    }

    fn conversation<'a>(tools: Vec<Tool<'a>>, user_text: &str) -> Conversation<'a> {
        Conversation {
            tools,
            choice: Choice::Auto,
            user_text: user_text.to_owned(),
            tool_result: None,
            schema: None,
        }
    }

    #[test]
    fn tool_arguments_fill_the_required_properties_only() {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "command": {"type": "string"},
                "cmd": {"type": "string"},
                "mode": {"type": "string", "enum": ["fast", "slow"]},
                "count": {"type": "integer"},
                "ratio": {"type": "number", "minimum": 5},
                "force": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "options": {"type": "object", "properties": {
                    "depth": {"type": "integer"}, "note": {"type": "string"}},
                    "required": ["depth"]},
                "optional": {"type": "string"},
            },
            "required": ["path", "command", "cmd", "mode", "count", "ratio", "force", "tags",
                         "options"],
        });
        assert_eq!(
            value(&schema, Fill::Required),
            json!({"path": "tollgate", "command": "echo tollgate", "cmd": "echo tollgate",
                   "mode": "fast", "count": 1, "ratio": 5, "force": false, "tags": [],
                   "options": {"depth": 1}})
        );
        let nothing_required = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(value(&nothing_required, Fill::Required), json!({}));
    }

    #[test]
    fn structured_answers_fill_every_property_where_none_is_listed_as_required() {
        let schema = json!({
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "score": {"type": ["integer", "null"]},
                "inner": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
            },
        });
        assert_eq!(
            value(&schema, Fill::RequiredElseAll),
            json!({"title": "tollgate", "score": 1, "inner": {"ok": false}})
        );
        let listed = json!({"type": "object", "properties": {"a": {"type": "string"},
            "b": {"type": "string"}}, "required": ["b"]});
        assert_eq!(
            value(&listed, Fill::RequiredElseAll),
            json!({"b": "tollgate"})
        );
    }

    #[test]
    fn references_unions_and_odd_schemas_still_give_a_value() {
        let schema = json!({
            "type": "object",
            "properties": {
                "node": {"$ref": "#/$defs/node"},
                "either": {"anyOf": [{"type": "null"}, {"type": "integer"}]},
                "fixed": {"const": "v1"},
                "argv": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                "command": {"type": "array", "items": {"type": "string"}},
                "untyped": {},
            },
            "required": ["node", "either", "fixed", "argv", "command", "untyped", "missing"],
            "$defs": {"node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/node"}},
                               "required": ["child"]}},
        });
        let generated = value(&schema, Fill::Required);
        assert_eq!(generated["either"], 1);
        assert_eq!(generated["fixed"], "v1");
        assert_eq!(generated["argv"], json!(["tollgate", "tollgate"]));
        assert_eq!(generated["command"], json!(["echo", "tollgate"]));
        assert_eq!(generated["untyped"], "tollgate");
        assert_eq!(generated["missing"], "tollgate");
        // The recursive node ends at the depth limit rather than overflowing the stack.
        assert!(generated["node"]["child"]["child"].is_object());
        assert_eq!(
            value(&json!({"type": "string"}), Fill::Required),
            "tollgate"
        );
        assert_eq!(value(&json!(true), Fill::Required), "tollgate");
    }

    #[test]
    fn names_match_whole_words_whatever_the_case() {
        assert!(names("Please use Bash to list files", "bash"));
        assert!(names("run get_weather.", "get_weather"));
        assert!(names("mcp__docs__search now", "mcp__docs__search"));
        assert!(!names("bashful", "bash"));
        assert!(!names("get_weather_now", "get_weather"));
        assert!(!names("anything", ""));
    }

    #[test]
    fn calls_the_named_tool_else_the_first() {
        let schema = json!({"type": "object", "properties": {"q": {"type": "string"}},
                            "required": ["q"]});
        let tools = vec![tool("read", &schema), tool("search", &schema)];
        let named = turn(&conversation(tools.clone(), "Could you SEARCH the docs?"));
        assert_eq!(
            named,
            Turn::Call(Call {
                name: "search".to_owned(),
                namespace: None,
                input: CallInput::Arguments(json!({"q": "tollgate"})),
            })
        );
        let Turn::Call(first) = turn(&conversation(tools.clone(), "hello")) else {
            panic!("expected a call");
        };
        assert_eq!(
            (first.name.as_str(), first.arguments()),
            ("read", "{\"q\":\"tollgate\"}".to_owned())
        );
        let mut forced = conversation(tools.clone(), "search");
        forced.choice = Choice::Named("read");
        assert!(matches!(turn(&forced), Turn::Call(call) if call.name == "read"));
        let mut refused = conversation(tools, "search");
        refused.choice = Choice::None;
        assert_eq!(turn(&refused), Turn::Canned);
    }

    #[test]
    fn custom_tools_take_free_form_text() {
        let custom = Tool {
            name: "apply_patch",
            namespace: Some("codex"),
            schema: None,
            custom: true,
        };
        let Turn::Call(call) = turn(&conversation(vec![custom], "patch it")) else {
            panic!("expected a call");
        };
        assert!(call.is_custom());
        assert_eq!(call.namespace.as_deref(), Some("codex"));
        assert_eq!(call.arguments(), "tollgate");
        assert_eq!(call.arguments_value(), json!({"input": "tollgate"}));
    }

    #[test]
    fn after_a_tool_result_the_answer_is_text_or_json_for_a_schema() {
        let schema = json!({"type": "object"});
        let mut answered = conversation(vec![tool("read", &schema)], "read it");
        answered.tool_result = Some(format!("  {}  ", "x".repeat(150)));
        assert_eq!(
            turn(&answered),
            Turn::Text(format!("Done: {}", "x".repeat(100)))
        );
        answered.tool_result = Some(String::new());
        assert_eq!(turn(&answered), Turn::Text("Done.".to_owned()));
        let output = json!({"type": "object", "properties": {"city": {"type": "string"}}});
        answered.schema = Some(&output);
        assert_eq!(
            turn(&answered),
            Turn::Text("{\"city\":\"tollgate\"}".to_owned())
        );
        let mut no_tools = conversation(Vec::new(), "hi");
        assert_eq!(turn(&no_tools), Turn::Canned);
        no_tools.schema = Some(&output);
        assert_eq!(
            turn(&no_tools),
            Turn::Text("{\"city\":\"tollgate\"}".to_owned())
        );
    }

    #[test]
    fn text_of_reads_strings_and_parts() {
        assert_eq!(text_of(&json!("plain")), "plain");
        assert_eq!(
            text_of(&json!([{"type": "text", "text": "a"}, {"type": "image"},
                            {"type": "input_text", "text": "b"}])),
            "ab"
        );
        assert_eq!(text_of(&json!(null)), "");
    }
}
