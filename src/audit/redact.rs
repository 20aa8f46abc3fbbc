//! Keys out of audited bodies: a secret-named JSON field's value, and any
//! text shaped like a key (Tollgate's own, common providers'), or a bearer
//! token, become `[redacted]`.

use serde_json::Value;

pub const REDACTED: &str = "[redacted]";

/// Prefixes of keys callers paste into prompts: Tollgate's, OpenAI's and
/// Anthropic's (`sk-`), Stripe-style (`sk_`), AWS access keys, Google's, xAI's.
const KEY_PREFIXES: [&str; 6] = ["tg_", "sk-", "sk_", "AKIA", "AIza", "xai-"];

/// Characters after a prefix before a run counts as a key: short ones are words.
const MIN_SECRET_CHARS: usize = 16;

/// Field names whose values are secrets, whatever they look like.
const SECRET_FIELDS: [&str; 10] = [
    "api_key",
    "apikey",
    "api-key",
    "x-api-key",
    "authorization",
    "password",
    "secret",
    "client_secret",
    "access_token",
    "refresh_token",
];

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Whether a run of token characters is a key: a known prefix and enough after it.
fn is_key(run: &str) -> bool {
    KEY_PREFIXES.iter().any(|prefix| {
        run.strip_prefix(prefix)
            .is_some_and(|rest| rest.len() >= MIN_SECRET_CHARS)
    })
}

/// `text` with every key-shaped run, and every bearer token, redacted.
pub fn redact_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut after_bearer = false;
    while let Some(start) = rest.find(is_token_char) {
        let (before, from) = rest.split_at(start);
        let end = from.find(|c| !is_token_char(c)).unwrap_or(from.len());
        let (run, after) = from.split_at(end);
        out.push_str(before);
        let bearer_token = after_bearer && before == " " && run.len() >= MIN_SECRET_CHARS;
        if is_key(run) || bearer_token {
            out.push_str(REDACTED);
        } else {
            out.push_str(run);
        }
        after_bearer = run.eq_ignore_ascii_case("bearer");
        rest = after;
    }
    out.push_str(rest);
    out
}

fn redact_value(value: &mut Value) {
    match value {
        Value::String(text) => *text = redact_text(text),
        Value::Array(items) => items.iter_mut().for_each(redact_value),
        Value::Object(fields) => {
            for (name, field) in fields.iter_mut() {
                if SECRET_FIELDS.iter().any(|s| name.eq_ignore_ascii_case(s)) {
                    *field = Value::String(REDACTED.to_owned());
                } else {
                    redact_value(field);
                }
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// A body as kept: JSON with its secret fields and key-shaped texts
/// redacted, anything else (a stream's events) as text, keys redacted.
pub fn redact_body(body: &[u8]) -> String {
    if let Ok(mut value) = serde_json::from_slice::<Value>(body) {
        redact_value(&mut value);
        return value.to_string();
    }
    redact_text(&String::from_utf8_lossy(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_bearer_tokens_are_redacted_and_words_are_not() {
        let text = "use sk-proj-abcdefghijklmnop1234 or tg_k1_ABCDEFGHIJKLMNOPQRST, \
                    Authorization: Bearer abcdefghijklmnopqrstuv; sk-short, task-force";
        assert_eq!(
            redact_text(text),
            "use [redacted] or [redacted], Authorization: Bearer [redacted]; sk-short, task-force"
        );
    }

    #[test]
    fn secret_fields_are_redacted_whatever_their_value() {
        let body =
            br#"{"api_key":"hunter2","messages":[{"content":"key AKIAABCDEFGHIJKLMNOP"}],"n":2}"#;
        assert_eq!(
            redact_body(body),
            r#"{"api_key":"[redacted]","messages":[{"content":"key [redacted]"}],"n":2}"#
        );
    }

    #[test]
    fn a_stream_is_redacted_as_text() {
        let stream = b"data: {\"delta\":\"sk-ant-api03-abcdefghijklmnop\"}\n\n";
        assert_eq!(redact_body(stream), "data: {\"delta\":\"[redacted]\"}\n\n");
    }
}
