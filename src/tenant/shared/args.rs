//! The arguments and the reply of the `RESERVE` script, by name: the script
//! reads each field of one JSON object as `A.<field>` and answers one JSON
//! object named by its `kind` (`scripts.rs`), so no position is written on
//! either side. Money, counts and times are decimal strings, which Lua hands
//! to `HINCRBY` exactly; `-1` is no limit.

use serde::{Deserialize, Serialize};

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

/// What `RESERVE` answered.
#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ReserveReply {
    /// The tenant's month is not started from the ledger yet.
    Seed,
    /// Nor this budget period's window.
    SeedW { period: Period },
    /// Nor the end user's window.
    SeedEu,
    /// Nor the balances.
    SeedCredit,
    /// The end user's request bucket is short: what it holds.
    EuRate { units: String },
    /// The end user's tokens today.
    EuTokens { used: String },
    /// The end user's tokens-per-minute bucket.
    EuTpm { units: String },
    /// The tightest budget and what it has left.
    Budget { scope: String, remaining: String },
    /// A token limit (`monthly`, `daily`, `tpm`) and its count.
    Tokens { limit: String, value: String },
    /// Held.
    Ok {
        over: bool,
        committed: String,
        reserved: String,
        /// The tokens-per-minute bucket after it (-1: no limit).
        units: String,
        /// The tenant's credit balance (-1: not on credits).
        balance: String,
    },
}

impl ReserveReply {
    pub fn parse(json: &str) -> Option<ReserveReply> {
        serde_json::from_str(json).ok()
    }
}

/// A decimal the script wrote.
pub fn decimal(text: &str) -> Option<i64> {
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_read_by_its_kind_and_names() {
        let ok = r#"{"kind":"ok","over":false,"committed":"12","reserved":"3","units":"-1","balance":"-1"}"#;
        assert_eq!(
            ReserveReply::parse(ok),
            Some(ReserveReply::Ok {
                over: false,
                committed: "12".into(),
                reserved: "3".into(),
                units: "-1".into(),
                balance: "-1".into(),
            })
        );
        let window = r#"{"kind":"seed_w","period":"week"}"#;
        assert_eq!(
            ReserveReply::parse(window),
            Some(ReserveReply::SeedW {
                period: Period::Week
            })
        );
        assert_eq!(ReserveReply::parse(r#"{"kind":"nonsense"}"#), None);
    }
}
