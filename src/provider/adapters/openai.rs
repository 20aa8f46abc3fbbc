//! OpenAI-compatible upstreams (OpenAI, DeepSeek, DashScope, vLLM): the
//! caller's body goes out as sent, with only `model` and the output limit
//! replaced; the usage block is read back, including cached-input counts in
//! OpenAI's (`prompt_tokens_details.cached_tokens`) and DeepSeek's
//! (`prompt_cache_hit_tokens`) shapes.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::config::TenantIdField;
use crate::openai::chat::ChatRequest;
use crate::openai::splice;
use crate::pricing::Usage;
use crate::prompts::{Prefix, place};

/// The body sent upstream for one target, with the tenant id in the given
/// field if any, and the gateway's prompts before the caller's messages.
pub fn build_body(
    request: &ChatRequest,
    model: &str,
    max_tokens: u32,
    tenant: Option<(TenantIdField, &str)>,
    prefix: Option<&Prefix<'_>>,
) -> Bytes {
    if let Some(prefix) = prefix {
        return build_from_values(request, model, max_tokens, tenant, Some(prefix));
    }
    let model_json = Value::from(model).to_string();
    let max_tokens_json = max_tokens.to_string();
    let tenant_json = tenant.map(|(field, id)| (field.as_str(), Value::from(id).to_string()));
    let options_json = request.stream().then(|| {
        // Exact billing needs the provider's usage; the relay strips it if the caller did not ask.
        let mut options = match request.body().get("stream_options") {
            Some(Value::Object(options)) => options.clone(),
            _ => Map::new(),
        };
        options.insert("include_usage".to_owned(), Value::Bool(true));
        Value::Object(options).to_string()
    });
    let mut set = vec![("model", model_json.as_str())];
    // Embeddings generate nothing: no output limit to send.
    let limits: &[&str] = if request.generates() {
        request.max_tokens_fields()
    } else {
        &[]
    };
    for field in limits {
        set.push((field, max_tokens_json.as_str()));
    }
    if let Some((field, id)) = &tenant_json {
        set.push((field, id.as_str()));
    }
    if let Some(options) = &options_json {
        set.push(("stream_options", options.as_str()));
    }
    match splice::set_members(request.raw(), &set) {
        Some(body) => Bytes::from(body),
        None => build_from_values(request, model, max_tokens, tenant, None),
    }
}

/// `build_body` from the parsed values: for a body the splice cannot
/// rewrite (an escaped key), or one that gets the gateway's prompts.
fn build_from_values(
    request: &ChatRequest,
    model: &str,
    max_tokens: u32,
    tenant: Option<(TenantIdField, &str)>,
    prefix: Option<&Prefix<'_>>,
) -> Bytes {
    let mut body: Map<String, Value> = request.body().clone();
    if let Some(prefix) = prefix {
        place::chat_messages(&mut body, prefix);
    }
    if let Some((field, tenant)) = tenant {
        body.insert(field.as_str().to_owned(), Value::from(tenant));
    }
    body.insert("model".to_owned(), Value::String(model.to_owned()));
    if request.generates() {
        for field in request.max_tokens_fields() {
            body.insert((*field).to_owned(), Value::from(max_tokens));
        }
    }
    if request.stream() {
        // Exact billing needs the provider's usage; the relay strips it if the caller did not ask.
        let mut options = match body.remove("stream_options") {
            Some(Value::Object(options)) => options,
            _ => Map::new(),
        };
        options.insert("include_usage".to_owned(), Value::Bool(true));
        body.insert("stream_options".to_owned(), Value::Object(options));
    }
    // serde_json cannot fail to write a Map of Values.
    Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
}

#[derive(Deserialize)]
struct Envelope {
    usage: Option<RawUsage>,
    #[serde(default)]
    choices: Vec<Choice>,
}

/// OpenAI's `usage` object, in any of the shapes OpenAI-compatible providers send:
/// cached input as OpenAI's `prompt_tokens_details.cached_tokens` or DeepSeek's
/// `prompt_cache_hit_tokens`. Shared by complete answers and stream chunks.
#[derive(Deserialize)]
pub(crate) struct RawUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    prompt_tokens_details: Option<PromptDetails>,
    prompt_cache_hit_tokens: Option<u64>,
}

impl RawUsage {
    pub(crate) fn to_usage(&self) -> Usage {
        let cached = self
            .prompt_cache_hit_tokens
            .or_else(|| {
                self.prompt_tokens_details
                    .as_ref()
                    .and_then(|d| d.cached_tokens)
            })
            .unwrap_or(0);
        Usage {
            prompt_tokens: self.prompt_tokens,
            cached_tokens: cached,
            cache_write_tokens: 0,
            completion_tokens: self.completion_tokens,
            web_searches: 0,
        }
    }
}

#[derive(Deserialize)]
struct PromptDetails {
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct Choice {
    message: Option<Message>,
}

#[derive(Deserialize)]
struct Message {
    content: Option<Value>,
}

/// What a successful response says about its cost.
#[derive(Debug, Clone)]
pub enum ResponseUsage {
    Reported(Usage),
    /// No usage block: the completion texts, to be counted.
    Missing {
        completion_text: String,
    },
}

pub fn parse_usage(body: &[u8]) -> ResponseUsage {
    let Ok(envelope) = serde_json::from_slice::<Envelope>(body) else {
        return ResponseUsage::Missing {
            completion_text: String::new(),
        };
    };
    if let Some(raw) = envelope.usage {
        ResponseUsage::Reported(raw.to_usage())
    } else {
        {
            let completion_text = envelope
                .choices
                .iter()
                .filter_map(|c| c.message.as_ref()?.content.as_ref())
                .map(|content| match content {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join("\n");
            ResponseUsage::Missing { completion_text }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_openai_and_deepseek_cached_counts() {
        let openai = br#"{"usage":{"prompt_tokens":3000,"completion_tokens":400,"prompt_tokens_details":{"cached_tokens":2000}}}"#;
        let deepseek = br#"{"usage":{"prompt_tokens":3000,"completion_tokens":400,"prompt_cache_hit_tokens":2000,"prompt_cache_miss_tokens":1000}}"#;
        for body in [&openai[..], &deepseek[..]] {
            let ResponseUsage::Reported(usage) = parse_usage(body) else {
                panic!("no usage")
            };
            assert_eq!(
                (
                    usage.prompt_tokens,
                    usage.cached_tokens,
                    usage.completion_tokens
                ),
                (3000, 2000, 400)
            );
        }
    }

    /// The spliced body says what the body rebuilt from parsed values says.
    #[test]
    fn the_caller_s_bytes_are_rewritten_as_the_parsed_body_would_be() {
        let bodies = [
            r#"{"model":"fast","messages":[{"role":"user","content":"hi \"model\": {}"}]}"#,
            r#"{ "messages": [{"role":"system","content":"s"},{"role":"user","content":"u"}], "model": "fast", "max_tokens": 12, "user": "caller" }"#,
            r#"{"model":"fast","messages":[{"role":"user","content":"x"}],"max_completion_tokens":5,"stream":true}"#,
            r#"{"model":"fast","messages":[{"role":"user","content":"x"}],"max_completion_tokens":5,"max_tokens":90000}"#,
            r#"{"model":"fast","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":false,"other":1}}"#,
            r#"{"model":"fast","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":null,"tools":[{"type":"function","function":{"name":"f","parameters":{"model":"m"}}}]}"#,
            r#"{"mod\u0065l":"fast","messages":[{"role":"user","content":"escaped key: values path"}]}"#,
        ];
        for body in bodies {
            let request = ChatRequest::parse(body.as_bytes()).unwrap();
            for tenant in [
                None,
                Some((TenantIdField::User, "t-1")),
                Some((TenantIdField::UserId, "t\"2")),
            ] {
                let spliced = build_body(&request, "gpt-4o-mini", 256, tenant, None);
                let rebuilt = build_from_values(&request, "gpt-4o-mini", 256, tenant, None);
                let spliced: Value = serde_json::from_slice(&spliced).unwrap();
                let rebuilt: Value = serde_json::from_slice(&rebuilt).unwrap();
                assert_eq!(spliced, rebuilt, "{body} {tenant:?}");
                assert_eq!(spliced["model"], "gpt-4o-mini");
                for field in request.max_tokens_fields() {
                    assert_eq!(spliced[field], 256, "{body}");
                }
            }
        }
    }

    #[test]
    fn missing_usage_yields_the_completion_text() {
        let body = br#"{"choices":[{"message":{"role":"assistant","content":"hi there"}}]}"#;
        let ResponseUsage::Missing { completion_text } = parse_usage(body) else {
            panic!()
        };
        assert_eq!(completion_text, "hi there");
    }
}
