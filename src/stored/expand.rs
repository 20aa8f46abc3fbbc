//! A Responses body with the stored state it names put in its place.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::{Keep, ResponseStore};
use crate::error::ApiError;

/// The body to translate, hold and send, and what to keep of its answer.
#[derive(Debug)]
pub struct Expanded {
    /// No `previous_response_id`, no `item_reference`: the items themselves.
    pub body: Bytes,
    /// `body` parsed: the door translates it without reading it again.
    pub request: Map<String, Value>,
    /// Set unless the caller sent `store: false`.
    pub keep: Option<Keep>,
}

impl ResponseStore {
    /// Puts the earlier turns a body names (`previous_response_id`: that
    /// response's whole input and its output) before its own input, and each
    /// `item_reference` in its input in place of the reference; one that
    /// names nothing of this tenant's is the caller's 400.
    pub async fn expand(
        &self,
        tenant: &str,
        body: Bytes,
        now_ms: u64,
    ) -> Result<Expanded, ApiError> {
        let mut request = crate::openai::chat::object(&body)?;
        let store = request.get("store") != Some(&Value::Bool(false));
        let previous = previous_id(&mut request)?;
        let references = references(request.get("input"));
        let keep = |input| {
            store.then(|| Keep {
                tenant: tenant.to_owned(),
                input,
                now_ms,
            })
        };
        if previous.is_none() && references.is_empty() {
            let keep = if store {
                keep(own_input(&request))
            } else {
                None
            };
            return Ok(Expanded {
                body,
                request,
                keep,
            });
        }
        let mut input = match &previous {
            Some(id) => self.history(tenant, id, now_ms).await?,
            None => Vec::new(),
        };
        input.extend(
            self.resolved(tenant, own_input(&request), &references)
                .await?,
        );
        request.insert("input".to_owned(), Value::Array(input.clone()));
        let body = Bytes::from(serde_json::to_vec(&request).unwrap_or_default());
        Ok(Expanded {
            body,
            request,
            keep: keep(input),
        })
    }

    /// Everything an earlier response was answered on, then what it answered.
    async fn history(&self, tenant: &str, id: &str, now_ms: u64) -> Result<Vec<Value>, ApiError> {
        let Some((mut input, response)) = self.load(tenant, id, now_ms).await? else {
            return Err(ApiError::invalid_request(
                "previous_response_id",
                format!("Previous response with id '{id}' not found."),
            ));
        };
        input.extend(response["output"].as_array().into_iter().flatten().cloned());
        Ok(input)
    }

    /// `input` with each reference (at the positions given) replaced by its item.
    async fn resolved(
        &self,
        tenant: &str,
        mut input: Vec<Value>,
        references: &[(usize, String)],
    ) -> Result<Vec<Value>, ApiError> {
        if references.is_empty() {
            return Ok(input);
        }
        let ids: Vec<String> = references.iter().map(|(_, id)| id.clone()).collect();
        let items = self.items(tenant, &ids).await?;
        for ((at, id), item) in references.iter().zip(items) {
            let Some(item) = item else {
                return Err(ApiError::invalid_request(
                    format!("input[{at}]"),
                    format!("Item with id '{id}' not found."),
                ));
            };
            input[*at] = item;
        }
        Ok(input)
    }
}

/// Takes `previous_response_id` out of the body; it must be a string.
fn previous_id(request: &mut Map<String, Value>) -> Result<Option<String>, ApiError> {
    match request.remove("previous_response_id") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id)) if !id.is_empty() => Ok(Some(id)),
        Some(_) => Err(ApiError::invalid_request(
            "previous_response_id",
            "`previous_response_id` must be a response id",
        )),
    }
}

/// The body's input as items (a string is one user message).
fn own_input(request: &Map<String, Value>) -> Vec<Value> {
    match request.get("input") {
        Some(Value::String(text)) => {
            vec![json!({"type": "message", "role": "user", "content": text})]
        }
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    }
}

/// The positions and ids of the input's references to stored items.
fn references(input: Option<&Value>) -> Vec<(usize, String)> {
    input
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, item)| item["type"] == "item_reference")
        .filter_map(|(at, item)| Some((at, item["id"].as_str()?.to_owned())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_found_where_they_are_and_a_string_input_is_one_message() {
        let input = json!([
            {"type": "message", "role": "user", "content": "hi"},
            {"type": "item_reference", "id": "msg_1"},
            {"type": "item_reference"},
        ]);
        assert_eq!(references(Some(&input)), [(1, "msg_1".to_owned())]);
        let mut body = Map::new();
        body.insert("input".to_owned(), json!("hello"));
        assert_eq!(own_input(&body)[0]["role"], "user");
        body.insert("previous_response_id".to_owned(), json!(3));
        assert!(previous_id(&mut body).is_err());
    }
}
