//! `GET /v1/models` in Anthropic's list shape, for clients that send
//! `anthropic-version` (Claude Code, the Anthropic SDKs).

use serde::Serialize;

/// Routes have no creation date; the Unix epoch stands in for one.
const CREATED_AT: &str = "1970-01-01T00:00:00Z";

#[derive(Debug, Serialize)]
pub struct ModelList {
    pub data: Vec<ModelEntry>,
    pub has_more: bool,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ModelEntry {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub id: String,
    pub display_name: String,
    pub created_at: &'static str,
}

impl ModelList {
    pub fn new(routes: impl IntoIterator<Item = String>) -> ModelList {
        let data: Vec<ModelEntry> = routes
            .into_iter()
            .map(|id| ModelEntry {
                kind: "model",
                display_name: id.clone(),
                id,
                created_at: CREATED_AT,
            })
            .collect();
        ModelList {
            first_id: data.first().map(|m| m.id.clone()),
            last_id: data.last().map(|m| m.id.clone()),
            has_more: false,
            data,
        }
    }
}
