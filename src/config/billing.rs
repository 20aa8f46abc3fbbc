//! `[billing]`: the currency, the calendar budgets follow, and how holds are sized.

use serde::Deserialize;

use super::errors::Problems;
use crate::calendar::Calendar;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BillingConfig {
    pub currency: String,
    /// `clamp` mode never lowers `max_tokens` below this.
    pub clamp_floor_tokens: u32,
    /// The IANA zone where a budget's day, week and month begin.
    pub timezone: String,
    /// End users a tenant keeps in memory at most (memory mode): the least
    /// recently seen idle ones are evicted and reloaded from the ledger.
    pub end_users_in_memory: usize,
    /// A stream is admitted with this much output held, not its whole
    /// `max_tokens`, and its hold grows by this much at a time ahead of what
    /// it has streamed (where its model hides no output); 0 holds it whole.
    pub stream_step_tokens: u32,
}

impl Default for BillingConfig {
    fn default() -> Self {
        BillingConfig {
            currency: "USD".to_owned(),
            clamp_floor_tokens: 64,
            timezone: "UTC".to_owned(),
            end_users_in_memory: 100_000,
            stream_step_tokens: 1024,
        }
    }
}

impl BillingConfig {
    /// `timezone`'s calendar. A zone that is not one is named and UTC stands
    /// in, so the dated prices are still checked.
    pub(super) fn calendar(&self, problems: &mut Problems) -> Calendar {
        Calendar::named(&self.timezone).unwrap_or_else(|reason| {
            problems.add("billing.timezone", reason);
            Calendar::utc()
        })
    }
}
