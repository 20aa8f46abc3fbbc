//! Request and response mapping per provider kind, behind one facade the
//! pipeline uses: build the upstream body, read a complete answer (as an
//! OpenAI body plus its usage), turn an error body into OpenAI's envelope, and
//! translate a stream event by event. A request that came in by the door of
//! its provider's own API passes through instead, and its answer stays in
//! that API: Messages to `anthropic` (`passthrough.rs`), Responses to an
//! `openai` provider with `responses = true` (`responses.rs`).

pub mod anthropic;
#[cfg(test)]
mod anthropic_round_trip;
pub mod openai;
pub mod passthrough;
pub mod responses;

use bytes::Bytes;
use serde_json::Value;

use crate::config::{Provider, ProviderKind, TenantIdField};
use crate::error::ApiError;
use crate::ledger::Api;
use crate::openai::chat::ChatRequest;
use crate::pipeline::sse::{Inspected, inspect};
use crate::pricing::Usage;
use crate::prompts::Prefix;

use self::openai::ResponseUsage;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adapter {
    OpenAi,
    /// An OpenAI chat request translated into the Messages API and back.
    Anthropic,
    /// A Messages request to an Anthropic provider: as sent, answered as is.
    AnthropicPassthrough,
    /// A Responses request to a provider that speaks the Responses API: as
    /// sent, answered as is.
    ResponsesPassthrough,
}

impl Adapter {
    pub fn for_request(provider: &Provider, request: &ChatRequest) -> Adapter {
        let native = request.native().is_some();
        match (provider.kind, request.api()) {
            (ProviderKind::Openai, Api::Responses) if native && provider.responses => {
                Adapter::ResponsesPassthrough
            }
            (ProviderKind::Openai, _) => Adapter::OpenAi,
            (ProviderKind::Anthropic, Api::Messages) if native => Adapter::AnthropicPassthrough,
            (ProviderKind::Anthropic, _) => Adapter::Anthropic,
        }
    }

    /// Whether answers come back in the request's own door API rather than OpenAI chat.
    pub fn answers_natively(self) -> bool {
        matches!(
            self,
            Adapter::AnthropicPassthrough | Adapter::ResponsesPassthrough
        )
    }

    /// Where the request goes: the provider's endpoint for this adapter's API.
    pub fn url(self, provider: &Provider, api: Api) -> &str {
        match (self, api) {
            (Adapter::ResponsesPassthrough, _) => &provider.responses_url,
            (_, Api::Embeddings) => &provider.embeddings_url,
            (_, Api::Chat | Api::Responses | Api::Messages) => &provider.chat_url,
        }
    }

    /// The upstream body; a request the provider's API cannot express is the caller's 400.
    /// `tenant` is the tenant id and the field the provider takes it in, if it does;
    /// `prefix` the prompts the gateway places before the request's own.
    pub fn build_body(
        self,
        request: &ChatRequest,
        model: &str,
        max_tokens: u32,
        tenant: Option<(TenantIdField, &str)>,
        prefix: Option<&Prefix<'_>>,
    ) -> Result<Bytes, ApiError> {
        if let (Some(gap), false) = (
            request.native().and_then(|native| native.gap.as_ref()),
            self.answers_natively(),
        ) {
            return Err(ApiError::invalid_request(
                gap.param.clone(),
                format!(
                    "{}, and the route's target `{model}` does not speak this door's API",
                    gap.problem
                ),
            ));
        }
        match self {
            Adapter::OpenAi => Ok(openai::build_body(
                request, model, max_tokens, tenant, prefix,
            )),
            Adapter::AnthropicPassthrough => {
                let native = request.native().map_or(request.raw(), |n| &n.body[..]);
                let user = tenant.map(|(_, id)| id);
                Ok(passthrough::build_body(
                    native, model, max_tokens, user, prefix,
                ))
            }
            Adapter::ResponsesPassthrough => {
                let native = request.native().map_or(request.raw(), |n| &n.body[..]);
                // Validation allows only `user` with `responses = true`.
                let user = tenant.map(|(_, id)| id);
                Ok(responses::build_body(
                    native, model, max_tokens, user, prefix,
                ))
            }
            Adapter::Anthropic if !request.generates() => Err(ApiError::invalid_request(
                "model",
                format!(
                    "the route's target `{model}` is an Anthropic model, and Anthropic has no embeddings API"
                ),
            )),
            Adapter::Anthropic => {
                // Validation allows only `user` here, which Anthropic spells metadata.user_id.
                let user = tenant.map(|(_, id)| id);
                anthropic::build_body_as(request, model, max_tokens, request.stream(), user, prefix)
                    .map_err(|e| {
                        let param = e.field().unwrap_or("body").to_owned();
                        ApiError::invalid_request(param, e.to_string())
                    })
            }
        }
    }

    /// A successful complete answer as OpenAI's body, with its usage.
    pub fn read_success(self, body: Bytes, model: &str) -> Result<(Bytes, ResponseUsage), String> {
        match self {
            Adapter::OpenAi => {
                let usage = openai::parse_usage(&body);
                Ok((body, usage))
            }
            Adapter::Anthropic => anthropic::map_response(&body, model)
                .map(|(body, usage)| (body, ResponseUsage::Reported(usage)))
                .map_err(|e| e.to_string()),
            Adapter::AnthropicPassthrough => passthrough::read_usage(&body)
                .map(|usage| (body, ResponseUsage::Reported(usage)))
                .map_err(|e| e.to_string()),
            Adapter::ResponsesPassthrough => {
                responses::read_usage(&body).map(|usage| (body, usage))
            }
        }
    }

    /// An upstream 4xx body in OpenAI's envelope (OpenAI-compatible bodies pass
    /// unchanged, and so do Anthropic's to the Messages door).
    pub fn error_body(self, body: Bytes) -> Bytes {
        match self {
            Adapter::OpenAi | Adapter::AnthropicPassthrough | Adapter::ResponsesPassthrough => body,
            Adapter::Anthropic => {
                let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let message = parsed["error"]["message"].as_str().map_or_else(
                    || String::from_utf8_lossy(&body).into_owned(),
                    str::to_owned,
                );
                let kind = parsed["error"]["type"]
                    .as_str()
                    .unwrap_or("invalid_request_error");
                let envelope = serde_json::json!({"error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "code": kind,
                    "param": null,
                }});
                Bytes::from(envelope.to_string())
            }
        }
    }

    pub fn translator(self, model: &str, include_usage: bool) -> Translator {
        match self {
            Adapter::OpenAi => Translator::OpenAi { include_usage },
            Adapter::Anthropic => Translator::Anthropic {
                mapper: Box::new(anthropic::StreamMapper::new(model)),
                include_usage,
            },
            Adapter::AnthropicPassthrough => {
                Translator::Passthrough(Box::new(passthrough::EventRelay::new(model)))
            }
            Adapter::ResponsesPassthrough => {
                Translator::Responses(Box::new(responses::EventRelay::new()))
            }
        }
    }
}

/// How the relay ended a stream, for a translator that ends it in its own format.
#[derive(Debug)]
pub enum Ending<'a> {
    Done,
    /// At the hold: the usage the relay charges.
    Cut {
        input_tokens: u64,
        output_tokens: u64,
    },
    Broken(&'a str),
}

/// One OpenAI event for the caller, with what billing needs from it.
#[derive(Debug)]
pub struct Relayed {
    /// The complete event (`data: …\n\n`), or `None` if it is not for the caller.
    pub bytes: Option<Bytes>,
    pub content: String,
    pub usage: Option<Usage>,
    /// Output the provider says it generated without showing it (Anthropic's
    /// estimate of omitted thinking): counted against the hold beside `content`.
    pub unseen_tokens: u64,
}

/// What one upstream event means.
#[derive(Debug)]
pub enum Translated {
    Events(Vec<Relayed>),
    /// The stream finished; these events precede `[DONE]`.
    Done(Vec<Relayed>),
    Broken(String),
    /// The provider ended the stream as failed and said what it billed.
    Failed {
        reason: String,
        usage: Usage,
    },
}

/// Turns upstream stream events into OpenAI chunks (unchanged for OpenAI-compatible upstreams).
pub enum Translator {
    OpenAi {
        include_usage: bool,
    },
    Anthropic {
        mapper: Box<anthropic::StreamMapper>,
        include_usage: bool,
    },
    /// Anthropic's own events, to the Messages door.
    Passthrough(Box<passthrough::EventRelay>),
    /// The Responses API's own events, to the Responses door.
    Responses(Box<responses::EventRelay>),
}

fn framed(data: &str) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

impl Translator {
    /// The last events of a stream the relay ended, in the translator's own
    /// format; `None` when that is OpenAI chat's (the relay writes those).
    pub fn own_ending(&self, end: &Ending<'_>) -> Option<Bytes> {
        match self {
            Translator::Passthrough(relay) => Some(relay.ending(end)),
            Translator::Responses(relay) => Some(relay.ending(end)),
            Translator::OpenAi { .. } | Translator::Anthropic { .. } => None,
        }
    }

    /// `event` is one complete SSE event without its terminating blank line.
    pub fn on_event(&mut self, event: &[u8]) -> Translated {
        match self {
            Translator::Passthrough(relay) => relay.on_event(event),
            Translator::Responses(relay) => relay.on_event(event),
            Translator::OpenAi { include_usage } => openai_event(event, *include_usage),
            Translator::Anthropic {
                mapper,
                include_usage,
            } => anthropic_event(mapper, *include_usage, event),
        }
    }
}

/// An OpenAI-compatible upstream's event, relayed as it came: only read for
/// what billing needs, and a usage-only chunk held back from a caller who
/// did not ask for usage.
fn openai_event(event: &[u8], include_usage: bool) -> Translated {
    match inspect(event) {
        Inspected::Done => Translated::Done(Vec::new()),
        Inspected::Chunk {
            content,
            usage,
            usage_only,
        } => {
            let forward = !usage_only || include_usage;
            let bytes = forward.then(|| {
                let mut bytes = Vec::with_capacity(event.len() + 2);
                bytes.extend_from_slice(event);
                bytes.extend_from_slice(b"\n\n");
                Bytes::from(bytes)
            });
            Translated::Events(vec![Relayed {
                bytes,
                content,
                usage,
                unseen_tokens: 0,
            }])
        }
        Inspected::Error(error) => Translated::Broken(format!("upstream error event: {error}")),
        Inspected::Malformed => Translated::Broken("malformed SSE line".to_owned()),
        Inspected::Other => {
            let mut bytes = event.to_vec();
            bytes.extend_from_slice(b"\n\n");
            Translated::Events(vec![Relayed {
                bytes: Some(Bytes::from(bytes)),
                content: String::new(),
                usage: None,
                unseen_tokens: 0,
            }])
        }
    }
}

/// An Anthropic event as the OpenAI chunks it maps to. Anthropic reports
/// usage as the stream goes rather than in a last chunk, so the running
/// usage rides on the last chunk of each event, and the finished stream
/// ends with OpenAI's usage chunk (sent only to a caller who asked for it).
fn anthropic_event(
    mapper: &mut anthropic::StreamMapper,
    include_usage: bool,
    event: &[u8],
) -> Translated {
    let (name, data) = event_fields(event);
    if data.is_empty() {
        return Translated::Events(Vec::new());
    }
    let chunks = match mapper.on_event(&name, &data) {
        Ok(chunks) => chunks,
        Err(error) => return Translated::Broken(error.to_string()),
    };
    let mut relayed: Vec<Relayed> = chunks
        .iter()
        .map(|chunk| {
            let content = match inspect(&framed(chunk)) {
                Inspected::Chunk { content, .. } => content,
                _ => String::new(),
            };
            Relayed {
                bytes: Some(framed(chunk)),
                content,
                usage: None,
                unseen_tokens: 0,
            }
        })
        .collect();
    if let Some(last) = relayed.last_mut() {
        last.usage = mapper.usage();
    }
    if mapper.is_finished() {
        let usage = mapper.usage();
        let usage_chunk = mapper.usage_chunk().filter(|_| include_usage);
        relayed.push(Relayed {
            bytes: usage_chunk.map(|c| framed(&c)),
            content: String::new(),
            usage,
            unseen_tokens: 0,
        });
        return Translated::Done(relayed);
    }
    Translated::Events(relayed)
}

/// The `event:` name and the joined `data:` lines of one SSE event.
pub(crate) fn event_fields(event: &[u8]) -> (String, String) {
    let text = String::from_utf8_lossy(event);
    let mut name = String::new();
    let mut data = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("event:") {
            rest.trim().clone_into(&mut name);
        } else if let Some(rest) = line.strip_prefix("data:") {
            data.push(rest.strip_prefix(' ').unwrap_or(rest));
        }
    }
    (name, data.join("\n"))
}
