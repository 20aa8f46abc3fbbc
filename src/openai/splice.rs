//! Rewriting a few top-level members of a JSON object in the caller's own
//! bytes: the upstream body differs from the caller's only in `model`, the
//! output limit and a few options, so everything else (the messages, the
//! tools) is copied as it came instead of being parsed into values and
//! written out again.

use std::ops::Range;

/// One top-level member: its key without the quotes, its value as written.
struct Member {
    key: Range<usize>,
    value: Range<usize>,
}

/// `object` with each `(key, value)` of `set` in place of that member's value
/// (every occurrence), or added at the end when absent. `value` is JSON text.
/// `None` when `object` is not one JSON object, or a key needs unescaping to
/// be compared (the caller then writes the body from parsed values).
pub fn set_members(object: &[u8], set: &[(&str, &str)]) -> Option<Vec<u8>> {
    let (members, close) = members(object)?;
    if members
        .iter()
        .any(|m| object[m.key.clone()].contains(&b'\\'))
    {
        return None;
    }
    let extra: usize = set.iter().map(|(k, v)| k.len() + v.len() + 4).sum();
    let mut out = Vec::with_capacity(object.len() + extra);
    let mut copied = 0;
    let mut found = vec![false; set.len()];
    for member in &members {
        let key = &object[member.key.clone()];
        if let Some(i) = set.iter().position(|(k, _)| k.as_bytes() == key) {
            out.extend_from_slice(&object[copied..member.value.start]);
            out.extend_from_slice(set[i].1.as_bytes());
            copied = member.value.end;
            found[i] = true;
        }
    }
    out.extend_from_slice(&object[copied..close]);
    let mut any = !members.is_empty();
    for ((key, value), found) in set.iter().zip(found) {
        if found {
            continue;
        }
        if any {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":");
        out.extend_from_slice(value.as_bytes());
        any = true;
    }
    out.extend_from_slice(&object[close..]);
    Some(out)
}

/// The top-level members of an object and the index of its closing brace.
fn members(bytes: &[u8]) -> Option<(Vec<Member>, usize)> {
    let mut at = skip_space(bytes, 0);
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    at += 1;
    let mut members = Vec::new();
    loop {
        at = skip_space(bytes, at);
        match bytes.get(at)? {
            b'}' if members.is_empty() => break,
            b'"' => {}
            _ => return None,
        }
        let key_end = string_end(bytes, at)?;
        let key = at + 1..key_end - 1;
        at = skip_space(bytes, key_end);
        if bytes.get(at) != Some(&b':') {
            return None;
        }
        let start = skip_space(bytes, at + 1);
        let end = value_end(bytes, start)?;
        members.push(Member {
            key,
            value: start..end,
        });
        at = skip_space(bytes, end);
        match bytes.get(at)? {
            b',' => at += 1,
            b'}' => break,
            _ => return None,
        }
    }
    let rest = skip_space(bytes, at + 1);
    (rest == bytes.len()).then_some((members, at))
}

fn skip_space(bytes: &[u8], mut at: usize) -> usize {
    while matches!(bytes.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// Just past the closing quote of the string whose opening quote is at `at`.
fn string_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        match bytes.get(i)? {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
}

/// Just past the value starting at `at`: a string, a nested object or array
/// (brackets counted outside strings), or a scalar.
fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' => string_end(bytes, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            loop {
                match bytes.get(i)? {
                    b'"' => {
                        i = string_end(bytes, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let mut i = at;
            while let Some(b) = bytes.get(i) {
                if matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                    break;
                }
                i += 1;
            }
            (i > at).then_some(i)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn set(object: &str, pairs: &[(&str, &str)]) -> Value {
        let out = set_members(object.as_bytes(), pairs).expect("an object");
        serde_json::from_slice(&out).expect("valid JSON out")
    }

    #[test]
    fn replaces_top_level_members_only_and_adds_missing_ones() {
        let body = r#" { "model" : "fast", "messages": [{"role":"user","content":"say \"model\": {x} [y] \\"}],
            "tools":[{"type":"function","function":{"name":"f","parameters":{"model":"keep"}}}], "temperature": 0.5 } "#;
        let out = set(
            body,
            &[("model", r#""gpt-4o-mini""#), ("max_tokens", "256")],
        );
        let mut expected: Value = serde_json::from_str(body).unwrap();
        expected["model"] = json!("gpt-4o-mini");
        expected["max_tokens"] = json!(256);
        assert_eq!(out, expected);
    }

    #[test]
    fn every_value_kind_is_skipped_whole() {
        let body = r#"{"a":null,"b":true,"c":-1.5e3,"d":"}","e":{"f":[1,{"g":"]"}]},"max_tokens":9,"h":[]}"#;
        let out = set(body, &[("max_tokens", "10")]);
        let mut expected: Value = serde_json::from_str(body).unwrap();
        expected["max_tokens"] = json!(10);
        assert_eq!(out, expected);
    }

    #[test]
    fn an_empty_object_gets_its_members() {
        assert_eq!(set("{}", &[("model", "\"m\"")]), json!({"model": "m"}));
        assert_eq!(
            set(" { } ", &[("a", "1"), ("b", "2")]),
            json!({"a": 1, "b": 2})
        );
    }

    #[test]
    fn anything_but_one_plain_object_is_left_to_the_parser() {
        for bad in [
            "[]",
            "{\"a\":1} x",
            "{\"a\" 1}",
            "{\"a\":1,}",
            "{\"a\":\"unterminated}",
            "{\"mod\\u0065l\":\"x\"}",
            "",
        ] {
            assert!(
                set_members(bad.as_bytes(), &[("model", "\"m\"")]).is_none(),
                "{bad}"
            );
        }
    }
}
