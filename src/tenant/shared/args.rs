//! The arguments and replies of the scripts, by name: a script reads each
//! field of one JSON object as `A.<field>` and the ones that answer more than
//! a word answer one JSON object named by its `kind` (`scripts.rs`), so no
//! position is written on either side. Money, counts and times are decimal
//! strings, which Lua hands to `HINCRBY` exactly; `-1` is no limit.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::calendar::Period;

#[derive(Debug, Serialize)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "each is one flag of the script's JSON, read by its name"
)]
pub struct ReserveArgs<'a> {
    pub now: String,
    /// The tenant's day and month keys in the billing time zone.
    pub day: String,
    pub month: String,
    pub expires_at: String,
    pub amount: String,
    /// Alert mode: a reservation past a budget is held anyway, and flagged.
    pub alert: bool,
    /// `rate_mode = "alert"`: a reservation past the tokens per minute is
    /// held anyway (and charged to the bucket), and flagged.
    pub tpm_alert: bool,
    /// The clock minute (ms / 60000): one tokens-per-minute alert per minute.
    pub minute: String,
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

/// A script's one argument: the JSON object of its arguments.
pub fn json(args: &impl Serialize) -> String {
    // Strings, booleans, periods, lists and string maps only: serializing
    // cannot fail.
    serde_json::to_string(args).unwrap_or_default()
}

/// Reads a script's JSON reply (`None`: not one it can give).
pub fn reply<R: DeserializeOwned>(text: &str) -> Option<R> {
    serde_json::from_str(text).ok()
}

/// Where the end users' windows are now, for a script that closes holds
/// (their own window's hash takes what a hold of theirs leaves).
#[derive(Debug, Serialize)]
pub struct EndUserWindows {
    /// The end users' hash prefix.
    pub prefix: String,
    /// The current day, week and month window keys.
    pub day: String,
    pub week: String,
    pub month: String,
    /// How long each window's hash lives from now.
    pub ttl: WindowTtls,
    /// The local day key.
    pub today: String,
}

#[derive(Debug, Serialize)]
pub struct WindowTtls {
    pub day: String,
    pub week: String,
    pub month: String,
    pub lifetime: String,
}

/// `SETTLE`: closes one hold at what its call cost.
#[derive(Debug, Serialize)]
pub struct SettleArgs {
    pub now: String,
    pub id: String,
    pub charged: String,
    pub used_tokens: String,
    /// This month's and today's keys.
    pub month: String,
    pub day: String,
    pub tpm: String,
    pub end_users: EndUserWindows,
    /// The period of the tenant's budget, whose alerts this settle may fire.
    pub period: Period,
    pub thresholds: Vec<Threshold>,
}

/// An alert: its percent and the committed amount that reaches it.
#[derive(Debug, Serialize)]
pub struct Threshold {
    pub percent: String,
    pub amount: String,
}

/// What `SETTLE` answered.
#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SettleReply {
    /// Closed before: settled, or committed as an orphan.
    Closed,
    /// Neither held nor closed here: the store lost its state.
    Lost,
    Ok {
        /// What the hold held.
        held: String,
        committed: String,
        reserved: String,
        /// The alert percents this settle reached first (absent: none).
        #[serde(default)]
        fired: Vec<String>,
    },
}

/// `CLOSE_REQUEST`: closes what one request still holds after a journal replay.
#[derive(Debug, Serialize)]
pub struct CloseRequestArgs<'a> {
    pub now: String,
    pub request: &'a str,
    /// `-1`: at the hold's own amount and tokens (an orphan).
    pub charged: String,
    pub used_tokens: String,
    pub month: String,
    pub day: String,
    pub end_users: EndUserWindows,
}

/// What `CLOSE_REQUEST` answered.
#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CloseRequestReply {
    Closed { id: String },
    None,
}

/// Spend by scope, as the ledger sums it: the tenant's, each key's, each feature's.
#[derive(Debug, Serialize)]
pub struct ScopeSpend {
    pub tenant: String,
    pub keys: BTreeMap<String, String>,
    pub features: BTreeMap<String, String>,
}

/// `SEED`: starts the month from the ledger.
#[derive(Debug, Serialize)]
pub struct SeedArgs {
    pub ttl: String,
    pub committed: ScopeSpend,
    pub tokens_month: String,
    pub day: String,
    pub tokens_today: String,
    /// Alert percents already reached (not fired again).
    pub reached: Vec<String>,
}

/// `RAISE`: raises the month's counters to the ledger's.
#[derive(Debug, Serialize)]
pub struct RaiseArgs {
    pub committed: ScopeSpend,
    pub tokens_month: String,
    pub day: String,
    pub tokens_today: String,
}

/// What `RAISE` answered.
#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RaiseReply {
    /// The month is not started: nothing to raise.
    Unseeded,
    /// Redis's committed spend before.
    Ok { before: String },
}

/// `SEED_WINDOW`: starts a day, week or lifetime window from the ledger.
#[derive(Debug, Serialize)]
pub struct SeedWindowArgs {
    pub ttl: String,
    pub committed: ScopeSpend,
}

/// `ABSORB`: spend settled on a local store while the shared one was away.
#[derive(Debug, Serialize)]
pub struct AbsorbArgs<'a> {
    pub charged: String,
    pub key: &'a str,
    pub feature: &'a str,
    pub tokens: String,
    pub day: String,
}

/// `SEED_END_USER`: starts an end user's window from the ledger.
#[derive(Debug, Serialize)]
pub struct SeedEndUserArgs {
    pub committed: String,
    pub ttl: String,
    pub day: String,
    pub tokens_today: String,
}

/// `SEED_CREDIT`: starts the balances from the ledger.
#[derive(Debug, Serialize)]
pub struct SeedCreditArgs {
    /// The tenant's and each key's lifetime spend.
    pub tenant_spent: String,
    pub keys_spent: BTreeMap<String, String>,
    pub top_ups: Vec<TopUp>,
}

/// One grant's row (`CREDIT` takes one alone).
#[derive(Debug, Serialize)]
pub struct TopUp {
    pub row: String,
    /// Empty: the tenant's balance.
    pub key: String,
    pub amount: String,
    /// `id|priority|kind|starts|expires|closes|amount` (see `scripts.rs`).
    pub grant: String,
    /// What the ledger says it drew (a seed's), and whether its breakage is booked.
    pub drawn: String,
    pub booked: bool,
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
        /// Passed over an alert-only tokens per minute…
        #[serde(default)]
        over_tpm: bool,
        /// …the first time in its minute.
        #[serde(default)]
        tpm_alert: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_read_by_its_kind_and_names() {
        let ok = r#"{"kind":"ok","over":false,"committed":"12","reserved":"3","units":"-1","balance":"-1"}"#;
        assert_eq!(
            reply::<ReserveReply>(ok),
            Some(ReserveReply::Ok {
                over: false,
                committed: "12".into(),
                reserved: "3".into(),
                units: "-1".into(),
                balance: "-1".into(),
                over_tpm: false,
                tpm_alert: false,
            })
        );
        let window = r#"{"kind":"seed_w","period":"week"}"#;
        assert_eq!(
            reply::<ReserveReply>(window),
            Some(ReserveReply::SeedW {
                period: Period::Week
            })
        );
        assert_eq!(reply::<ReserveReply>(r#"{"kind":"nonsense"}"#), None);
    }

    #[test]
    fn a_settle_without_alerts_reads_as_none_fired() {
        // Lua's JSON writes an empty list as `{}`, so the script leaves it out.
        let ok = r#"{"kind":"ok","held":"5","committed":"12","reserved":"3"}"#;
        assert_eq!(
            reply::<SettleReply>(ok),
            Some(SettleReply::Ok {
                held: "5".into(),
                committed: "12".into(),
                reserved: "3".into(),
                fired: Vec::new(),
            })
        );
    }
}
