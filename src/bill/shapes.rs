//! Each export's result read into counts, and the grouping a line is kept by.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::parse::{Counts, Fields, LineKey, Report};

/// OpenAI's completions usage: `input_tokens` already counts cached and
/// cache-write tokens.
pub(super) fn openai_usage(f: &Fields<'_>) -> Result<Counts, String> {
    Ok(Counts {
        requests: f.count("num_model_requests", true)?,
        input_tokens: f.count("input_tokens", true)?,
        cached_tokens: f.count("input_cached_tokens", false)?,
        cache_write_tokens: f.count("input_cache_write_tokens", false)?,
        output_tokens: f.count("output_tokens", true)?,
        amount: None,
    })
}

#[derive(Deserialize)]
struct OpenaiCost<'a> {
    #[serde(borrow)]
    amount: Option<OpenaiAmount<'a>>,
}

#[derive(Deserialize)]
struct OpenaiAmount<'a> {
    #[serde(borrow)]
    value: Option<&'a RawValue>,
    currency: Option<String>,
}

/// OpenAI's cost: `amount.value` is a JSON number, read from its own text
/// (the result's raw JSON) so no float rounds it.
pub(super) fn openai_cost(raw: &str) -> Result<(Counts, Option<String>), String> {
    let cost: OpenaiCost<'_> =
        serde_json::from_str(raw).map_err(|e| format!(".amount: not an amount object: {e}"))?;
    let amount = cost.amount.ok_or(".amount: missing")?;
    let value = amount.value.ok_or(".amount.value: missing")?.get();
    if value.starts_with('"') {
        return Err(format!(".amount.value: {value} is a string, not a number"));
    }
    let nanos =
        super::amount::decimal_nanos(value, 0).map_err(|e| format!(".amount.value: {e}"))?;
    let currency = amount.currency.ok_or(".amount.currency: missing")?;
    Ok((
        Counts {
            amount: Some(nanos),
            ..Counts::default()
        },
        Some(currency.to_ascii_lowercase()),
    ))
}

/// Anthropic's usage: input is uncached + cache reads + cache writes (both TTLs).
pub(super) fn anthropic_usage(f: &Fields<'_>) -> Result<Counts, String> {
    let uncached = f.count("uncached_input_tokens", true)?;
    let cached = f.count("cache_read_input_tokens", false)?;
    let written = f
        .count("cache_creation.ephemeral_5m_input_tokens", false)?
        .saturating_add(f.count("cache_creation.ephemeral_1h_input_tokens", false)?);
    Ok(Counts {
        requests: 0,
        input_tokens: uncached.saturating_add(cached).saturating_add(written),
        cached_tokens: cached,
        cache_write_tokens: written,
        output_tokens: f.count("output_tokens", true)?,
        amount: None,
    })
}

/// Anthropic's cost: `amount` is a decimal string in the currency's lowest
/// unit (cents).
pub(super) fn anthropic_cost(f: &Fields<'_>) -> Result<(Counts, Option<String>), String> {
    let text = match f.0.get("amount") {
        Some(serde_json::Value::String(text)) => text.clone(),
        Some(other) => {
            return Err(format!(
                ".amount: `{other}` is not a decimal string of cents"
            ));
        }
        None => return Err(".amount: missing".to_owned()),
    };
    let nanos = super::amount::decimal_nanos(&text, -2).map_err(|e| format!(".amount: {e}"))?;
    let currency = f.text("currency");
    if currency.is_empty() {
        return Err(".currency: missing".to_owned());
    }
    Ok((
        Counts {
            amount: Some(nanos),
            ..Counts::default()
        },
        Some(currency.to_ascii_lowercase()),
    ))
}

/// The groupings each report keeps beyond key and model.
fn item_fields(report: Report) -> &'static [&'static str] {
    match report {
        Report::OpenaiUsage => &["project_id", "user_id", "batch", "service_tier"],
        Report::OpenaiCosts => &["line_item", "project_id"],
        Report::AnthropicUsage => &[
            "workspace_id",
            "service_tier",
            "context_window",
            "inference_geo",
        ],
        Report::AnthropicCosts => &[
            "workspace_id",
            "description",
            "cost_type",
            "token_type",
            "service_tier",
            "context_window",
            "inference_geo",
        ],
    }
}

pub(super) fn line_key(report: Report, f: &Fields<'_>, start: u64) -> LineKey {
    let model = match report {
        // `gpt-4o-2024-08-06, input`: the model before the comma.
        Report::OpenaiCosts => f
            .text("line_item")
            .split_once(", ")
            .map(|(model, _)| model.to_owned())
            .unwrap_or_default(),
        _ => f.text("model"),
    };
    (
        start,
        f.text("api_key_id"),
        model,
        f.item(item_fields(report)),
    )
}
