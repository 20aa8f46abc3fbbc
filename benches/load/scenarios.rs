//! The request shapes: a short prompt, an 8 KB prompt (the tokenizer's cost) and a
//! 3,000-token system prompt repeated on every call (the common agent shape). Every request
//! carries its own number in the user message, so no two prompts are equal; only the system
//! prompt repeats.

use crate::plan::Door;
use anyhow::{Context as _, Result};
use serde_json::{Value, json};

use crate::http::COUNTER_MARK;

/// What the gateway's tier sends upstream when the caller gives no `max_tokens`; the direct
/// baseline sends it itself so both bodies ask the same of the upstream.
pub const MAX_TOKENS: u32 = 256;
const LONG_PROMPT_BYTES: usize = 8 * 1024;
const SYSTEM_PROMPT_TOKENS: usize = 3_000;

#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: &'static str,
    pub description: String,
    messages: Value,
    /// o200k_base tokens of all message contents.
    pub prompt_tokens: usize,
}

impl Scenario {
    /// The body sent to the gateway: the route's name as `model`, no `max_tokens` (the
    /// tier's default applies, as for most callers).
    pub fn gateway_body(&self, route: &str) -> Result<Vec<u8>> {
        self.gateway_body_for(route, false, Door::Chat)
    }

    /// `stream`: ask for an SSE stream, without the usage event. The same messages in
    /// each door's shape; Messages requires `max_tokens`, so it sends the tier's default.
    pub fn gateway_body_for(&self, route: &str, stream: bool, door: Door) -> Result<Vec<u8>> {
        self.gateway_body_with(route, stream, door, false)
    }

    /// `greedy`: with `"temperature": 0`, an answer the semantic cache may keep and reuse.
    pub fn gateway_body_with(
        &self,
        route: &str,
        stream: bool,
        door: Door,
        greedy: bool,
    ) -> Result<Vec<u8>> {
        let mut body = match door {
            Door::Chat | Door::Grows => json!({"model": route, "messages": self.messages}),
            Door::Responses => json!({"model": route, "input": self.messages}),
            Door::Messages => {
                let (system, messages) = self.split_system();
                let mut body =
                    json!({"model": route, "messages": messages, "max_tokens": MAX_TOKENS});
                if let Some(system) = system {
                    body["system"] = system;
                }
                body
            }
        };
        if stream {
            body["stream"] = json!(true);
        }
        if greedy {
            body["temperature"] = json!(0);
        }
        serde_json::to_vec(&body).context("serializing a request body")
    }

    /// The system message's content (Messages takes it beside the messages) and the rest.
    fn split_system(&self) -> (Option<Value>, Vec<Value>) {
        let mut system = None;
        let mut rest = Vec::new();
        for message in self.messages.as_array().into_iter().flatten() {
            if message["role"] == "system" {
                system = Some(message["content"].clone());
            } else {
                rest.push(message.clone());
            }
        }
        (system, rest)
    }

    /// The body the gateway forwards upstream, sent directly (and through nginx).
    pub fn upstream_body(&self, model: &str) -> Result<Vec<u8>> {
        self.upstream_body_for(model, false)
    }

    /// `stream`: as the gateway forwards a streaming request, which always asks the upstream
    /// for the usage event (it bills from it).
    pub fn upstream_body_for(&self, model: &str, stream: bool) -> Result<Vec<u8>> {
        self.upstream_body_with(model, stream, false)
    }

    /// `greedy`: with `"temperature": 0`, as the semantic cells send the gateway.
    pub fn upstream_body_with(&self, model: &str, stream: bool, greedy: bool) -> Result<Vec<u8>> {
        let mut body = json!({
            "model": model,
            "messages": self.messages,
            "max_tokens": MAX_TOKENS,
        });
        if stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        if greedy {
            body["temperature"] = json!(0);
        }
        serde_json::to_vec(&body).context("serializing a request body")
    }

    pub fn body_bytes(&self) -> usize {
        self.gateway_body("fast").map_or(0, |body| body.len())
    }
}

pub fn all() -> Result<Vec<Scenario>> {
    let bpe = tiktoken_rs::o200k_base().context("loading the o200k_base tokenizer")?;
    let count = |messages: &Value| -> usize {
        messages
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|message| message.get("content").and_then(Value::as_str))
            .map(|content| bpe.encode_ordinary(content).len())
            .sum()
    };

    let short = json!([
        {"role": "user", "content": format!("{COUNTER_MARK}: What is the capital of France? Answer in one word.")}
    ]);

    let prefix = format!("{COUNTER_MARK}. Proofread this text: ");
    let mut long_text = prefix.clone();
    long_text.push_str(&prose(LONG_PROMPT_BYTES - prefix.len(), 0x5eed_0001));
    let long = json!([{"role": "user", "content": long_text}]);

    let system_source = prose(SYSTEM_PROMPT_TOKENS * 8, 0x5eed_0002);
    let tokens = bpe.encode_ordinary(&system_source);
    let system_text = bpe
        .decode(&tokens[..SYSTEM_PROMPT_TOKENS.min(tokens.len())])
        .context("decoding the system prompt")?;
    let system = json!([
        {"role": "system", "content": system_text},
        {"role": "user", "content": format!("{COUNTER_MARK}: Summarize the policy above in one sentence.")}
    ]);

    let scenarios = vec![
        Scenario {
            name: "short",
            description: "one short user message".to_owned(),
            prompt_tokens: count(&short),
            messages: short,
        },
        Scenario {
            name: "8kb",
            description: "one 8 KB user message, distinct on every call".to_owned(),
            prompt_tokens: count(&long),
            messages: long,
        },
        Scenario {
            name: "system3k",
            description:
                "the same 3,000-token system prompt on every call + a short distinct user message"
                    .to_owned(),
            prompt_tokens: count(&system),
            messages: system,
        },
    ];
    Ok(scenarios)
}

const WORDS: [&str; 64] = [
    "the",
    "budget",
    "tenant",
    "request",
    "model",
    "policy",
    "must",
    "never",
    "exceed",
    "limit",
    "agent",
    "answer",
    "with",
    "care",
    "and",
    "cite",
    "sources",
    "when",
    "asked",
    "about",
    "cost",
    "latency",
    "provider",
    "route",
    "fallback",
    "ledger",
    "record",
    "every",
    "attempt",
    "tool",
    "call",
    "user",
    "message",
    "system",
    "prompt",
    "token",
    "window",
    "context",
    "summary",
    "report",
    "daily",
    "monthly",
    "spend",
    "alert",
    "threshold",
    "reserve",
    "settle",
    "refund",
    "invoice",
    "customer",
    "support",
    "ticket",
    "escalate",
    "politely",
    "concise",
    "accurate",
    "format",
    "json",
    "table",
    "list",
    "step",
    "reason",
    "verify",
    "result",
];

/// Deterministic English-like text of exactly `bytes` ASCII bytes.
fn prose(bytes: usize, seed: u64) -> String {
    let mut state = seed;
    let mut text = String::with_capacity(bytes + 16);
    let mut in_sentence = 0;
    while text.len() < bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let word = WORDS[usize::try_from(state % 64).unwrap_or(0)];
        if in_sentence == 0 {
            let mut chars = word.chars();
            if let Some(first) = chars.next() {
                text.extend(first.to_uppercase());
                text.push_str(chars.as_str());
            }
        } else {
            text.push_str(word);
        }
        in_sentence += 1;
        if in_sentence == 12 {
            text.push_str(". ");
            in_sentence = 0;
        } else {
            text.push(' ');
        }
    }
    text.truncate(bytes);
    text
}
