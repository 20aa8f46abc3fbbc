//! The arguments of the `RESERVE` script, by name: the script reads each
//! field of this one JSON object as `A.<field>` (`scripts.rs`), so no
//! argument's position is written on either side. Money, counts and times
//! are decimal strings, which Lua hands to `HINCRBY` exactly; `-1` is no
//! limit.

use serde::Serialize;

use crate::calendar::Period;

#[derive(Debug, Serialize)]
pub struct ReserveArgs<'a> {
    pub now: String,
    /// The tenant's day and month keys in the billing time zone.
    pub day: String,
    pub month: String,
    pub expires_at: String,
    pub amount: String,
    /// Alert mode: a reservation past a budget is held anyway, and flagged.
    pub alert: bool,
    pub tenant_budget: String,
    pub key: &'a str,
    pub key_budget: String,
    pub feature: &'a str,
    pub feature_budget: String,
    /// Tokens held against the token limits.
    pub tokens: String,
    pub tpm: String,
    pub daily: String,
    pub monthly: String,
    /// The reservation's meta, kept with it for the row of a hold that lapses.
    pub meta: &'a str,
    /// How long the tenant's hashes live.
    pub ttl: String,
    pub id: String,
    /// The local day key (an end user's tokens that day).
    pub local_day: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_user: Option<EndUserArgs>,
    pub tenant_credits: bool,
    pub key_credits: bool,
    /// The periods of the tenant's, the key's and the feature's budgets.
    pub periods: [Period; 3],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionArgs>,
}

/// The end user's part (their hashes are the script's keys 10 and 11).
#[derive(Debug, Serialize)]
pub struct EndUserArgs {
    /// `hex id:window:period:local day`, kept in the held record.
    pub field: String,
    pub budget: String,
    pub rpm: String,
    pub ttl: String,
    pub daily_tokens: String,
    pub tpm: String,
}

/// The agent run's part.
#[derive(Debug, Serialize)]
pub struct SessionArgs {
    /// The run's hash.
    pub key: String,
    pub budget: String,
    pub ttl: String,
}

impl ReserveArgs<'_> {
    /// The script's one argument.
    pub fn json(&self) -> String {
        // Strings, booleans and periods only: serializing cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}
