//! Input-token estimates for reservations. The estimate must be an upper
//! bound in practice: tiktoken counts of every text the request carries, the
//! per-message overhead of the chat format, a fixed allowance per image, and
//! a safety factor for providers whose tokenizer differs. Counts of all but
//! the shortest texts are memoized per worker thread by content hash, because
//! agents resend the same system prompt and history on every call. The hash is
//! keyed per process and the key carries the text's length, so a caller cannot
//! make a long prompt borrow a short one's count.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::LazyLock;

use serde_json::{Map, Value};
use tiktoken_rs::CoreBPE;

mod bounded;
pub mod pdf;

/// Chat format overhead: role and separators per message (OpenAI's cookbook counts 3 plus
/// 1 for a name; 4 leaves room for providers whose template is wordier).
const TOKENS_PER_MESSAGE: u64 = 4;
/// The assistant reply is primed with a few tokens.
const REPLY_PRIMING_TOKENS: u64 = 3;
/// What an image is held at on a model without a figure of its own
/// (`image_tokens` in its price entry): the most any known model bills for
/// one image. A mini or nano vision model bills a high-detail 2048 px image
/// at about 25,500 tokens, so a smaller figure would let a body of image URLs
/// spend many times its hold.
pub const WORST_IMAGE_TOKENS: u64 = 25_500;
/// Texts shorter than this are cheaper to count than to hash and look up,
/// or to bound. In a bound (`bound_for`), longer texts that were not counted
/// before count as their bytes: a byte-level BPE never yields more tokens
/// than the text has bytes, so the bound is strict and free. Counting 8 KB of
/// distinct text costs more than the rest of the request, and even a short
/// distinct chat turn (50 bytes) took 5% of the gateway's CPU under load; the
/// exact count is paid only where the bound changes a decision
/// (`pipeline::chat`).
const MEMO_MIN_BYTES: usize = 16;
const MEMO_MAX_ENTRIES: usize = 4_096;

thread_local! {
    static MEMO: RefCell<HashMap<MemoKey, u64>> = RefCell::new(HashMap::new());
    /// Set when a bound counted a text by its bytes: the estimate is not exact.
    static BOUNDED: Cell<bool> = const { Cell::new(false) };
}

/// An input estimate, and whether every text in it was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    pub tokens: u64,
    /// `false`: some text counted as its bytes (an upper bound).
    pub exact: bool,
}

/// SipHash keys drawn once per process and shared by every thread (each
/// thread's memo would work with its own, but one is cheaper to reason about).
/// `DefaultHasher::new()` uses fixed keys, so a collision computed offline
/// would work against every deployment.
static MEMO_HASHER: LazyLock<RandomState> = LazyLock::new(RandomState::new);

/// What a memoized count is filed under. The length is part of the key so
/// even a 64-bit collision cannot hand a long text a short text's count: a
/// length mismatch is a miss. A same-length collision, which the random key
/// leaves no way to search for, could at worst lend another text's count of
/// the same size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct MemoKey {
    encoding: Encoding,
    len: usize,
    hash: u64,
}

fn memo_key(encoding: Encoding, text: &str) -> MemoKey {
    MemoKey {
        encoding,
        len: text.len(),
        hash: MEMO_HASHER.hash_one(text),
    }
}

/// A tiktoken encoding a model's prompts are counted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Encoding {
    O200kBase,
    Cl100kBase,
}

impl Encoding {
    pub const NAMES: &str = "o200k_base or cl100k_base";

    pub fn parse(name: &str) -> Option<Encoding> {
        match name {
            "o200k_base" => Some(Encoding::O200kBase),
            "cl100k_base" => Some(Encoding::Cl100kBase),
            _ => None,
        }
    }

    fn bpe(self) -> &'static CoreBPE {
        match self {
            Encoding::O200kBase => tiktoken_rs::o200k_base_singleton(),
            Encoding::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
        }
    }
}

/// How one target's prompts are counted: its model's encoding, and the
/// safety factor of its provider (whose own tokenizer may count more).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counting {
    pub encoding: Encoding,
    pub safety_percent: u32,
    /// What one image in the prompt is held at (the model's own bound).
    pub image_tokens: u64,
}

/// A request's input, shaped by the door it came in by: the door decides
/// how it is counted, never the keys its body happens to carry.
#[derive(Debug, Clone, Copy)]
pub enum Prompt<'a> {
    /// A chat body as the caller sent it.
    Chat(&'a Map<String, Value>),
    /// The chat translation of another door's body, and what the provider
    /// of that door's own API reads beyond it.
    Translated(&'a Map<String, Value>, &'a Untranslated),
    /// An embeddings body: its `input` alone.
    Embeddings(&'a Map<String, Value>),
}

/// A `Prompt` that owns its parts, to be counted on another thread.
#[derive(Debug, Clone)]
pub enum OwnedPrompt {
    Chat(Map<String, Value>),
    Translated(Map<String, Value>, Untranslated),
    Embeddings(Map<String, Value>),
}

impl OwnedPrompt {
    pub fn of(prompt: Prompt<'_>) -> OwnedPrompt {
        match prompt {
            Prompt::Chat(body) => OwnedPrompt::Chat(body.clone()),
            Prompt::Translated(body, beyond) => {
                OwnedPrompt::Translated(body.clone(), beyond.clone())
            }
            Prompt::Embeddings(body) => OwnedPrompt::Embeddings(body.clone()),
        }
    }

    pub fn as_prompt(&self) -> Prompt<'_> {
        match self {
            OwnedPrompt::Chat(body) => Prompt::Chat(body),
            OwnedPrompt::Translated(body, beyond) => Prompt::Translated(body, beyond),
            OwnedPrompt::Embeddings(body) => Prompt::Embeddings(body),
        }
    }
}

/// What a door's own body sends a provider of its API that the chat
/// translation leaves out (earlier turns' thinking, the system prompts of
/// provider-defined tools): counted in the hold, never sent to a chat upstream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Untranslated {
    pub texts: Vec<String>,
    /// Tokens known only as a figure (a provider-defined tool's own prompt).
    pub tokens: u64,
    /// Images the chat body carries only as text (in a tool's result), each
    /// held at the model's image figure.
    pub images: u64,
}

#[derive(Clone, Copy)]
pub struct Estimator {
    encoding: Encoding,
    safety_percent: u32,
    image_tokens: u64,
    /// Texts not counted before count as their bytes (`bound_for`).
    bound_new_texts: bool,
}

impl std::fmt::Debug for Estimator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Estimator")
            .field("safety_percent", &self.safety_percent)
            .finish_non_exhaustive()
    }
}

impl Estimator {
    pub fn new(counting: Counting) -> Estimator {
        Estimator {
            encoding: counting.encoding,
            safety_percent: counting.safety_percent,
            image_tokens: counting.image_tokens,
            bound_new_texts: false,
        }
    }

    /// The default counting (`[tokenizer]`), for targets that set nothing of their own.
    pub fn default_counting(&self) -> Counting {
        Counting {
            encoding: self.encoding,
            safety_percent: self.safety_percent,
            image_tokens: self.image_tokens,
        }
    }

    /// This estimator counting another way (one target's).
    #[must_use]
    pub fn with(self, counting: Counting) -> Estimator {
        Estimator {
            encoding: counting.encoding,
            safety_percent: counting.safety_percent,
            image_tokens: counting.image_tokens,
            bound_new_texts: self.bound_new_texts,
        }
    }

    /// Loads the encodings routes count with now, so the first request does
    /// not pay for it. Only those: each loaded encoding keeps tens of MiB.
    pub fn warm_up<'a>(&self, countings: impl IntoIterator<Item = &'a Counting>) {
        let mut loaded = Vec::new();
        for encoding in
            std::iter::once(self.encoding).chain(countings.into_iter().map(|c| c.encoding))
        {
            if !loaded.contains(&encoding) {
                let _ = encoding.bpe().count_ordinary("warm up");
                loaded.push(encoding);
            }
        }
    }

    /// Tokens in one text, exact for this encoding.
    pub fn count_text(&self, text: &str) -> u64 {
        let bpe = self.encoding.bpe();
        if text.len() < MEMO_MIN_BYTES {
            return bounded::count(bpe, text);
        }
        let key = memo_key(self.encoding, text);
        if let Some(count) = MEMO.with(|memo| memo.borrow().get(&key).copied()) {
            return count;
        }
        if self.bound_new_texts {
            BOUNDED.with(|bounded| bounded.set(true));
            return to_u64(text.len());
        }
        let count = bounded::count(bpe, text);
        MEMO.with(|memo| {
            let mut memo = memo.borrow_mut();
            if memo.len() >= MEMO_MAX_ENTRIES {
                memo.clear();
            }
            memo.insert(key, count);
        });
        count
    }

    /// `estimate_for` with texts not counted before bounded by their
    /// bytes: free, never below the exact estimate, and `exact` when no text
    /// needed the bound.
    pub fn bound_for(&self, countings: &[Counting], prompt: Prompt<'_>) -> Estimate {
        BOUNDED.with(|bounded| bounded.set(false));
        let bounding = Estimator {
            bound_new_texts: true,
            ..*self
        };
        let tokens = bounding.estimate_for(countings, prompt);
        Estimate {
            tokens,
            exact: !BOUNDED.with(Cell::get),
        }
    }

    /// The largest estimate over several countings (a route's targets), each
    /// encoding counted once.
    pub fn estimate_for(&self, countings: &[Counting], prompt: Prompt<'_>) -> u64 {
        let mut worst = 0;
        let mut counted: Vec<((Encoding, u64), u64)> = Vec::with_capacity(countings.len());
        for counting in countings {
            let way = (counting.encoding, counting.image_tokens);
            let known = counted.iter().find(|(w, _)| *w == way);
            let raw = if let Some((_, raw)) = known {
                *raw
            } else {
                let raw = self.with(*counting).raw_input(prompt);
                counted.push((way, raw));
                raw
            };
            worst = worst.max(with_safety(raw, counting.safety_percent));
        }
        if countings.is_empty() {
            return with_safety(self.raw_input(prompt), self.safety_percent);
        }
        worst
    }

    /// Tokens of system messages placed before a request's own (the
    /// gateway's prompts), the largest over the route's countings. Counted
    /// exactly: the texts are stable, so the memo pays for each once.
    pub fn placed_for(&self, countings: &[Counting], texts: &[&str]) -> u64 {
        let raw = |estimator: Estimator| -> u64 {
            texts
                .iter()
                .map(|text| TOKENS_PER_MESSAGE + estimator.count_text(text))
                .sum()
        };
        if countings.is_empty() {
            return with_safety(raw(*self), self.safety_percent);
        }
        countings
            .iter()
            .map(|c| with_safety(raw(self.with(*c)), c.safety_percent))
            .max()
            .unwrap_or(0)
    }

    /// Upper estimate of a chat request's input tokens (messages, tools, format overhead).
    pub fn estimate_chat_input(&self, body: &Map<String, Value>) -> u64 {
        with_safety(self.raw_chat_input(body), self.safety_percent)
    }

    fn raw_input(self, prompt: Prompt<'_>) -> u64 {
        match prompt {
            Prompt::Chat(body) => self.raw_chat_input(body),
            Prompt::Translated(body, beyond) => {
                let texts: u64 = beyond.texts.iter().map(|t| self.count_text(t)).sum();
                let images = beyond.images.saturating_mul(self.image_tokens);
                self.raw_chat_input(body) + texts + beyond.tokens + images
            }
            Prompt::Embeddings(body) => body
                .get("input")
                .map_or(0, |input| self.embeddings_input_tokens(input)),
        }
    }

    fn raw_chat_input(self, body: &Map<String, Value>) -> u64 {
        let mut tokens = REPLY_PRIMING_TOKENS;
        if let Some(Value::Array(messages)) = body.get("messages") {
            for message in messages {
                tokens += TOKENS_PER_MESSAGE + self.message_tokens(message);
            }
        }
        for field in ["tools", "functions", "response_format"] {
            if let Some(value) = body.get(field) {
                tokens += self.count_text(&value.to_string());
            }
        }
        tokens
    }

    /// An embeddings `input`: its texts counted, its token ids as given.
    fn embeddings_input_tokens(self, input: &Value) -> u64 {
        match input {
            Value::String(text) => self.count_text(text),
            Value::Number(_) => 1,
            Value::Array(items) => items
                .iter()
                .map(|item| self.embeddings_input_tokens(item))
                .sum(),
            other => self.count_text(&other.to_string()),
        }
    }

    /// Completion tokens of a text the upstream returned without usage.
    pub fn count_completion(&self, text: &str) -> u64 {
        self.count_text(text)
    }

    fn message_tokens(self, message: &Value) -> u64 {
        let Value::Object(message) = message else {
            return 0;
        };
        let mut tokens = 0;
        for (field, value) in message {
            tokens += match (field.as_str(), value) {
                ("content", content) => self.content_tokens(content),
                ("name", Value::String(name)) => 1 + self.count_text(name),
                ("role", _) | (_, Value::Null) => 0,
                (_, Value::String(text)) => self.count_text(text),
                // tool_calls, function_call and anything new: count their JSON text.
                (_, other) => self.count_text(&other.to_string()),
            };
        }
        tokens
    }

    fn content_tokens(self, content: &Value) -> u64 {
        match content {
            Value::String(text) => self.count_text(text),
            Value::Array(parts) => parts.iter().map(|part| self.part_tokens(part)).sum(),
            Value::Null => 0,
            other => self.count_text(&other.to_string()),
        }
    }

    fn part_tokens(self, part: &Value) -> u64 {
        let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
        match (kind, part.get("text")) {
            ("text", Some(Value::String(text))) => self.count_text(text),
            ("image_url" | "image" | "input_image", _) => self.image_tokens,
            // Billed by the page (its text and an image of it) beside what it says.
            ("document" | "file" | "input_file", _) => {
                let per_page = pdf::PAGE_TEXT_TOKENS.saturating_add(self.image_tokens);
                let pages = pdf::pages_of_part(part).unwrap_or(0);
                self.count_text(&part.to_string())
                    .saturating_add(pages.saturating_mul(per_page))
            }
            _ => self.count_text(&part.to_string()),
        }
    }
}

fn with_safety(tokens: u64, safety_percent: u32) -> u64 {
    (tokens * u64::from(safety_percent)).div_ceil(100)
}

fn to_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn estimator(safety_percent: u32) -> Estimator {
        Estimator::new(Counting {
            encoding: Encoding::O200kBase,
            safety_percent,
            image_tokens: WORST_IMAGE_TOKENS,
        })
    }

    fn body(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn counts_messages_with_overhead() {
        let e = estimator(100);
        let hello = e.count_text("Hello there");
        let request = body(json!({"messages": [
            {"role": "system", "content": "Hello there"},
            {"role": "user", "content": [{"type": "text", "text": "Hello there"}]}
        ]}));
        assert_eq!(e.estimate_chat_input(&request), 3 + 2 * (4 + hello));
    }

    #[test]
    fn embeddings_inputs_count_their_texts_and_their_token_ids() {
        let e = estimator(100);
        let hello = e.count_text("Hello there");
        let texts = body(json!({"model": "e", "input": ["Hello there", "Hello there"]}));
        assert_eq!(e.estimate_for(&[], Prompt::Embeddings(&texts)), 2 * hello);
        let ids = body(json!({"model": "e", "input": [[1, 2, 3], [4]]}));
        assert_eq!(e.estimate_for(&[], Prompt::Embeddings(&ids)), 4);
    }

    #[test]
    fn safety_factor_rounds_up() {
        let request = body(json!({"messages": [{"role": "user", "content": "x"}]}));
        let exact = estimator(100).estimate_chat_input(&request);
        assert_eq!(
            estimator(110).estimate_chat_input(&request),
            (exact * 110).div_ceil(100)
        );
    }

    #[test]
    fn a_bound_counts_new_texts_by_their_bytes_and_is_never_below_the_count() {
        let e = estimator(110);
        let long = "distinct words in a long prompt number 8 of them ".repeat(60);
        let request = body(json!({"messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": long}
        ]}));
        let bound = e.bound_for(&[], Prompt::Chat(&request));
        assert!(!bound.exact);
        let exact = e.estimate_chat_input(&request);
        assert!(bound.tokens > exact, "{} ≤ {exact}", bound.tokens);
        // Once counted (and memoized), the bound is the exact count.
        assert_eq!(
            e.bound_for(&[], Prompt::Chat(&request)),
            Estimate {
                tokens: exact,
                exact: true
            }
        );
        // A chat turn: bounded too, by its 52 bytes.
        let turn = body(json!({"messages": [
            {"role": "user", "content": "Say hello to request number 000000042, briefly."}
        ]}));
        let bound = e.bound_for(&[], Prompt::Chat(&turn));
        assert!(!bound.exact);
        assert!(bound.tokens > e.estimate_chat_input(&turn));
        // Texts under 16 bytes are cheaper to count than to bound and look up.
        let short = body(json!({"messages": [{"role": "user", "content": "Hello there"}]}));
        assert_eq!(
            e.bound_for(&[], Prompt::Chat(&short)),
            Estimate {
                tokens: e.estimate_chat_input(&short),
                exact: true
            }
        );
    }

    #[test]
    fn memoized_long_texts_count_the_same() {
        let e = estimator(100);
        let long = "The quick brown fox jumps over the lazy dog. ".repeat(40);
        let first = e.count_text(&long);
        assert_eq!(e.count_text(&long), first);
        assert!(first > 300);
    }

    #[test]
    fn memo_keys_are_keyed_per_process_not_with_fixed_keys() {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let text = "You are a helpful assistant. Answer briefly.";
        let mut fixed = DefaultHasher::new();
        text.hash(&mut fixed);
        let key = memo_key(Encoding::O200kBase, text);
        // A collision precomputed against the fixed keys is useless here
        // (equal by chance with probability 2^-64).
        assert_ne!(key.hash, fixed.finish());
        // One key for the whole process: every worker thread files a text alike.
        let other_thread = std::thread::spawn(move || memo_key(Encoding::O200kBase, text))
            .join()
            .unwrap();
        assert_eq!(other_thread, key);
    }

    #[test]
    fn a_colliding_hash_cannot_lend_a_short_texts_count_to_a_long_text() {
        let e = estimator(100);
        let short = "a short prompt of a few words";
        let long = "many more words than the short one has ".repeat(200);
        let short_count = e.count_text(short);
        let exact = to_u64(Encoding::O200kBase.bpe().count_ordinary(&long));
        // What a collision would leave in the memo: the short text's count
        // filed under the long text's hash.
        let collided = MemoKey {
            len: short.len(),
            ..memo_key(Encoding::O200kBase, &long)
        };
        MEMO.with(|memo| {
            let mut memo = memo.borrow_mut();
            memo.clear();
            memo.insert(collided, short_count);
        });
        assert_eq!(e.count_text(&long), exact);
        assert!(exact > short_count * 10);
    }

    #[test]
    fn a_route_is_estimated_with_its_worst_counting_each_encoding_once() {
        let e = estimator(100);
        let request =
            body(json!({"messages": [{"role": "user", "content": "Grüße, 世界! ".repeat(30)}]}));
        let o200k = e.estimate_chat_input(&request);
        let cl100k = e
            .with(Counting {
                encoding: Encoding::Cl100kBase,
                safety_percent: 100,
                image_tokens: WORST_IMAGE_TOKENS,
            })
            .estimate_chat_input(&request);
        assert_ne!(o200k, cl100k, "the encodings count this text differently");
        let countings = [
            Counting {
                encoding: Encoding::O200kBase,
                safety_percent: 100,
                image_tokens: WORST_IMAGE_TOKENS,
            },
            Counting {
                encoding: Encoding::Cl100kBase,
                safety_percent: 100,
                image_tokens: WORST_IMAGE_TOKENS,
            },
            Counting {
                encoding: Encoding::O200kBase,
                safety_percent: 150,
                image_tokens: WORST_IMAGE_TOKENS,
            },
        ];
        assert_eq!(
            e.estimate_for(&countings, Prompt::Chat(&request)),
            o200k.max(cl100k).max((o200k * 150).div_ceil(100))
        );
    }

    #[test]
    fn images_and_tools_are_counted() {
        let e = estimator(100);
        let plain = body(json!({"messages": [{"role": "user", "content": "look"}]}));
        let with_image = body(json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
        ]}], "tools": [{"type": "function", "function": {"name": "get_weather"}}]}));
        assert!(
            e.estimate_chat_input(&with_image) > e.estimate_chat_input(&plain) + WORST_IMAGE_TOKENS
        );
    }

    /// A model with its own image figure is held at it; one without, at the
    /// worst known (a mini model's high-detail image, about 25,500 tokens).
    #[test]
    fn images_are_held_at_the_models_own_bound_or_the_worst_known() {
        let e = estimator(100);
        let images = body(json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "high"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/b.png"}}
        ]}]}));
        let unknown = e.estimate_for(&[], Prompt::Chat(&images));
        assert!(unknown >= 2 * 25_500, "{unknown}");
        let own = Counting {
            image_tokens: 1_105,
            ..e.default_counting()
        };
        let small = e.estimate_for(&[own], Prompt::Chat(&images));
        assert!((2 * 1_105..2 * 1_105 + 20).contains(&small), "{small}");
        // A route is held at its worst target's figure.
        let both = e.estimate_for(&[own, e.default_counting()], Prompt::Chat(&images));
        assert_eq!(both, unknown);
    }

    /// The door decides how a body is counted: an embeddings body is its
    /// `input`, whatever chat fields it also carries, and a chat body never
    /// becomes an embeddings count by leaving `messages` out.
    #[test]
    fn the_door_not_the_body_picks_the_count() {
        let e = estimator(100);
        let long = "words of a long input that costs many tokens ".repeat(100);
        let embeddings = body(json!({"model": "e", "input": long, "messages": null}));
        let counted = e.estimate_for(&[], Prompt::Embeddings(&embeddings));
        assert!(counted >= e.count_text(&long), "{counted}");
        let chat = body(json!({"model": "m", "input": long}));
        assert_eq!(e.estimate_for(&[], Prompt::Chat(&chat)), 3);
    }
}
