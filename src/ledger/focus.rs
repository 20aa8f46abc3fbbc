//! A day of the ledger as a FOCUS-style CSV (the FinOps cost and usage
//! specification's columns), for a data warehouse: one line per ledger row
//! stamped in the day of the billing time zone, so the file's `BilledCost`
//! sums to the ledger's charge for that day to the nano-unit and can be
//! joined back to the rows by `x_EventId`. Read in pages by id, so a day of
//! millions of rows is never held in memory.

use std::collections::BTreeMap;
use std::io::Write;

use jiff::Timestamp;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect,
};
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
    write_window(db, calendar, currency, &window, out)
        .await
        .map(Some)
}

/// Writes the day `window` of `calendar` to `out`.
async fn write_window<C: ConnectionTrait>(
    db: &C,
    calendar: &Calendar,
    currency: &str,
    window: &Window,
    out: &mut impl Write,
) -> Result<FocusDay, StorageError> {
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
            return Ok(summary);
        };
        after = last.id;
        for row in &page {
            let line = Line {
                row,
                currency,
                day: window,
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

/// What one tenant's lines of an export add up to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub rows: u64,
    pub billed: Nanos,
}

/// The files of every day of the month `window` of `calendar`, read back
/// as a warehouse reads them: each line's `BilledCost` summed by
/// `SubAccountId` (the tenant). A line that does not read is an error.
pub async fn month_totals<C: ConnectionTrait>(
    db: &C,
    calendar: &Calendar,
    currency: &str,
    window: &Window,
) -> Result<BTreeMap<String, Tally>, StorageError> {
    let mut reader = Reader::default();
    let mut at = window.start_ms;
    while at < window.end_ms {
        let day = calendar.window(Period::Day, at);
        reader.header = true;
        write_window(db, calendar, currency, &day, &mut reader).await?;
        if let Some(bad) = reader.unreadable.take() {
            return Err(StorageError::Query(sea_orm::DbErr::Custom(format!(
                "the export of {} has a line that does not read: {bad}",
                day.key
            ))));
        }
        at = day.end_ms;
    }
    Ok(reader.tenants)
}

/// Reads lines of the file as they are written, keeping only the sums.
#[derive(Default)]
struct Reader {
    partial: Vec<u8>,
    /// The next line is a file's header.
    header: bool,
    tenants: BTreeMap<String, Tally>,
    unreadable: Option<String>,
}

/// Where `BilledCost` and `SubAccountId` are among `COLUMNS`.
const BILLED: usize = 0;
const SUB_ACCOUNT: usize = 20;

impl Reader {
    fn line(&mut self, line: &str) {
        if std::mem::take(&mut self.header) {
            return;
        }
        let fields = csv_fields(line);
        let billed = fields.get(BILLED).map(|f| Nanos::parse_decimal(f));
        match (billed, fields.get(SUB_ACCOUNT)) {
            (Some(Ok(billed)), Some(tenant)) if fields.len() == COLUMNS.len() => {
                let tally = self.tenants.entry(tenant.clone()).or_default();
                tally.rows += 1;
                tally.billed = tally.billed.saturating_add(billed);
            }
            _ => {
                self.unreadable.get_or_insert_with(|| line.to_owned());
            }
        }
    }
}

impl Write for Reader {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.partial.extend_from_slice(bytes);
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            self.line(String::from_utf8_lossy(&line[..end]).as_ref());
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The fields of one CSV line (quoted fields may hold commas and doubled
/// quotes; no field this file writes holds a line break).
fn csv_fields(line: &str) -> Vec<String> {
    let (mut fields, mut field, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (false, '"') => quoted = true,
            (false, ',') => fields.push(std::mem::take(&mut field)),
            (_, c) => field.push(c),
        }
    }
    fields.push(field);
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_read_back_with_its_quoted_fields_whole() {
        assert_eq!(
            csv_fields("1.5,\"a, \"\"b\"\"\",,c"),
            vec!["1.5", "a, \"b\"", "", "c"]
        );
        assert_eq!(COLUMNS[BILLED], "BilledCost");
        assert_eq!(COLUMNS[SUB_ACCOUNT], "SubAccountId");
    }
}
