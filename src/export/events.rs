//! What each kind of sink is sent for an outbox row, and how. The payload
//! is made of the row alone (copied from the ledger when it was written),
//! so a row sent again, by any replica, after any restart, is sent byte for
//! byte the same, under the same idempotency key.

use serde_json::{Value, json};

use entity::export_outbox;

use crate::config::{Sink, SinkKind, StripeValue};
use crate::money::Nanos;

/// The event's idempotency key: the sink's name and the ledger row's id, so
/// it never changes for a row and never repeats across rows or sinks.
pub fn idempotency_key(sink: &str, row: &export_outbox::Model) -> String {
    format!("tollgate-{sink}-{}", row.usage_id)
}

/// RFC 3339 with milliseconds, UTC.
fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).map_or_else(|_| String::new(), |t| t.to_string())
}

/// A CloudEvents 1.0 event in the shape OpenMeter ingests. `subject` (what
/// a meter groups by as the customer) is the end user when the call named
/// one, else the tenant; both are in `data` either way.
pub fn cloud_event(
    sink: &str,
    source: &str,
    event_type: &str,
    row: &export_outbox::Model,
) -> Value {
    let subject = row.end_user.as_deref().unwrap_or(&row.tenant_id);
    json!({
        "specversion": "1.0",
        "id": idempotency_key(sink, row),
        "source": source,
        "type": event_type,
        "subject": subject,
        "time": rfc3339(row.created_at_ms),
        "datacontenttype": "application/json",
        "data": {
            "tenant": row.tenant_id,
            "key": row.key_id,
            "feature": row.feature,
            "end_user": row.end_user,
            "model": row.model,
            "provider": row.provider,
            "prompt_tokens": row.prompt_tokens,
            "cached_tokens": row.cached_tokens,
            "cache_write_tokens": row.cache_write_tokens,
            "completion_tokens": row.completion_tokens,
            "web_searches": row.web_searches,
            "charge_nanos": row.charged_nanos,
            "charge": Nanos::from_db(row.charged_nanos).to_string(),
            "usage_id": row.usage_id,
            "event_id": row.event_id,
        },
    })
}

/// A Stripe meter event's form fields; `None` when the tenant has no customer.
pub fn stripe_form(
    sink: &str,
    event_name: &str,
    value: StripeValue,
    customer: &str,
    row: &export_outbox::Model,
) -> Vec<(&'static str, String)> {
    let value = match value {
        StripeValue::ChargeNanos => row.charged_nanos,
        StripeValue::Tokens => row.prompt_tokens.saturating_add(row.completion_tokens),
    };
    vec![
        ("event_name", event_name.to_owned()),
        ("payload[stripe_customer_id]", customer.to_owned()),
        ("payload[value]", value.to_string()),
        ("identifier", idempotency_key(sink, row)),
        ("timestamp", (row.created_at_ms / 1_000).to_string()),
    ]
}

/// How many rows go in one request: a CloudEvents batch, or one Stripe event.
pub fn rows_per_request(sink: &Sink) -> usize {
    match sink.kind {
        SinkKind::CloudEvents { .. } => usize::try_from(sink.batch_rows).unwrap_or(1),
        SinkKind::Stripe { .. } => 1,
    }
}

/// Sends `rows` (one request); `Ok` once the receiver answered 2xx.
pub async fn send(
    client: &awc::Client,
    sink: &Sink,
    rows: &[export_outbox::Model],
) -> Result<(), String> {
    let mut request = client.post(&sink.url);
    if let Some(token) = &sink.token {
        request = request.bearer_auth(token.expose());
    }
    let sent = match &sink.kind {
        SinkKind::CloudEvents { source, event_type } => {
            let batch: Vec<Value> = rows
                .iter()
                .map(|row| cloud_event(&sink.name, source, event_type, row))
                .collect();
            let body = serde_json::to_vec(&batch).map_err(|e| e.to_string())?;
            request
                .content_type("application/cloudevents-batch+json")
                .send_body(body)
                .await
        }
        SinkKind::Stripe {
            event_name,
            value,
            customers,
        } => {
            let [row] = rows else {
                return Err("a Stripe meter event is sent alone".to_owned());
            };
            let Some(customer) = customers.get(&row.tenant_id) else {
                return Err(format!("tenant `{}` has no Stripe customer", row.tenant_id));
            };
            let form = stripe_form(&sink.name, event_name, *value, customer, row);
            request
                .insert_header(("Idempotency-Key", idempotency_key(&sink.name, row)))
                .send_form(&form)
                .await
        }
    };
    match sent {
        Ok(response) if response.status().is_success() => Ok(()),
        Ok(response) => Err(format!("answered {}", response.status().as_u16())),
        Err(error) => Err(error.to_string()),
    }
}
