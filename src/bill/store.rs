//! Imported bill lines in the database: an import replaces every bucket its
//! files hold (for that provider and report), so the same file imported
//! twice leaves the same lines, and a corrected export replaces the old one.

use std::collections::{BTreeMap, BTreeSet};

use sea_orm::{
    ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder, TransactionTrait,
};
use serde::Serialize;

use entity::bill_line;

use super::parse::{BillFile, Counts, LineKey, Report};
use crate::storage::StorageError;

/// Lines per INSERT: 14 columns each stays far below either backend's
/// limit on bound parameters.
const ROWS_PER_STATEMENT: usize = 256;

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Imported {
    pub provider: String,
    /// Per report: its buckets and lines.
    pub reports: Vec<ImportedReport>,
    /// Some page said more follow and no file of this import held them.
    pub incomplete: bool,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct ImportedReport {
    pub report: &'static str,
    pub buckets: usize,
    pub lines: usize,
    pub first_bucket_ms: u64,
    pub last_bucket_end_ms: u64,
}

/// Files' buckets and lines, merged per report (the pages of an export never
/// share a bucket; the caller refuses one given twice).
#[derive(Default)]
struct Merged {
    buckets: BTreeMap<u64, u64>,
    lines: BTreeMap<LineKey, Counts>,
}

pub async fn import(
    db: &DatabaseConnection,
    provider: &str,
    files: Vec<BillFile>,
    now_ms: u64,
) -> Result<Imported, StorageError> {
    // Every page but an export's last says `has_more`: without a last page
    // some of the export is missing.
    let incomplete = !files.is_empty() && files.iter().all(|f| f.has_more);
    let mut reports: BTreeMap<Report, Merged> = BTreeMap::new();
    for file in files {
        let Some(report) = file.report else { continue };
        let merged = reports.entry(report).or_default();
        merged.buckets.extend(file.buckets);
        for (key, counts) in file.lines {
            merged.lines.entry(key).or_default().add_counts(&counts);
        }
    }
    let txn = db.begin().await?;
    let mut summary = Vec::new();
    for (report, merged) in &reports {
        let starts: BTreeSet<i64> = merged.buckets.keys().map(|&s| to_db(s)).collect();
        for chunk in starts.iter().copied().collect::<Vec<_>>().chunks(500) {
            bill_line::Entity::delete_many()
                .filter(bill_line::Column::Provider.eq(provider))
                .filter(bill_line::Column::Report.eq(report.as_str()))
                .filter(bill_line::Column::StartMs.is_in(chunk.iter().copied()))
                .exec(&txn)
                .await?;
        }
        let rows: Vec<bill_line::ActiveModel> = merged
            .lines
            .iter()
            .map(|(key, counts)| row(provider, *report, &merged.buckets, key, counts, now_ms))
            .collect();
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            bill_line::Entity::insert_many(chunk.to_vec())
                .exec_without_returning(&txn)
                .await?;
        }
        summary.push(ImportedReport {
            report: report.as_str(),
            buckets: merged.buckets.len(),
            lines: merged.lines.len(),
            first_bucket_ms: merged.buckets.keys().next().copied().unwrap_or(0),
            last_bucket_end_ms: merged.buckets.values().max().copied().unwrap_or(0),
        });
    }
    txn.commit().await?;
    Ok(Imported {
        provider: provider.to_owned(),
        reports: summary,
        incomplete,
    })
}

fn to_db(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn row(
    provider: &str,
    report: Report,
    buckets: &BTreeMap<u64, u64>,
    (start, key_id, model, item): &LineKey,
    counts: &Counts,
    now_ms: u64,
) -> bill_line::ActiveModel {
    use sea_orm::ActiveValue::Set;
    bill_line::ActiveModel {
        provider: Set(provider.to_owned()),
        report: Set(report.as_str().to_owned()),
        start_ms: Set(to_db(*start)),
        end_ms: Set(to_db(buckets.get(start).copied().unwrap_or(*start))),
        key_id: Set(key_id.clone()),
        model: Set(model.clone()),
        item: Set(item.clone()),
        requests: Set(to_db(counts.requests)),
        input_tokens: Set(to_db(counts.input_tokens)),
        cached_tokens: Set(to_db(counts.cached_tokens)),
        cache_write_tokens: Set(to_db(counts.cache_write_tokens)),
        output_tokens: Set(to_db(counts.output_tokens)),
        amount_nanos: Set(counts.amount),
        imported_at_ms: Set(to_db(now_ms)),
    }
}

/// Lines of one provider (or all) whose bucket starts in `[from_ms, to_ms)`.
pub async fn lines(
    db: &DatabaseConnection,
    provider: Option<&str>,
    from_ms: u64,
    to_ms: u64,
) -> Result<Vec<bill_line::Model>, StorageError> {
    let mut query = bill_line::Entity::find()
        .filter(bill_line::Column::StartMs.gte(to_db(from_ms)))
        .filter(bill_line::Column::StartMs.lt(to_db(to_ms)));
    if let Some(provider) = provider {
        query = query.filter(bill_line::Column::Provider.eq(provider));
    }
    Ok(query
        .order_by_asc(bill_line::Column::StartMs)
        .all(db)
        .await?)
}
