//! Tenant, key and spend operations shared by the admin API and the CLI.
//! They validate input against the configuration and write the database;
//! callers that serve traffic also refresh their in-memory view.

pub mod bill;
pub mod breakage;
pub mod costs;
pub mod credits;
pub mod daily_push;
pub mod end_users;
pub mod invoice;
pub mod keys;
pub mod month_check;
pub mod periods;
pub mod reconcile;
pub mod report;
pub mod reprice;
pub mod route_access;
pub mod spend;
pub mod tenants;

use crate::error::{ApiError, ErrorCode};
use crate::storage::StorageError;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

pub(crate) fn invalid(field: &str, message: impl Into<String>) -> AdminError {
    AdminError::Invalid {
        field: field.to_owned(),
        message: message.into(),
    }
}

impl From<AdminError> for ApiError {
    fn from(error: AdminError) -> ApiError {
        match error {
            AdminError::Invalid { field, message } => {
                ApiError::invalid_request(field.clone(), format!("{field}: {message}"))
            }
            AdminError::NotFound(message) => ApiError::new(ErrorCode::NotFound, message),
            AdminError::Conflict(message) => ApiError::new(ErrorCode::Conflict, message),
            AdminError::Storage(error) => ApiError::internal(error.to_string()),
        }
    }
}
