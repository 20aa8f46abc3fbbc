//! The daily report's push: once the day reaches `reports.daily_at` in the
//! billing time zone, yesterday's report goes to `reports.daily_webhook_url`,
//! as JSON with a text rendering for a chat channel. Exactly one replica sends
//! it: the first to claim the day's row in `report_deliveries`; it retries
//! with backoff and records how the delivery ended.

use std::sync::Arc;
use std::time::Duration;

use sea_orm::sea_query::OnConflict;
use sea_orm::{ActiveValue::Set, DatabaseConnection, EntityTrait};

use super::report;
use crate::config::parse_time_of_day;
use crate::state::Gateway;

/// How often a replica looks at the clock.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Starts the push when `reports.daily_webhook_url` is set.
pub fn spawn(gateway: Arc<Gateway>) -> Option<actix_rt::task::JoinHandle<()>> {
    let url = gateway.config.reports.daily_webhook_url.clone()?;
    let at_minute = parse_time_of_day(&gateway.config.reports.daily_at)?;
    Some(actix_rt::spawn(async move {
        let mut pushed: Option<String> = None;
        loop {
            actix_rt::time::sleep(CHECK_INTERVAL).await;
            let now = gateway.clock.now_ms();
            let calendar = &gateway.config.calendar;
            let date = calendar.yesterday(now);
            if calendar.minute_of_day(now) < at_minute
                || pushed.as_deref() == Some(date.day_key().as_str())
            {
                continue;
            }
            match push_once(&gateway, &url, date, now).await {
                Ok(()) => pushed = Some(date.day_key()),
                Err(error) => {
                    tracing::warn!(date = %date.day_key(), error = %error, "Cannot push the daily report yet; trying again.");
                }
            }
        }
    }))
}

/// Claims `date` and, if this replica got it, delivers its report.
async fn push_once(
    gw: &Gateway,
    url: &str,
    date: crate::period::Date,
    now_ms: u64,
) -> Result<(), String> {
    let db = gw.directory.db();
    let day = date.day_key();
    if !claim(db, &day, &gw.replica_id, now_ms).await? {
        return Ok(());
    }
    let config = &gw.config;
    let report = report::daily(db, &config.billing.currency, &config.calendar, date)
        .await
        .map_err(|e| e.to_string())?;
    let body = serde_json::json!({"text": report::text(&report), "report": report});
    let timeout = Duration::from_millis(config.reports.timeout_ms);
    let client = awc::Client::builder().timeout(timeout).finish();
    let attempts = config.reports.attempts.max(1);
    for attempt in 1..=attempts {
        match client.post(url).send_json(&body).await {
            Ok(response) if response.status().is_success() => {
                tracing::info!(date = %day, attempt, "Daily report delivered.");
                return finish(db, &day, "delivered", attempt, gw.clock.now_ms()).await;
            }
            Ok(response) => {
                let status = response.status().as_u16();
                tracing::warn!(date = %day, status, attempt, "The daily report's webhook refused it.");
            }
            Err(error) => {
                tracing::warn!(date = %day, error = %error, attempt, "The daily report's webhook failed.");
            }
        }
        if attempt < attempts {
            actix_rt::time::sleep(Duration::from_millis(200 << attempt.min(6))).await;
        }
    }
    tracing::error!(date = %day, attempts, "The daily report was not delivered after every attempt.");
    finish(db, &day, "failed", attempts, gw.clock.now_ms()).await
}

/// Whether this replica is the one to send `day`'s report.
async fn claim(
    db: &DatabaseConnection,
    day: &str,
    replica: &str,
    now_ms: u64,
) -> Result<bool, String> {
    let row = entity::report_delivery::ActiveModel {
        date: Set(day.to_owned()),
        replica: Set(replica.to_owned()),
        status: Set("sending".to_owned()),
        attempts: Set(0),
        updated_at_ms: Set(i64::try_from(now_ms).unwrap_or(i64::MAX)),
    };
    let inserted = entity::report_delivery::Entity::insert(row)
        .on_conflict(
            OnConflict::column(entity::report_delivery::Column::Date)
                .do_nothing()
                .to_owned(),
        )
        .exec_without_returning(db)
        .await
        .map_err(|e| e.to_string())?;
    Ok(inserted == 1)
}

async fn finish(
    db: &DatabaseConnection,
    day: &str,
    status: &str,
    attempts: u32,
    now_ms: u64,
) -> Result<(), String> {
    let row = entity::report_delivery::ActiveModel {
        date: Set(day.to_owned()),
        status: Set(status.to_owned()),
        attempts: Set(i32::try_from(attempts).unwrap_or(i32::MAX)),
        updated_at_ms: Set(i64::try_from(now_ms).unwrap_or(i64::MAX)),
        ..Default::default()
    };
    entity::report_delivery::Entity::update(row)
        .exec(db)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}
