//! A provider's usage or cost export, as its API returns it, read into bill
//! lines. Four shapes, told apart by their own fields:
//!
//! - OpenAI's `/v1/organization/usage/completions`: a `page` of `bucket`s
//!   (`start_time`, `end_time` in Unix seconds) whose `results` are
//!   `organization.usage.completions.result`s (tokens, requests, grouped by
//!   `api_key_id`, `model`, `project_id` …);
//! - OpenAI's `/v1/organization/costs`: the same page of buckets whose results
//!   are `organization.costs.result`s (`amount {value, currency}`, `line_item`,
//!   `project_id`, `api_key_id`); a line item `gpt-4o-2024-08-06, input` names
//!   its model before the comma;
//! - Anthropic's `/v1/organizations/usage_report/messages`: `data` of buckets
//!   (`starting_at`, `ending_at`, RFC 3339) whose `results` count
//!   `uncached_input_tokens`, `cache_read_input_tokens`, `cache_creation`,
//!   `output_tokens`, grouped by `api_key_id`, `model`, `workspace_id` …;
//! - Anthropic's `/v1/organizations/cost_report`: the same buckets whose
//!   results carry `amount`, a decimal string in cents, with `currency`,
//!   `model`, `description`, `cost_type`, `token_type` ….
//!
//! A problem is named by where it is (`data[2].results[0].amount.value`).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::period::parse_instant;

/// Which export a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Report {
    OpenaiUsage,
    OpenaiCosts,
    AnthropicUsage,
    AnthropicCosts,
}

impl Report {
    pub fn as_str(self) -> &'static str {
        match self {
            Report::OpenaiUsage => "openai_usage",
            Report::OpenaiCosts => "openai_costs",
            Report::AnthropicUsage => "anthropic_usage",
            Report::AnthropicCosts => "anthropic_costs",
        }
    }

    pub fn is_cost(self) -> bool {
        matches!(self, Report::OpenaiCosts | Report::AnthropicCosts)
    }
}

/// One bucket's usage or cost for one grouping.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub requests: u64,
    /// All input tokens, cached and cache-write included (as the ledger counts them).
    pub input_tokens: u64,
    pub cached_tokens: u64,
    pub cache_write_tokens: u64,
    pub output_tokens: u64,
    /// Nano-units of the billing currency; `None` on usage lines.
    pub amount: Option<i64>,
}

impl Counts {
    pub(super) fn add_counts(&mut self, other: &Counts) {
        self.requests += other.requests;
        self.input_tokens += other.input_tokens;
        self.cached_tokens += other.cached_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.output_tokens += other.output_tokens;
        self.amount = match (self.amount, other.amount) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
        };
    }
}

/// A line's key within its report: bucket start, API key id, model, the rest.
pub type LineKey = (u64, String, String, String);

/// What one file holds.
#[derive(Debug, Default)]
pub struct BillFile {
    /// `None` for a file of empty buckets, which tells no report apart.
    pub report: Option<Report>,
    /// Every bucket (start, end) in the file, lines or not: importing it
    /// replaces what an earlier import held for these buckets.
    pub buckets: Vec<(u64, u64)>,
    /// Lines with the same key (a grouping the export has and the ledger does
    /// not, e.g. `user_id`) are summed.
    pub lines: BTreeMap<LineKey, Counts>,
    /// The currency its amounts were in (lowercased), if any.
    pub currency: Option<String>,
    /// The page says more follow (`has_more`): import those files too.
    pub has_more: bool,
}

#[derive(Deserialize)]
struct Page<'a> {
    #[serde(borrow)]
    data: Option<Vec<&'a RawValue>>,
    has_more: Option<bool>,
}

#[derive(Deserialize)]
struct Bucket<'a> {
    start_time: Option<Value>,
    end_time: Option<Value>,
    starting_at: Option<Value>,
    ending_at: Option<Value>,
    #[serde(borrow)]
    results: Option<Vec<&'a RawValue>>,
}

/// Reads one exported page. The error names the place and what is wrong.
pub fn parse(text: &str) -> Result<BillFile, String> {
    let page: Page<'_> = serde_json::from_str(text)
        .map_err(|e| format!("not a usage or cost export (a JSON object with `data`): {e}"))?;
    let data = page
        .data
        .ok_or("no `data`: a usage or cost export is an object whose `data` lists time buckets")?;
    let mut file = BillFile {
        has_more: page.has_more.unwrap_or(false),
        ..BillFile::default()
    };
    for (i, raw) in data.iter().enumerate() {
        let at = format!("data[{i}]");
        let bucket: Bucket<'_> =
            serde_json::from_str(raw.get()).map_err(|e| format!("{at}: not a time bucket: {e}"))?;
        let (start, end) = bucket_span(&bucket).map_err(|e| format!("{at}.{e}"))?;
        file.buckets.push((start, end));
        let results = bucket
            .results
            .ok_or_else(|| format!("{at}.results: missing (a bucket lists its results)"))?;
        for (j, result) in results.iter().enumerate() {
            let at = format!("{at}.results[{j}]");
            read_result(&mut file, start, result.get()).map_err(|e| format!("{at}{e}"))?;
        }
    }
    Ok(file)
}

/// The bucket's span in Unix ms: OpenAI's seconds or Anthropic's RFC 3339.
fn bucket_span(bucket: &Bucket<'_>) -> Result<(u64, u64), String> {
    let seconds = |name: &str, value: &Option<Value>| -> Result<u64, String> {
        let value = value.as_ref().ok_or(format!("{name}: missing"))?;
        value
            .as_u64()
            .and_then(|s| s.checked_mul(1000))
            .ok_or(format!("{name}: `{value}` is not a time in Unix seconds"))
    };
    let instant = |name: &str, value: &Option<Value>| -> Result<u64, String> {
        let value = value.as_ref().ok_or(format!("{name}: missing"))?;
        value
            .as_str()
            .and_then(parse_instant)
            .ok_or(format!("{name}: `{value}` is not an RFC 3339 time"))
    };
    let (start, end) = if bucket.start_time.is_some() {
        (
            seconds("start_time", &bucket.start_time)?,
            seconds("end_time", &bucket.end_time)?,
        )
    } else if bucket.starting_at.is_some() {
        (
            instant("starting_at", &bucket.starting_at)?,
            instant("ending_at", &bucket.ending_at)?,
        )
    } else {
        return Err(
            "start_time: missing (neither OpenAI's `start_time` nor Anthropic's `starting_at`)"
                .to_owned(),
        );
    };
    if end <= start {
        return Err(format!(
            "end_time: the bucket ends ({end} ms) before it starts ({start} ms)"
        ));
    }
    Ok((start, end))
}

/// Adds one result to the file's lines. Errors begin with the field's path
/// relative to the result (`.amount.value: …`, or `: …` for the whole).
fn read_result(file: &mut BillFile, start: u64, raw: &str) -> Result<(), String> {
    let value: Value =
        serde_json::from_str(raw).map_err(|e| format!(": not a JSON object: {e}"))?;
    let result = value.as_object().ok_or(": not a JSON object")?;
    let report = report_of(result)?;
    if let Some(seen) = file.report.filter(|seen| *seen != report) {
        return Err(format!(
            ": a {} line in a {} export: import each report from its own file",
            report.as_str(),
            seen.as_str()
        ));
    }
    file.report = Some(report);
    let fields = Fields(result);
    let (counts, currency) = match report {
        Report::OpenaiUsage => (super::shapes::openai_usage(&fields)?, None),
        Report::OpenaiCosts => super::shapes::openai_cost(raw)?,
        Report::AnthropicUsage => (super::shapes::anthropic_usage(&fields)?, None),
        Report::AnthropicCosts => super::shapes::anthropic_cost(&fields)?,
    };
    if let Some(currency) = currency {
        match &file.currency {
            Some(seen) if *seen != currency => {
                return Err(format!(
                    ".currency: `{currency}` beside `{seen}`: a file's amounts must share one currency"
                ));
            }
            _ => file.currency = Some(currency),
        }
    }
    let key = super::shapes::line_key(report, &fields, start);
    file.lines.entry(key).or_default().add_counts(&counts);
    Ok(())
}

fn report_of(result: &serde_json::Map<String, Value>) -> Result<Report, String> {
    match result.get("object").and_then(Value::as_str) {
        Some("organization.usage.completions.result") => return Ok(Report::OpenaiUsage),
        Some("organization.costs.result") => return Ok(Report::OpenaiCosts),
        Some(other) => {
            return Err(format!(
                ".object: `{other}` is neither completions usage nor costs \
                 (organization.usage.completions.result, organization.costs.result)"
            ));
        }
        None => {}
    }
    if result.contains_key("amount") {
        Ok(Report::AnthropicCosts)
    } else if result.contains_key("uncached_input_tokens") {
        Ok(Report::AnthropicUsage)
    } else {
        Err(": neither a usage line (`object`, or `uncached_input_tokens`) nor a cost line (`amount`)".to_owned())
    }
}

/// A result's fields, read with their names in errors.
pub(super) struct Fields<'a>(pub &'a serde_json::Map<String, Value>);

impl Fields<'_> {
    /// A token or request count; absent or null is 0 unless `required`.
    pub fn count(&self, path: &str, required: bool) -> Result<u64, String> {
        let mut value = Some(self.0.get(path.split('.').next().unwrap_or(path)));
        for part in path.split('.').skip(1) {
            value = value.map(|v| v.and_then(|v| v.get(part)));
        }
        match value.flatten() {
            None | Some(Value::Null) if !required => Ok(0),
            None | Some(Value::Null) => Err(format!(".{path}: missing")),
            Some(v) => v
                .as_u64()
                .ok_or(format!(".{path}: `{v}` is not a whole number of tokens")),
        }
    }

    /// A grouping's value as text (`""` when absent or null).
    pub fn text(&self, name: &str) -> String {
        match self.0.get(name) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        }
    }

    /// The groupings named, those present, as `name=value` joined by `,`.
    pub fn item(&self, names: &[&str]) -> String {
        names
            .iter()
            .filter_map(|name| {
                let text = self.text(name);
                (!text.is_empty()).then(|| format!("{name}={text}"))
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}
