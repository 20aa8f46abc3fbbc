//! The stream relay: upstream SSE → client SSE, event by event as it
//! arrives. It runs in a task that outlives the handler, so the bill is
//! settled even when the caller leaves: the relay then drains the upstream
//! (bounded in time and in concurrent drains) for its reported usage, or
//! cancels it and estimates. A broken upstream ends the caller's stream with
//! an error event and is billed for what was streamed (`partial`).

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::context::RequestContext;
use super::record::{self, AttemptRow};
use super::sse::SseSplitter;
use crate::clock::{elapsed_ms, monotonic};
use crate::config::{OnClientDisconnect, Provider, Target};
use crate::ids::EventId;
use crate::ledger::{AttemptStatus, UsageKind};
use crate::pricing::{self, Usage};
use crate::provider::actor::{Permit, Verdict};
use crate::provider::adapters::{Ending, Relayed, Translated, Translator};
use crate::provider::call::UpstreamBody;
use crate::state::Gateway;
use crate::telemetry::metrics::{Metric, counter_add};
use crate::tenant::{CallSlot, ReservationGuard};

use super::hold::Growth;

/// Events buffered towards a slow caller before the relay waits for it.
const CLIENT_BUFFER_EVENTS: usize = 64;

/// The caller's side of a relayed stream.
pub type ClientBody = mpsc::Receiver<Result<Bytes, std::io::Error>>;

pub struct Relay {
    pub gw: Arc<Gateway>,
    pub ctx: RequestContext,
    pub route: String,
    pub target: Target,
    pub settings: StreamSettings,
    /// `ok` or `fallback_ok`, if the stream completes.
    pub success_status: AttemptStatus,
    pub attempt: u32,
    pub input_tokens: u64,
    /// The output the hold covers (every choice at the limit sent): the relay
    /// ends the stream itself rather than pass on more.
    pub held_output_tokens: u64,
    /// `n`, for the `length` finish of every choice when the relay ends the stream.
    pub choices: u32,
    /// The caller asked for the usage chunk.
    pub include_usage: bool,
    /// The provider may bill what the stream never shows: reasoning, a
    /// provider-run tool's uses.
    pub bills_unseen: bool,
    /// The request's deadline: a stream still running then is ended.
    pub deadline: std::time::Instant,
    /// Upstream events → the caller's OpenAI chunks (usage chunk only if asked for).
    pub translator: Translator,
    pub reservation: ReservationGuard,
    /// How the hold grows with the stream, where it does.
    pub growth: Option<Growth>,
    /// The steps the hold has grown by: released once the first guard is
    /// settled at the whole cost.
    pub steps: Vec<ReservationGuard>,
    /// The call's slot among the calls in flight: the relay's until it ends.
    pub call: Option<CallSlot>,
    /// The attempt's journal reserve; its row settles it.
    pub event_id: EventId,
    pub permit: Permit,
    pub started: std::time::Instant,
    pub ttft_ms: u64,
}

/// The provider's settings a relay reads, copied out of them: the whole
/// provider (its URLs, key and headers) would be cloned into every stream.
#[derive(Debug, Clone, Copy)]
pub struct StreamSettings {
    pub first_token_timeout_ms: u64,
    pub drain_timeout_ms: u64,
    pub on_client_disconnect: OnClientDisconnect,
}

impl StreamSettings {
    pub fn of(provider: &Provider) -> StreamSettings {
        StreamSettings {
            first_token_timeout_ms: provider.first_token_timeout_ms,
            drain_timeout_ms: provider.drain_timeout_ms,
            on_client_disconnect: provider.on_client_disconnect,
        }
    }
}

/// The code of the error event a broken stream ends with, and its request's status.
pub(crate) const STREAM_INTERRUPTED: &str = "stream_interrupted";

/// The output passed on to the caller so far, counted against the hold.
#[derive(Default)]
struct Passed {
    content: String,
    /// Once counting began (see `fits`): the tokens of `content[..counted_to]`,
    /// a prefix ending where the tokenizer splits anyway, so the rest is
    /// counted alone and the sum is the whole text's count.
    counted: Option<(usize, u64)>,
    /// Tokens the provider says it generated without showing them.
    unseen: u64,
    /// The last event with generated text: the id and model a cut ending repeats.
    last_chunk: Option<Bytes>,
}

/// A tail longer than this is split at a word boundary and its head counted for good.
const UNCOUNTED_TAIL_BYTES: usize = 256;

impl Passed {
    /// Counts an event's text (and the output it says was generated unseen);
    /// `false` if passing it on would pass what the hold allows (it is then
    /// not forwarded).
    fn fits(&mut self, relay: &Relay, item: &Relayed) -> bool {
        if item.content.is_empty() && item.unseen_tokens == 0 {
            return true;
        }
        let allowed = relay.allowed_tokens();
        let unseen = self.unseen.saturating_add(item.unseen_tokens);
        let bytes = self.content.len().saturating_add(item.content.len());
        // Every token is at least one byte, so a text no longer than the hold
        // in bytes fits it in tokens: most streams are never tokenized here.
        // Once counting began it goes on (a grown hold must not see a stale count).
        let cheap = u64::try_from(bytes)
            .unwrap_or(u64::MAX)
            .saturating_add(unseen)
            <= allowed;
        if self.counted.is_some() || !cheap {
            // In the encoding the target's prompts are counted with: its model's.
            let counting = relay.gw.estimator.with(relay.target.counting);
            let (counted_to, head) = self.counted.unwrap_or_default();
            let mut tail = String::with_capacity(bytes - counted_to);
            tail.push_str(&self.content[counted_to..]);
            tail.push_str(&item.content);
            if head + counting.count_text(&tail) + unseen > allowed {
                return false;
            }
            self.counted = Some(match word_boundary(&tail) {
                Some(split) if tail.len() > UNCOUNTED_TAIL_BYTES => (
                    counted_to + split,
                    head + counting.count_text(&tail[..split]),
                ),
                _ => (counted_to, head),
            });
        }
        self.unseen = unseen;
        self.content.push_str(&item.content);
        if !item.content.is_empty() {
            self.last_chunk.clone_from(&item.bytes);
        }
        true
    }
}

/// The last place in `text` where a word ends and one space begins the
/// next: the tokenizers' pre-split keeps a space with the word after it, so
/// no token spans it and the two sides count apart exactly.
fn word_boundary(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    (1..bytes.len().saturating_sub(1)).rev().find(|&i| {
        bytes[i] == b' '
            && !bytes[i - 1].is_ascii_whitespace()
            && !bytes[i + 1].is_ascii_whitespace()
    })
}

/// How long the end of a finished upstream body is waited for.
const BODY_END_WAIT: Duration = Duration::from_millis(100);
/// Bytes read after the stream's end marker before the connection is given up.
const BODY_END_BYTES: usize = 64 * 1024;

/// Reads what follows the upstream's end marker (normally only the chunked
/// body's last chunk), so that its connection goes back to the pool: dropped
/// half-read it is closed, and every stream would pay a new TCP and TLS
/// handshake before its first token.
async fn read_to_end(mut upstream: UpstreamBody) {
    let rest = async {
        let mut bytes = 0usize;
        while let Some(Ok(chunk)) = upstream.next().await {
            bytes = bytes.saturating_add(chunk.len());
            if bytes > BODY_END_BYTES {
                return;
            }
        }
    };
    let _ = actix_rt::time::timeout(BODY_END_WAIT, rest).await;
}

/// How the upstream side ended.
enum End {
    Done,
    Broken(String),
    /// The provider ended the stream as failed, with the usage it billed.
    Failed(String),
    /// The relay ended the stream at its hold; the upstream call is cancelled.
    Cut,
}

/// A translated event as what the relay does next: pass these events on
/// (and end after them when `true`), or end now (keeping a failure's usage).
fn next_step(
    translated: Translated,
    usage: &mut Option<Usage>,
) -> Result<(Vec<Relayed>, bool), End> {
    match translated {
        Translated::Events(relayed) => Ok((relayed, false)),
        Translated::Done(relayed) => Ok((relayed, true)),
        Translated::Broken(reason) => Err(End::Broken(reason)),
        Translated::Failed {
            reason,
            usage: billed,
        } => {
            *usage = Some(billed);
            Err(End::Failed(reason))
        }
    }
}

impl Relay {
    /// Starts relaying; the returned body yields the upstream's events.
    pub fn spawn(self, first: Bytes, upstream: UpstreamBody) -> ClientBody {
        let (tx, rx) = mpsc::channel(CLIENT_BUFFER_EVENTS);
        actix_rt::spawn(self.run(first, upstream, tx));
        rx
    }

    async fn run(
        mut self,
        first: Bytes,
        mut upstream: UpstreamBody,
        tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    ) {
        let mut splitter = SseSplitter::default();
        splitter.push(&first);
        let mut passed = Passed::default();
        let mut usage: Option<Usage> = None;
        let mut client_gone = false;
        let mut draining = false;
        let idle = Duration::from_millis(self.settings.first_token_timeout_ms);
        let drain_deadline = Duration::from_millis(self.settings.drain_timeout_ms);
        let mut gone_at = None;

        let end = 'relay: loop {
            while let Some(event) = splitter.next_event() {
                let (relayed, done) = match next_step(self.translator.on_event(&event), &mut usage)
                {
                    Ok(step) => step,
                    Err(end) => break 'relay end,
                };
                for item in relayed {
                    while !passed.fits(&self, &item) {
                        // Boxed, as the settle below: a stream holds its task
                        // for its whole life, and inline these rare steps would
                        // size every stream's task by theirs.
                        if !Box::pin(self.grow()).await {
                            break 'relay End::Cut;
                        }
                    }
                    if item.usage.is_some() {
                        usage = item.usage;
                    }
                    if let (Some(bytes), false) = (item.bytes, client_gone)
                        && tx.send(Ok(bytes)).await.is_err()
                    {
                        client_gone = true;
                    }
                }
                if done {
                    break 'relay End::Done;
                }
            }
            if client_gone && !draining {
                gone_at.get_or_insert_with(monotonic);
                if !self.start_drain() {
                    break 'relay End::Broken("client disconnected; upstream cancelled".to_owned());
                }
                draining = true;
            }
            let wait = match self.wait(gone_at, idle, drain_deadline) {
                Ok(wait) => wait,
                Err(end) => break 'relay end,
            };
            let next = tokio::select! {
                next = actix_rt::time::timeout(wait, upstream.next()) => next,
                () = tx.closed(), if !client_gone => {
                    client_gone = true;
                    continue 'relay;
                }
            };
            match self.read(next, gone_at.is_some(), idle) {
                Ok(bytes) => splitter.push(&bytes),
                Err(end) => break 'relay end,
            }
        };
        if draining {
            self.gw.active_drains.fetch_sub(1, Ordering::SeqCst);
        }
        // Dropping the upstream body closes that connection: it never returns to
        // the pool half-read. A stream that ended well is read to its end below.
        let finished = match end {
            End::Done => Some(upstream),
            End::Broken(_) | End::Failed(_) | End::Cut => None,
        };
        let last = (!client_gone)
            .then(|| self.last_events(&end, &passed))
            .flatten();
        // The row is written before the caller's stream ends: a graceful shutdown
        // waits for responses, not for this task, so it cannot outrun the row.
        Box::pin(self.settle(end, client_gone, usage, &passed.content)).await;
        if let Some(last) = last {
            let _ = tx.send(Ok(last)).await;
        }
        // Before the caller's stream ends (the end normally came with `[DONE]`):
        // once the caller has its answer, the connection is back in the pool.
        if let Some(upstream) = finished {
            read_to_end(upstream).await;
        }
    }

    /// How long to wait for the upstream's next bytes: until the chunk
    /// timeout, or the drain's end once the caller is gone, never past the
    /// request's deadline (`Err`: it has passed).
    fn wait(
        &self,
        gone_at: Option<std::time::Instant>,
        idle: Duration,
        drain_deadline: Duration,
    ) -> Result<Duration, End> {
        let to_deadline = self.deadline.saturating_duration_since(monotonic());
        if to_deadline.is_zero() {
            return Err(End::Broken("the request's deadline passed".to_owned()));
        }
        let wait = match gone_at {
            Some(at) => drain_deadline.saturating_sub(monotonic().saturating_duration_since(at)),
            None => idle,
        };
        Ok(wait.min(to_deadline))
    }

    /// The upstream's next bytes, or why the stream ends (`draining`: the
    /// caller is gone and the wait was the drain's).
    fn read<E: std::fmt::Display, T>(
        &self,
        next: Result<Option<Result<Bytes, E>>, T>,
        draining: bool,
        idle: Duration,
    ) -> Result<Bytes, End> {
        let reason = match next {
            Ok(Some(Ok(bytes))) => return Ok(bytes),
            Ok(Some(Err(error))) => format!("upstream stream failed: {error}"),
            Ok(None) => "the upstream ended without [DONE]".to_owned(),
            Err(_) if self.deadline <= monotonic() => "the request's deadline passed".to_owned(),
            Err(_) if draining => "drain timed out".to_owned(),
            Err(_) => format!("no chunk for {} ms", idle.as_millis()),
        };
        Err(End::Broken(reason))
    }

    /// What may be passed on: all that is held, less the step kept ahead of
    /// the relay while the hold can still grow. The provider goes on
    /// generating until a cancel reaches it; that step is what covers it.
    fn allowed_tokens(&self) -> u64 {
        match &self.growth {
            Some(growth) => {
                let step = &growth.step.request;
                if self.held_output_tokens < step.output_tokens(growth.limit) {
                    let ahead = step.output_tokens(step.max_tokens);
                    self.held_output_tokens.saturating_sub(ahead)
                } else {
                    self.held_output_tokens
                }
            }
            None => self.held_output_tokens,
        }
    }

    /// Reserves the hold's next step in the tenant's one atomic decision;
    /// `false` when the budget cannot fund it (or nothing is left to hold),
    /// and the stream ends here.
    async fn grow(&mut self) -> bool {
        let Some(growth) = &self.growth else {
            return false;
        };
        let mut request = growth.step.request.clone();
        let limit = request.output_tokens(growth.limit);
        if self.held_output_tokens >= limit {
            return false;
        }
        let left = (limit - self.held_output_tokens).div_ceil(u64::from(request.choices.max(1)));
        request.max_tokens = request
            .max_tokens
            .min(u32::try_from(left).unwrap_or(u32::MAX));
        let reserved = growth
            .tenant
            .reserve(request, growth.step.meta.clone())
            .await;
        let granted = match reserved {
            Ok(guard) if guard.granted().max_tokens > 0 => {
                let added = growth
                    .step
                    .request
                    .output_tokens(guard.granted().max_tokens);
                self.held_output_tokens = self.held_output_tokens.saturating_add(added);
                self.steps.push(guard);
                true
            }
            Ok(guard) => {
                guard.release();
                false
            }
            Err(_) => false,
        };
        let outcome = if granted { "granted" } else { "refused" };
        let labels = [("route", self.route.as_str()), ("outcome", outcome)];
        counter_add(Metric::StreamHoldStepsTotal, &labels, 1);
        granted
    }

    /// What the hold covers in money: its first grant and every step since.
    fn held_amount(&self) -> crate::money::Nanos {
        self.steps
            .iter()
            .fold(self.reservation.granted().amount, |sum, step| {
                sum.saturating_add(step.granted().amount)
            })
    }

    /// The events that end the caller's stream, after the upstream's.
    fn last_events(&self, end: &End, passed: &Passed) -> Option<Bytes> {
        if let Some(own) = self.own_ending(end) {
            Some(own).filter(|bytes| !bytes.is_empty())
        } else {
            Some(match end {
                End::Done => Bytes::from_static(b"data: [DONE]\n\n"),
                End::Cut => self.cut_ending(passed.last_chunk.as_deref()),
                End::Broken(reason) | End::Failed(reason) => {
                    let error = serde_json::json!({"error": {
                        "message": format!("the upstream stream broke: {reason}"),
                        "type": "server_error",
                        "code": STREAM_INTERRUPTED,
                        "param": null,
                    }});
                    Bytes::from(format!("data: {error}\n\n"))
                }
            })
        }
    }

    /// The ending in the translator's own format, if it is not OpenAI chat.
    fn own_ending(&self, end: &End) -> Option<Bytes> {
        let ending = match end {
            End::Done => Ending::Done,
            End::Cut => Ending::Cut {
                input_tokens: self.input_tokens,
                output_tokens: self.held_output_tokens,
            },
            End::Broken(reason) | End::Failed(reason) => Ending::Broken(reason),
        };
        self.translator.own_ending(&ending)
    }

    fn cut_note(&self) -> String {
        format!(
            "ended by the gateway at its hold of {} output tokens; the upstream kept generating",
            self.held_output_tokens
        )
    }

    /// The end of a stream the relay cut at its hold, as OpenAI ends one that
    /// reached its limit: a `length` finish for every choice, the usage chunk
    /// when the caller asked for it, then `[DONE]`.
    fn cut_ending(&self, last_chunk: Option<&[u8]>) -> Bytes {
        let last: serde_json::Value = last_chunk
            .and_then(|event| {
                let data = event.strip_prefix(b"data: ")?;
                serde_json::from_slice(data.trim_ascii()).ok()
            })
            .unwrap_or_default();
        let field = |name: &str| last.get(name).cloned().unwrap_or_default();
        let choices: Vec<serde_json::Value> = (0..self.choices)
            .map(
                |index| serde_json::json!({"index": index, "delta": {}, "finish_reason": "length"}),
            )
            .collect();
        let mut chunk = serde_json::json!({
            "id": field("id"),
            "object": "chat.completion.chunk",
            "created": field("created"),
            "model": field("model"),
            "choices": choices,
        });
        let mut out = format!("data: {chunk}\n\n");
        if self.include_usage {
            let prompt = self.input_tokens;
            let completion = self.held_output_tokens;
            chunk["choices"] = serde_json::json!([]);
            chunk["usage"] = serde_json::json!({
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt.saturating_add(completion),
            });
            let _ = write!(out, "data: {chunk}\n\n");
        }
        out.push_str("data: [DONE]\n\n");
        Bytes::from(out)
    }

    /// Whether this relay may keep reading after its caller left.
    fn start_drain(&self) -> bool {
        if self.settings.on_client_disconnect == OnClientDisconnect::Cancel {
            return false;
        }
        let active = self.gw.active_drains.fetch_add(1, Ordering::SeqCst);
        if active >= self.gw.config.server.max_concurrent_drains {
            self.gw.active_drains.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// What the attempt is charged for. The provider's own usage counts only
    /// if it covers the whole stream. Without it, what the relay saw is not
    /// what was billed: a stream that broke off or was cancelled may have
    /// gone on generating, and reasoning is billed but never streamed. Those
    /// are charged their hold (`unknown`, for reconciliation), as any attempt
    /// without a report is; a stream cut at its hold, its held output.
    fn billed_usage(
        &self,
        end: &End,
        reported: Option<Usage>,
        content: &str,
    ) -> (Usage, UsageKind) {
        if let (Some(usage), End::Done | End::Failed(_)) = (reported, end) {
            return (usage, UsageKind::Reported);
        }
        let held = match end {
            End::Broken(_) | End::Failed(_) => true,
            End::Done => self.bills_unseen,
            End::Cut => false,
        };
        let completion_tokens = match end {
            End::Cut => self.held_output_tokens,
            _ if held => self.held_output_tokens,
            _ => self.gw.estimator.count_completion(content),
        };
        let usage = Usage {
            prompt_tokens: self.input_tokens,
            completion_tokens,
            ..Usage::default()
        };
        let kind = if held {
            UsageKind::Unknown
        } else {
            UsageKind::Estimated
        };
        (usage, kind)
    }

    async fn settle(self, end: End, client_gone: bool, reported: Option<Usage>, content: &str) {
        let (status, verdict, error) = match (&end, client_gone) {
            (_, true) => (
                AttemptStatus::ClientCancelled,
                Verdict::Abandoned,
                match &end {
                    End::Done => None,
                    End::Broken(reason) | End::Failed(reason) => Some(reason.clone()),
                    End::Cut => Some(self.cut_note()),
                },
            ),
            (End::Done, false) => (self.success_status, Verdict::Healthy, None),
            (End::Cut, false) => (self.success_status, Verdict::Healthy, Some(self.cut_note())),
            (End::Broken(reason) | End::Failed(reason), false) => (
                AttemptStatus::Partial,
                Verdict::Failed,
                Some(reason.clone()),
            ),
        };
        let (usage, usage_kind) = self.billed_usage(&end, reported, content);
        if usage_kind == UsageKind::Unknown {
            let labels = [("provider", self.target.provider.as_str())];
            counter_add(Metric::UnknownOutcomesTotal, &labels, 1);
        }
        if matches!(end, End::Cut) {
            let labels = [
                ("provider", self.target.provider.as_str()),
                ("reason", "cut_at_hold"),
            ];
            counter_add(Metric::StreamInterruptionsTotal, &labels, 1);
        }
        let cost = if usage_kind == UsageKind::Unknown {
            self.held_amount()
                .max(pricing::charge(&self.target.charge, &usage))
        } else {
            pricing::charge(&self.target.charge, &usage)
        };
        self.permit.finish(verdict);
        let mut row = AttemptRow::new(
            self.target.provider.as_str(),
            &self.target.model,
            self.attempt,
            elapsed_ms(self.started),
        );
        row.event_id = self.event_id;
        row.status = status;
        row.upstream_status = Some(200);
        row.usage = usage;
        row.usage_kind = usage_kind;
        row.cost = Some(pricing::charge(&self.target.price, &usage));
        row.ttft_ms = Some(self.ttft_ms);
        row.error = error;
        let latency_ms = row.latency_ms;
        let held = record::Holds {
            first: self.reservation,
            steps: self.steps,
        };
        let settled = record::settle_holds(&self.gw, &self.ctx, &self.route, held, cost, row).await;
        let provider = self.target.provider.as_str();
        record::meter(&self.gw, &self.ctx, provider, &usage, settled.charged);
        if status != self.success_status {
            let labels = [
                ("provider", self.target.provider.as_str()),
                ("reason", status.as_str()),
            ];
            counter_add(Metric::StreamInterruptionsTotal, &labels, 1);
        }
        // The request's final status: a stream broken after its headers is not `ok`.
        let outcome = match status {
            AttemptStatus::Partial => STREAM_INTERRUPTED,
            AttemptStatus::ClientCancelled => AttemptStatus::ClientCancelled.as_str(),
            _ => "ok",
        };
        counter_add(
            Metric::RequestsTotal,
            &[("route", self.route.as_str()), ("status", outcome)],
            1,
        );
        let trace_id = self.ctx.trace_id.clone().unwrap_or_default();
        tracing::info!(request_id = %self.ctx.request_id, trace_id, tenant = %self.ctx.tenant.id, route = %self.route, provider = %self.target.provider, status = status.as_str(), cost = %cost, latency_ms, "Stream ended.");
    }
}

#[cfg(test)]
mod tests {
    use super::{Relay, word_boundary};
    use crate::tokenize::Estimator;

    /// The size of what an async fn of four arguments returns, without calling it.
    fn future_size<A, B, C, D, F>(_: fn(A, B, C, D) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every stream in flight holds its relay's task for its whole life: the
    /// settle and the hold's growth, each once at most, are boxed rather than
    /// sizing every stream's task by theirs (it took 17 KiB with them inline).
    #[test]
    fn a_relays_task_stays_small() {
        let size = future_size(Relay::run);
        assert!(size <= 6 * 1024, "the relay's future takes {size} bytes");
    }

    #[test]
    fn a_text_split_at_its_last_word_boundary_counts_as_the_whole() {
        assert_eq!(word_boundary("one two"), Some(3));
        assert_eq!(word_boundary("one  two"), None);
        assert_eq!(word_boundary("one\ntwo "), None);
        assert_eq!(word_boundary(" lead"), None);
        let estimator = Estimator::new(crate::tokenize::Counting {
            encoding: crate::tokenize::Encoding::O200kBase,
            safety_percent: 0,
            image_tokens: crate::tokenize::WORST_IMAGE_TOKENS,
        });
        let text = "The quick brown fox, it said; jumped over 12,345 lazy dogs!\n\
                    Then it wrote fn main() { println!(\"hi\"); } and   left. Done?";
        let mut rest = text;
        let mut pieces = 0;
        while let Some(split) = word_boundary(rest) {
            pieces += estimator.count_text(&rest[split..]);
            rest = &rest[..split];
        }
        pieces += estimator.count_text(rest);
        assert_eq!(pieces, estimator.count_text(text));
    }
}
