//! `GET /v1/models` response.

use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelEntry>,
}

#[derive(Debug, Serialize)]
pub struct ModelEntry {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
}

impl ModelList {
    pub fn new(routes: impl IntoIterator<Item = String>) -> ModelList {
        ModelList {
            object: "list",
            data: routes
                .into_iter()
                .map(|id| ModelEntry {
                    id,
                    object: "model",
                    created: 0,
                    owned_by: "tollgate",
                })
                .collect(),
        }
    }
}
