//! Closing months, for the admin API and the CLI: `ledger/periods.rs` does
//! it; this names its refusals as the API answers them.

use sea_orm::DatabaseConnection;
use serde::Serialize;

use super::{AdminError, invalid};
use crate::calendar::Calendar;
use crate::ledger::periods::{self, CloseError, Closing};

/// A closed month as the admin API shows it.
#[derive(Debug, Serialize)]
pub struct ClosedMonth {
    pub month: String,
    pub watermark: i64,
    pub closed_at_ms: i64,
    pub closed_by: Option<String>,
}

/// Closes `month` (`YYYY-MM` of the billing time zone) and every earlier month still open.
pub async fn close(
    db: &DatabaseConnection,
    calendar: &Calendar,
    month: &str,
    now_ms: u64,
    by: Option<&str>,
) -> Result<Closing, AdminError> {
    periods::close(db, calendar, month, now_ms, by)
        .await
        .map_err(|error| match error {
            CloseError::NotAMonth(_) | CloseError::NotEnded(_) => {
                invalid("month", error.to_string())
            }
            CloseError::Closed(_) => AdminError::Conflict(error.to_string()),
            CloseError::Storage(error) => AdminError::Storage(error),
        })
}

/// The closed months, oldest first; the last is what months are closed through.
pub async fn list(db: &DatabaseConnection) -> Result<Vec<ClosedMonth>, AdminError> {
    Ok(periods::closes(db)
        .await?
        .into_iter()
        .map(|close| ClosedMonth {
            month: close.month,
            watermark: close.watermark,
            closed_at_ms: close.closed_at_ms,
            closed_by: close.closed_by,
        })
        .collect())
}
