//! Embeddings answers of the fake upstream (`/v1/embeddings`): one small,
//! deterministic vector per input, as floats or, when the caller asks for
//! `encoding_format: "base64"` (the OpenAI SDKs do by default), as the
//! base64 of its little-endian f32s; usage from the scenario or estimated
//! from the input. A text containing `vec:[0.6,0.8,0]` is embedded as that
//! vector, so tests choose how similar two questions are; any other text as
//! a vector drawn from its hash (the same text, the same vector; two texts,
//! two unrelated directions). Vectors have `dimensions` components if the
//! request asks, else the model string's `dims-N` segment, else 8.

use serde_json::{Value, json};

use super::scenario::UsageMode;

const DEFAULT_DIMENSIONS: usize = 8;
const MAX_DIMENSIONS: usize = 4_096;
const BYTES_PER_TOKEN: u64 = 4;

/// The answer body for a successful embeddings request.
pub(crate) fn body(request: &Value, model: &str, usage: UsageMode) -> Value {
    let inputs = count_inputs(request.get("input"));
    let from_model = model
        .split('+')
        .find_map(|segment| segment.strip_prefix("dims-")?.parse::<u64>().ok());
    let dimensions = request
        .get("dimensions")
        .and_then(Value::as_u64)
        .or(from_model)
        .and_then(|d| usize::try_from(d).ok())
        .map_or(DEFAULT_DIMENSIONS, |d| d.clamp(1, MAX_DIMENSIONS));
    let base64 = request.get("encoding_format").and_then(Value::as_str) == Some("base64");
    let texts = texts(request.get("input"));
    let data: Vec<Value> = (0..inputs)
        .map(|index| {
            let text = texts.get(index).filter(|text| !text.is_empty());
            let vector = match text {
                Some(text) => chosen_vector(text).unwrap_or_else(|| hashed(text, dimensions)),
                None => vector(index, dimensions),
            };
            let embedding = if base64 {
                Value::String(encode_base64(&vector))
            } else {
                json!(vector)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    let mut body = json!({"object": "list", "data": data, "model": model});
    if let Some(prompt) = prompt_tokens(usage, request) {
        body["usage"] = json!({"prompt_tokens": prompt, "total_tokens": prompt});
    }
    body
}

/// How many vectors the input asks for: one per text or token array.
fn count_inputs(input: Option<&Value>) -> usize {
    match input {
        Some(Value::Array(items)) if items.iter().all(Value::is_u64) => 1,
        Some(Value::Array(items)) => items.len(),
        _ => 1,
    }
}

fn texts(input: Option<&Value>) -> Vec<&str> {
    match input {
        Some(Value::String(text)) => vec![text.as_str()],
        Some(Value::Array(items)) => items.iter().map(|i| i.as_str().unwrap_or("")).collect(),
        _ => Vec::new(),
    }
}

/// The vector a text names with `vec:[…]`, if it names one.
fn chosen_vector(text: &str) -> Option<Vec<f32>> {
    let start = text.find("vec:[")? + "vec:[".len();
    let end = start + text[start..].find(']')?;
    text[start..end]
        .split(',')
        .map(|x| x.trim().parse::<f32>().ok())
        .collect()
}

fn prompt_tokens(usage: UsageMode, request: &Value) -> Option<u64> {
    match usage {
        UsageMode::Omitted => None,
        UsageMode::OpenAi { prompt, .. } | UsageMode::DeepSeek { prompt, .. } => Some(prompt),
        UsageMode::Estimate | UsageMode::MaxTokens => {
            Some(estimate(request.get("input").unwrap_or(&Value::Null)))
        }
    }
}

/// A crude count (4 bytes a token, a token id each) the gateway must not rely on.
fn estimate(input: &Value) -> u64 {
    match input {
        Value::String(text) => u64::try_from(text.len())
            .unwrap_or(u64::MAX)
            .div_ceil(BYTES_PER_TOKEN),
        Value::Array(items) => items.iter().map(estimate).sum(),
        Value::Number(_) => 1,
        _ => 0,
    }
}

#[expect(
    clippy::float_arithmetic,
    clippy::cast_precision_loss,
    reason = "a fake vector: small, deterministic floats"
)]
fn vector(index: usize, dimensions: usize) -> Vec<f32> {
    (0..dimensions)
        .map(|k| ((index + 1) * (k + 3) % 97) as f32 / 97.0)
        .collect()
}

/// Components in [-1, 1) from a hash of the text, one xorshift step each.
#[expect(
    clippy::float_arithmetic,
    clippy::cast_precision_loss,
    reason = "a fake vector: 24 random bits scaled to a float"
)]
fn hashed(text: &str, dimensions: usize) -> Vec<f32> {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    let mut state = hasher.finish() | 1;
    (0..dimensions)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn encode_base64(vector: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet_with_padding() {
        assert_eq!(encode_base64(&[]), "");
        // 1.0f32 is 00 00 80 3f.
        assert_eq!(encode_base64(&[1.0]), "AACAPw==");
    }

    #[test]
    fn one_vector_per_input_with_the_usage_of_the_scenario() {
        let request = json!({"input": ["ab", "cdef"], "dimensions": 3});
        let body = body(&request, "m", UsageMode::Estimate);
        assert_eq!(body["data"].as_array().unwrap().len(), 2);
        assert_eq!(body["data"][1]["embedding"].as_array().unwrap().len(), 3);
        assert_eq!(body["usage"]["prompt_tokens"], 2);
        let ids = json!({"input": [1, 2, 3], "encoding_format": "base64"});
        let body = super::body(&ids, "m", UsageMode::Omitted);
        assert_eq!(body["data"].as_array().unwrap().len(), 1);
        assert!(body["data"][0]["embedding"].is_string());
        assert!(body.get("usage").is_none());
    }

    #[test]
    fn a_text_may_choose_its_vector() {
        let request = json!({"input": "what is up? vec:[0.6, 0.8,0]"});
        let body = body(&request, "m", UsageMode::Estimate);
        assert_eq!(
            body["data"][0]["embedding"],
            json!([0.6f32, 0.8f32, 0.0f32])
        );
        assert_eq!(chosen_vector("vec:[1,x]"), None);
        let texts = json!({"input": ["same", "same", "other"]});
        let body = super::body(&texts, "embed+dims-16", UsageMode::Estimate);
        assert_eq!(body["data"][0]["embedding"], body["data"][1]["embedding"]);
        assert_ne!(body["data"][0]["embedding"], body["data"][2]["embedding"]);
        assert_eq!(body["data"][2]["embedding"].as_array().unwrap().len(), 16);
        assert_eq!(chosen_vector("no vector"), None);
    }
}
