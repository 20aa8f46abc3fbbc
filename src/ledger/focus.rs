//! A day of the ledger as a FOCUS-style CSV (the FinOps cost and usage
//! specification's columns), for a data warehouse: one line per ledger row
//! stamped in the day of the billing time zone, so the file's `BilledCost`
//! sums to the ledger's charge for that day to the nano-unit and can be
//! joined back to the rows by `x_EventId`. Read in pages by id, so a day of
//! millions of rows is never held in memory.

use std::io::Write;

use jiff::Timestamp;
use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use serde::Serialize;

use entity::usage;

use super::invoice::csv_field;
use crate::calendar::{Calendar, Period, Window};
use crate::money::Nanos;
use crate::storage::StorageError;

const PAGE_ROWS: u64 = 5_000;

/// The columns, in order: FOCUS's own, then the ledger's as `x_` columns.
pub const COLUMNS: [&str; 28] = [
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "BillingCurrency",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargeCategory",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ConsumedQuantity",
    "ConsumedUnit",
    "InvoiceIssuerName",
    "ProviderName",
    "PublisherName",
    "ServiceCategory",
    "ServiceName",
    "ResourceId",
    "ResourceType",
    "SubAccountId",
    "Tags",
    "x_EventId",
    "x_RequestId",
    "x_Status",
    "x_PromptTokens",
    "x_CachedTokens",
    "x_CompletionTokens",
];

/// What a day's file holds.
#[derive(Debug, Clone, Serialize)]
pub struct FocusDay {
    pub day: String,
    pub rows: u64,
    pub billed: Nanos,
}

/// Writes `day` (`YYYY-MM-DD` of `calendar`) to `out`; `None`: not a day.
pub async fn write_day(
    db: &DatabaseConnection,
    calendar: &Calendar,
    currency: &str,
    day: &str,
    out: &mut impl Write,
) -> Result<Option<FocusDay>, StorageError> {
    let Some(window) = calendar.day(day) else {
        return Ok(None);
    };
    let month = calendar.window(Period::Month, window.start_ms);
    let mut summary = FocusDay {
        day: window.key.clone(),
        rows: 0,
        billed: Nanos::ZERO,
    };
    let fail = |e: std::io::Error| StorageError::Query(sea_orm::DbErr::Custom(e.to_string()));
    writeln!(out, "{}", COLUMNS.join(",")).map_err(fail)?;
    let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let mut after = 0;
    loop {
        let page = usage::Entity::find()
            .filter(usage::Column::CreatedAtMs.gte(ms(window.start_ms)))
            .filter(usage::Column::CreatedAtMs.lt(ms(window.end_ms)))
            .filter(usage::Column::Id.gt(after))
            .order_by_asc(usage::Column::Id)
            .limit(PAGE_ROWS)
            .all(db)
            .await?;
        let Some(last) = page.last() else {
            return Ok(Some(summary));
        };
        after = last.id;
        for row in &page {
            let line = Line {
                row,
                currency,
                day: &window,
                month: &month,
            };
            writeln!(out, "{}", line.csv()).map_err(fail)?;
            summary.rows += 1;
            summary.billed = summary
                .billed
                .saturating_add(Nanos::from_db(row.charged_nanos));
        }
    }
}

/// One ledger row as one line of the file.
struct Line<'a> {
    row: &'a usage::Model,
    currency: &'a str,
    day: &'a Window,
    month: &'a Window,
}

impl Line<'_> {
    fn csv(&self) -> String {
        let row = self.row;
        let charged = Nanos::from_db(row.charged_nanos).to_string();
        let list = Nanos::from_db(row.cost_nanos.unwrap_or(row.charged_nanos)).to_string();
        let tokens = row.prompt_tokens.saturating_add(row.completion_tokens);
        let tags = serde_json::json!({
            "feature": row.feature,
            "route": row.route,
            "end_user": row.end_user,
            "api": row.api,
        });
        let fields = [
            charged.clone(),
            charged,
            list,
            self.currency.to_owned(),
            instant(self.month.start_ms),
            instant(self.month.end_ms),
            "Usage".to_owned(),
            format!("{} call on route {}", row.status, row.route),
            "Usage-Based".to_owned(),
            instant(self.day.start_ms),
            instant(self.day.end_ms),
            tokens.to_string(),
            "Tokens".to_owned(),
            "Tollgate".to_owned(),
            "Tollgate".to_owned(),
            row.provider.clone(),
            "AI and Machine Learning".to_owned(),
            row.model.clone(),
            row.key_id.clone(),
            "API Key".to_owned(),
            row.tenant_id.clone(),
            tags.to_string(),
            row.event_id.clone(),
            row.request_id.clone(),
            row.status.clone(),
            row.prompt_tokens.to_string(),
            row.cached_tokens.to_string(),
            row.completion_tokens.to_string(),
        ];
        let fields: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
        fields.join(",")
    }
}

/// An instant in RFC 3339, UTC.
fn instant(ms: u64) -> String {
    let ms = i64::try_from(ms).unwrap_or(i64::MAX);
    Timestamp::from_millisecond(ms)
        .unwrap_or(Timestamp::MAX)
        .to_string()
}
