//! The Anthropic fake's prompt cache, in small. A `cache_control`
//! breakpoint caches the prompt up to and including its block, in the order
//! the real API reads a prompt (tools, then system, then messages). A later
//! request whose prompt begins the same reads the longest cached prefix and
//! writes the rest up to its last breakpoint; the tokens after that are
//! plain input. Tokens are the fake's own (4 bytes of text each), and
//! nothing expires: a test sees its second call read what its first wrote.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, PoisonError};

use serde_json::Value;

use super::reply::text_bytes;

const BYTES_PER_TOKEN: u64 = 4;

#[derive(Debug, Default)]
pub struct PromptCache {
    prefixes: Mutex<HashSet<u64>>,
}

impl PromptCache {
    /// `[uncached, cache_creation, cache_read]` of a prompt of `total` input
    /// tokens; a prompt without breakpoints is all uncached.
    pub fn split(&self, request: &Value, total: u64) -> [u64; 3] {
        let points = breakpoints(request);
        let Some(&(_, end)) = points.last() else {
            return [total, 0, 0];
        };
        let mut cached = self.prefixes.lock().unwrap_or_else(PoisonError::into_inner);
        let read = points
            .iter()
            .rev()
            .find(|(hash, _)| cached.contains(hash))
            .map_or(0, |&(_, tokens)| tokens);
        cached.extend(points.iter().map(|&(hash, _)| hash));
        let read = read.min(total);
        let end = end.min(total).max(read);
        [total - end, end - read, read]
    }
}

/// Each breakpoint's prefix: its hash and its tokens.
fn breakpoints(request: &Value) -> Vec<(u64, u64)> {
    let mut walk = Walk::default();
    for tool in request
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        walk.block(tool);
    }
    match request.get("system") {
        Some(Value::Array(blocks)) => blocks.iter().for_each(|b| walk.block(b)),
        Some(text @ Value::String(_)) => walk.plain(text),
        _ => {}
    }
    let messages = request.get("messages").and_then(Value::as_array);
    for message in messages.into_iter().flatten() {
        walk.plain(message.get("role").unwrap_or(&Value::Null));
        match message.get("content") {
            Some(Value::Array(blocks)) => blocks.iter().for_each(|b| walk.block(b)),
            Some(text) => walk.plain(text),
            None => {}
        }
    }
    walk.points
}

#[derive(Default)]
struct Walk {
    hasher: DefaultHasher,
    bytes: u64,
    points: Vec<(u64, u64)>,
}

impl Walk {
    fn plain(&mut self, value: &Value) {
        value.to_string().hash(&mut self.hasher);
        self.bytes += u64::try_from(text_bytes(value)).unwrap_or(u64::MAX);
    }

    /// A block is the same prefix whatever its own breakpoint says.
    fn block(&mut self, block: &Value) {
        let marked = block.get("cache_control").is_some_and(|c| !c.is_null());
        let mut unmarked = block.clone();
        if let Value::Object(fields) = &mut unmarked {
            fields.remove("cache_control");
        }
        self.plain(&unmarked);
        if marked {
            let tokens = self.bytes.div_ceil(BYTES_PER_TOKEN);
            self.points.push((self.hasher.finish(), tokens));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(system: &str, question: &str) -> Value {
        json!({
            "system": [
                {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "Caller's own."}
            ],
            "messages": [{"role": "user", "content": question}]
        })
    }

    #[test]
    fn the_first_call_writes_the_prefix_and_the_next_reads_it() {
        let cache = PromptCache::default();
        let system = "s".repeat(400);
        // 400 bytes before the breakpoint: 100 tokens.
        assert_eq!(cache.split(&request(&system, "one"), 120), [20, 100, 0]);
        assert_eq!(cache.split(&request(&system, "two"), 120), [20, 0, 100]);
        let other = "t".repeat(400);
        assert_eq!(cache.split(&request(&other, "one"), 120), [20, 100, 0]);
        let plain = json!({"messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(cache.split(&plain, 10), [10, 0, 0]);
    }

    #[test]
    fn a_longer_prefix_reads_the_shorter_and_writes_the_rest() {
        let cache = PromptCache::default();
        let first = "a".repeat(400);
        let second = "b".repeat(800);
        let one = json!({"system": [
            {"type": "text", "text": first, "cache_control": {"type": "ephemeral"}}
        ], "messages": []});
        assert_eq!(cache.split(&one, 100), [0, 100, 0]);
        let two = json!({"system": [
            {"type": "text", "text": first, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": second, "cache_control": {"type": "ephemeral"}}
        ], "messages": []});
        assert_eq!(cache.split(&two, 310), [10, 200, 100]);
    }
}
