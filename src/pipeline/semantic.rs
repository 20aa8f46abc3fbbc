//! The semantic cache in the pipeline: whether a request may be answered
//! from it, the embedding of its question (through the gateway's own
//! embeddings path, so it is reserved, charged and metered like any call),
//! the lookup, and a hit served with a `cache_hit` row naming the row whose
//! answer it reused. Nothing here can refuse a request that would otherwise
//! pass: an embedding or store failure is a miss.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::cache_charge::serve_cached;
use super::chat::{ChatOutcome, OutcomeBody, allowed_rate, handle_chat};
use super::context::{RequestContext, RequestMeter};
use super::degraded::canned;
use crate::cache::semantic::vector::Quantized;
use crate::cache::semantic::{Answer, Hit, Lookup, Probe, SemanticRoute};
use crate::clock::{elapsed, monotonic};
use crate::config::Route;
use crate::error::ApiError;
use crate::ledger::Api;
use crate::money::Nanos;
use crate::openai::chat::ChatRequest;
use crate::provider::clients::UpstreamClients;
use crate::state::Gateway;
use crate::telemetry::metrics::{Metric, counter_add, observe_duration};
use crate::tenant::TenantHandle;

/// `tollgate_semantic_cache_requests_total`'s results.
pub const RESULTS: [&str; 4] = ["hit", "miss", "bypass", "error"];
/// Why a request was not looked up.
pub const BYPASS_REASONS: [&str; 5] = ["header", "tools", "temperature", "rule", "no_question"];

/// What consulting the cache left for the rest of the request.
pub enum Consulted {
    /// Answered from the cache.
    Hit(ChatOutcome),
    /// Not answered: `keep` is where the answer goes once bought; `cost`
    /// is what the embedding call charged.
    Miss {
        keep: Option<Keep>,
        cost: Nanos,
        header: &'static str,
    },
}

/// Where a bought answer is kept for the next close question.
#[derive(Debug, Clone)]
pub struct Keep {
    pub probe: Probe,
    pub ttl_ms: u64,
}

/// The question a request asks, and the conversation it asks it in.
struct Question {
    text: String,
    context: [u8; 32],
}

/// The part of `handle_chat` for a route with a semantic cache.
pub struct Consult<'a> {
    pub gw: &'a Arc<Gateway>,
    pub clients: &'a UpstreamClients,
    pub ctx: &'a RequestContext,
    pub meter: &'a RequestMeter,
    pub route: &'a Route,
    pub settings: &'a SemanticRoute,
    pub request: &'a ChatRequest,
    pub tenant: &'a TenantHandle,
    pub hits: &'a super::cache_charge::HitCharge<'a>,
    /// The digest of the prompts the gateway places first, if any: part of the context.
    pub placed: Option<[u8; 32]>,
}

impl Consult<'_> {
    pub async fn run(&self) -> Result<Consulted, ApiError> {
        let route = self.route.name.as_str();
        let count = |result| {
            counter_add(
                Metric::SemanticCacheRequestsTotal,
                &[("route", route), ("result", result)],
                1,
            );
        };
        let question = match question(self.ctx, self.request, self.settings) {
            Ok(question) => self.scoped(question),
            Err(reason) => {
                count("bypass");
                let labels = [("route", route), ("reason", reason)];
                counter_add(Metric::SemanticCacheBypassesTotal, &labels, 1);
                return Ok(miss(None, Nanos::ZERO, "bypass"));
            }
        };
        let (probe, cost) = match self.embed(question).await {
            Ok(embedded) => embedded,
            Err((reason, cost)) => {
                count("error");
                tracing::warn!(route, request_id = %self.ctx.request_id, reason, "The semantic cache could not embed the question; answered as a miss.");
                return Ok(miss(None, cost, "miss"));
            }
        };
        let started = monotonic();
        let cache = &self.gw.semantic_cache;
        let lookup = cache
            .lookup(&probe, self.settings.threshold, self.gw.clock.now_ms())
            .await;
        let labels = [("route", route), ("store", cache.store_name())];
        observe_duration(
            Metric::SemanticCacheLookupSeconds,
            &labels,
            elapsed(started),
        );
        let keep = Some(Keep {
            probe,
            ttl_ms: self.settings.ttl_ms,
        });
        match lookup {
            // A native answer is in its door's own API: it cannot be replayed as a chat stream.
            Lookup::Hit(hit) if !(self.request.stream() && hit.answer.native) => {
                let rate = allowed_rate(self.tenant).await?;
                count("hit");
                let saved = [("route", route)];
                counter_add(
                    Metric::SemanticCacheSavedNanosTotal,
                    &saved,
                    hit.answer.cost.get(),
                );
                Ok(Consulted::Hit(self.serve(hit, rate, cost).await?))
            }
            Lookup::Hit(_) | Lookup::Miss => {
                count("miss");
                Ok(miss(keep, cost, "miss"))
            }
            Lookup::Unavailable(reason) => {
                count("error");
                tracing::warn!(route, reason = %reason, "The semantic cache's store did not answer; served as a miss.");
                Ok(miss(keep, cost, "miss"))
            }
        }
    }

    /// `question` with its context narrowed to whom an answer may be reused
    /// for: the prompts the gateway placed first change the conversation, and
    /// an identified end user's answers are theirs unless the route shares them.
    fn scoped(&self, mut question: Question) -> Question {
        let end_user = self
            .ctx
            .end_user
            .as_deref()
            .filter(|_| !self.settings.share_across_end_users);
        if self.placed.is_some() || end_user.is_some() {
            let mut hasher = Sha256::new();
            hasher.update(question.context);
            if let Some(placed) = &self.placed {
                hasher.update(placed);
            }
            if let Some(id) = end_user {
                hasher.update(b"end user\0");
                hasher.update(id.as_bytes());
            }
            question.context = hasher.finalize().into();
        }
        question
    }

    /// The question's embedding, through the tenant's own embeddings call.
    async fn embed(&self, question: Question) -> Result<(Probe, Nanos), (String, Nanos)> {
        let ctx = RequestContext {
            api: Api::Embeddings,
            ..self.ctx.clone()
        };
        let meter = RequestMeter::default();
        let body = json!({"model": self.settings.embedding_route, "input": question.text});
        let body = body.to_string();
        let outcome = Box::pin(handle_chat(
            self.gw,
            self.clients,
            &ctx,
            &meter,
            body.as_bytes(),
            None,
        ))
        .await;
        self.meter.add_upstream(meter.upstream.get());
        self.meter.add_wait(meter.waited.get());
        let outcome = outcome.map_err(|e| (e.to_string(), Nanos::ZERO))?;
        let OutcomeBody::Complete { body, cost, .. } = outcome.body else {
            return Err((
                "the embeddings call answered with a stream".into(),
                Nanos::ZERO,
            ));
        };
        let raw = first_embedding(&body)
            .ok_or_else(|| ("the embeddings answer has no vector".to_owned(), cost))?;
        let vector = Quantized::from_f32(&raw)
            .ok_or_else(|| ("the vector is empty or zero".to_owned(), cost))?;
        let probe = Probe {
            tenant: self.ctx.tenant.id.to_string(),
            route: self.route.name.to_string(),
            context: question.context,
            vector,
            raw,
        };
        Ok((probe, cost))
    }

    /// A hit, as a stream if the request streams; `cost` is its embedding's.
    async fn serve(
        &self,
        hit: Hit,
        rate: crate::tenant::RateDecision,
        cost: Nanos,
    ) -> Result<ChatOutcome, ApiError> {
        let answer = &hit.answer;
        let body = if self.request.stream() {
            OutcomeBody::Stream {
                body: canned(replay(&answer.body, self.request.include_usage())),
                prompt_tokens: answer.usage.prompt_tokens,
            }
        } else {
            OutcomeBody::Complete {
                body: answer.body.clone(),
                cost,
                remaining: None,
            }
        };
        let similarity = Some(hit.similarity);
        serve_cached(self.hits, rate, answer, similarity, body).await
    }
}

fn miss(keep: Option<Keep>, cost: Nanos, header: &'static str) -> Consulted {
    Consulted::Miss { keep, cost, header }
}

/// Keeps a bought answer for the next close question; the caller already
/// has it, so a store that fails loses only the reuse.
pub fn keep(gw: &Arc<Gateway>, keep: Keep, answer: Answer) {
    let now = gw.clock.now_ms();
    let Err(answer) = gw
        .semantic_cache
        .put_local(&keep.probe, answer, keep.ttl_ms, now)
    else {
        return;
    };
    // A shared store is a round trip: the caller does not wait for it.
    let gw = Arc::clone(gw);
    actix_web::rt::spawn(async move {
        let now = gw.clock.now_ms();
        if let Err(reason) = gw
            .semantic_cache
            .put(&keep.probe, *answer, keep.ttl_ms, now)
            .await
        {
            counter_add(
                Metric::SemanticCacheRequestsTotal,
                &[("route", keep.probe.route.as_str()), ("result", "error")],
                1,
            );
            tracing::warn!(route = %keep.probe.route, reason = %reason, "The semantic cache's store did not keep an answer.");
        }
    });
}

/// The last user turn's text and a hash of everything else, or why the
/// request may not be answered from the cache.
fn question(
    ctx: &RequestContext,
    request: &ChatRequest,
    settings: &SemanticRoute,
) -> Result<Question, &'static str> {
    let body = request.body();
    if ctx.cache_bypass {
        return Err("header");
    }
    let has = |field: &str| body.get(field).is_some_and(|v| !v.is_null());
    if has("tools") || has("functions") || has("tool_choice") {
        return Err("tools");
    }
    // An absent temperature is the provider's default (1), not 0.
    let greedy = body
        .get("temperature")
        .and_then(Value::as_f64)
        .is_some_and(|t| t <= 0.0);
    if !greedy && !settings.any_temperature {
        return Err("temperature");
    }
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("no_question")?;
    let last = messages.last().ok_or("no_question")?;
    if last.get("role").and_then(Value::as_str) != Some("user") {
        return Err("no_question");
    }
    let text = user_text(last.get("content")).ok_or("no_question")?;
    let lowered = text.to_lowercase();
    if settings
        .bypass_when
        .iter()
        .any(|w| lowered.contains(w.as_str()))
    {
        return Err("rule");
    }
    Ok(Question {
        context: context_hash(ctx.api, body, messages.len() - 1),
        text,
    })
}

/// A turn's text: a string, or text parts only (an image makes it another
/// question than its words).
fn user_text(content: Option<&Value>) -> Option<String> {
    match content? {
        Value::String(text) if !text.trim().is_empty() => Some(text.clone()),
        Value::Array(parts) => {
            let mut text = String::new();
            for part in parts {
                if part.get("type").and_then(Value::as_str) != Some("text") {
                    return None;
                }
                text.push_str(part.get("text").and_then(Value::as_str)?);
            }
            (!text.trim().is_empty()).then_some(text)
        }
        _ => None,
    }
}

/// Everything that shapes the answer but the question itself: the door,
/// the earlier turns, the parameters. Whether it streams, and who the end
/// user is, do not change the answer.
fn context_hash(api: Api, body: &Map<String, Value>, last: usize) -> [u8; 32] {
    let mut rest = body.clone();
    for field in ["stream", "stream_options", "user"] {
        rest.remove(field);
    }
    if let Some(Value::Array(messages)) = rest.get_mut("messages") {
        messages.truncate(last);
    }
    let mut hasher = Sha256::new();
    hasher.update(api.as_str().as_bytes());
    hasher.update([0]);
    hasher.update(Value::Object(rest).to_string().as_bytes());
    hasher.finalize().into()
}

/// `data[0].embedding` of an OpenAI embeddings answer, as floats.
#[expect(
    clippy::cast_possible_truncation,
    reason = "embeddings are float32s written as JSON numbers"
)]
fn first_embedding(body: &[u8]) -> Option<Vec<f32>> {
    let answer: Value = serde_json::from_slice(body).ok()?;
    let numbers = answer.get("data")?.get(0)?.get("embedding")?.as_array()?;
    numbers
        .iter()
        .map(|n| n.as_f64().map(|x| x as f32))
        .collect()
}

/// A cached chat completion as the stream that would have delivered it.
fn replay(body: &Bytes, include_usage: bool) -> Vec<Bytes> {
    let completion: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let mut head = Map::new();
    for field in ["id", "created", "model", "system_fingerprint"] {
        if let Some(value) = completion.get(field) {
            head.insert(field.to_owned(), value.clone());
        }
    }
    head.insert("object".to_owned(), json!("chat.completion.chunk"));
    let chunk = |choices: Value, usage: Option<&Value>| {
        let mut chunk = head.clone();
        chunk.insert("choices".to_owned(), choices);
        if let Some(usage) = usage {
            chunk.insert("usage".to_owned(), usage.clone());
        }
        Bytes::from(format!("data: {}\n\n", Value::Object(chunk)))
    };
    let mut events = Vec::new();
    let choices = completion.get("choices").and_then(Value::as_array);
    for (i, choice) in choices.into_iter().flatten().enumerate() {
        let index = choice.get("index").cloned().unwrap_or_else(|| json!(i));
        let content = choice
            .pointer("/message/content")
            .cloned()
            .unwrap_or(Value::Null);
        let delta = json!({"role": "assistant", "content": content});
        let finish = choice
            .get("finish_reason")
            .cloned()
            .unwrap_or(json!("stop"));
        let opening = json!([{"index": index, "delta": delta, "finish_reason": null}]);
        events.push(chunk(opening, None));
        let closing = json!([{"index": index, "delta": {}, "finish_reason": finish}]);
        events.push(chunk(closing, None));
    }
    if include_usage && let Some(usage) = completion.get("usage") {
        events.push(chunk(json!([]), Some(usage)));
    }
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(value: &Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn the_context_ignores_the_question_streaming_and_the_end_user() {
        let a = body(&json!({"model": "m", "temperature": 0, "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is the capital of France?"}]}));
        let b = body(
            &json!({"model": "m", "temperature": 0, "stream": true, "user": "u1", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Which city is France's capital?"}]}),
        );
        let other_system = body(&json!({"model": "m", "temperature": 0, "messages": [
            {"role": "system", "content": "Be verbose."},
            {"role": "user", "content": "What is the capital of France?"}]}));
        let other_door = context_hash(Api::Messages, &a, 1);
        assert_eq!(
            context_hash(Api::Chat, &a, 1),
            context_hash(Api::Chat, &b, 1)
        );
        assert_ne!(
            context_hash(Api::Chat, &a, 1),
            context_hash(Api::Chat, &other_system, 1)
        );
        assert_ne!(context_hash(Api::Chat, &a, 1), other_door);
    }

    #[test]
    fn only_text_questions_are_asked() {
        assert_eq!(user_text(Some(&json!("hi"))).as_deref(), Some("hi"));
        let parts = json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]);
        assert_eq!(user_text(Some(&parts)).as_deref(), Some("ab"));
        let image = json!([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}]);
        assert_eq!(user_text(Some(&image)), None);
        assert_eq!(user_text(Some(&json!("  "))), None);
    }

    #[test]
    fn a_completion_replays_as_its_stream() {
        let completion = json!({"id": "c1", "created": 5, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}});
        let events = replay(&Bytes::from(completion.to_string()), true);
        let text: Vec<String> = events
            .iter()
            .map(|e| String::from_utf8(e.to_vec()).unwrap())
            .collect();
        assert_eq!(text.len(), 4);
        assert!(text[0].contains(r#""content":"Paris.""#), "{}", text[0]);
        assert!(text[1].contains(r#""finish_reason":"stop""#), "{}", text[1]);
        assert!(text[2].contains(r#""completion_tokens":2"#), "{}", text[2]);
        assert_eq!(text[3], "data: [DONE]\n\n");
        assert_eq!(replay(&Bytes::from(completion.to_string()), false).len(), 3);
    }
}
