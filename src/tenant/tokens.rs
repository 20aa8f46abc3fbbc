//! Token quotas of one tenant: tokens per minute (a bucket charged with the
//! estimate at admission and corrected at settlement) and daily and monthly
//! token limits (the billing time zone's day and month). Pure data; time is
//! a parameter.

use super::spent::Windows;
use crate::calendar::{Calendar, Period};

/// Bucket units per token: refilling `tpm` units per millisecond gives exactly
/// `tpm` tokens per minute in integers.
const UNITS_PER_TOKEN: i128 = 60_000;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenLimits {
    pub tpm: Option<u64>,
    pub daily: Option<u64>,
    pub monthly: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenLimitKind {
    PerMinute,
    Daily,
    Monthly,
}

impl TokenLimitKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenLimitKind::PerMinute => "tokens per minute",
            TokenLimitKind::Daily => "daily tokens",
            TokenLimitKind::Monthly => "monthly tokens",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{} limit reached: {limit}, this request needs up to {needed}", kind.as_str())]
pub struct TokenRefusal {
    pub kind: TokenLimitKind,
    pub limit: u64,
    pub needed: u64,
    /// Until the request would fit (the bucket refills, or the day or month turns).
    pub retry_after_ms: u64,
}

/// The tokens-per-minute window for `x-ratelimit-*-tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenWindow {
    pub limit: u64,
    pub remaining: u64,
    pub reset_ms: u64,
}

#[derive(Debug)]
pub struct TokenQuota {
    limits: TokenLimits,
    /// May go below zero when a call used more than its estimate.
    bucket_units: i128,
    bucket_at_ms: u64,
    calendar: Calendar,
    /// The current local day and month.
    windows: Windows,
    /// Tokens used (settled) plus held (admitted, unsettled) today and this month.
    day_tokens: u64,
    month_tokens: u64,
}

impl TokenQuota {
    pub fn new(
        limits: TokenLimits,
        used_today: u64,
        used_this_month: u64,
        calendar: &Calendar,
        now_ms: u64,
    ) -> Self {
        TokenQuota {
            limits,
            bucket_units: capacity(limits),
            bucket_at_ms: now_ms,
            calendar: calendar.clone(),
            windows: Windows::new(calendar, now_ms),
            day_tokens: used_today,
            month_tokens: used_this_month,
        }
    }

    pub fn set_limits(&mut self, limits: TokenLimits) {
        self.bucket_units = self.bucket_units.min(capacity(limits));
        self.limits = limits;
    }

    fn roll(&mut self, now_ms: u64) {
        self.roll_windows(now_ms);
        self.refill(now_ms);
    }

    /// A local day or month that began starts from no tokens.
    fn roll_windows(&mut self, now_ms: u64) {
        for period in self.windows.roll(&self.calendar, now_ms) {
            match period {
                Period::Day => self.day_tokens = 0,
                Period::Month => self.month_tokens = 0,
                Period::Week | Period::Lifetime => {}
            }
        }
    }

    fn refill(&mut self, now_ms: u64) {
        if let Some(tpm) = self.limits.tpm {
            let elapsed = i128::from(now_ms.saturating_sub(self.bucket_at_ms));
            self.bucket_units =
                (self.bucket_units + elapsed * i128::from(tpm)).min(capacity(self.limits));
        }
        self.bucket_at_ms = self.bucket_at_ms.max(now_ms);
    }

    /// Admits `estimate` tokens against every limit, all or nothing.
    pub fn admit(
        &mut self,
        estimate: u64,
        now_ms: u64,
    ) -> Result<Option<TokenWindow>, TokenRefusal> {
        self.admit_over(estimate, now_ms, false)
            .map(|(window, _)| window)
    }

    /// `admit`, where an `alert_only` tokens-per-minute limit lets a request
    /// too large for the bucket pass (`true`: it passed over). It is charged
    /// to the bucket all the same, which may go below zero, so the bucket
    /// keeps measuring what the tenant really uses and the settle's
    /// correction stays exact.
    pub fn admit_over(
        &mut self,
        estimate: u64,
        now_ms: u64,
        alert_only: bool,
    ) -> Result<(Option<TokenWindow>, bool), TokenRefusal> {
        self.roll(now_ms);
        if let Some(limit) = self.limits.monthly
            && self.month_tokens.saturating_add(estimate) > limit
        {
            return Err(monthly_refusal(limit, estimate, &self.calendar, now_ms));
        }
        if let Some(limit) = self.limits.daily
            && self.day_tokens.saturating_add(estimate) > limit
        {
            return Err(daily_refusal(limit, estimate, &self.calendar, now_ms));
        }
        let mut over = false;
        if let Some(tpm) = self.limits.tpm {
            let needed = i128::from(estimate) * UNITS_PER_TOKEN;
            if needed > self.bucket_units {
                if !alert_only {
                    return Err(per_minute_refusal(tpm, estimate, self.bucket_units));
                }
                over = true;
            }
            self.bucket_units -= needed;
        }
        self.day_tokens = self.day_tokens.saturating_add(estimate);
        self.month_tokens = self.month_tokens.saturating_add(estimate);
        Ok((self.window(), over))
    }

    /// Replaces an admitted estimate with what the call really used.
    pub fn settle(&mut self, estimate: u64, actual: u64, now_ms: u64) {
        // The bucket refills at admissions only, as the Redis script's does
        // (its close corrects what the bucket holds and leaves its time): so
        // both stores cap it at the same points, whatever the order of settles.
        if self.limits.tpm.is_some() {
            let correction = (i128::from(estimate) - i128::from(actual)) * UNITS_PER_TOKEN;
            self.bucket_units = (self.bucket_units + correction).min(capacity(self.limits));
        }
        self.roll_windows(now_ms);
        self.day_tokens = self
            .day_tokens
            .saturating_sub(estimate)
            .saturating_add(actual);
        self.month_tokens = self
            .month_tokens
            .saturating_sub(estimate)
            .saturating_add(actual);
    }

    pub fn window(&self) -> Option<TokenWindow> {
        Some(window(self.limits.tpm?, self.bucket_units))
    }

    /// Tokens used (and held) today and this month.
    pub fn used(&self) -> (u64, u64) {
        (self.day_tokens, self.month_tokens)
    }

    /// The current day and month keys (for tests and status).
    pub fn periods(&self) -> (&str, &str) {
        (
            self.windows.key(Period::Day),
            self.windows.key(Period::Month),
        )
    }
}

/// The window of a tokens-per-minute bucket holding `units`.
pub fn window(tpm: u64, units: i128) -> TokenWindow {
    let capacity = i128::from(tpm) * UNITS_PER_TOKEN;
    TokenWindow {
        limit: tpm,
        remaining: u64::try_from(units.max(0) / UNITS_PER_TOKEN).unwrap_or(0),
        reset_ms: to_ms((capacity - units).max(0).div_euclid(i128::from(tpm.max(1)))),
    }
}

pub fn monthly_refusal(
    limit: u64,
    estimate: u64,
    calendar: &Calendar,
    now_ms: u64,
) -> TokenRefusal {
    let next = calendar.window(Period::Month, now_ms).end_ms;
    refusal(
        TokenLimitKind::Monthly,
        limit,
        estimate,
        next.saturating_sub(now_ms),
    )
}

pub fn daily_refusal(limit: u64, estimate: u64, calendar: &Calendar, now_ms: u64) -> TokenRefusal {
    let next = calendar.window(Period::Day, now_ms).end_ms;
    refusal(
        TokenLimitKind::Daily,
        limit,
        estimate,
        next.saturating_sub(now_ms),
    )
}

/// A bucket holding `units` cannot take `estimate` tokens.
pub fn per_minute_refusal(tpm: u64, estimate: u64, units: i128) -> TokenRefusal {
    let needed = i128::from(estimate) * UNITS_PER_TOKEN;
    // A request larger than a whole minute's tokens can never fit.
    let wait = if estimate > tpm {
        u64::MAX
    } else {
        to_ms((needed - units + i128::from(tpm) - 1).div_euclid(i128::from(tpm.max(1))))
    };
    refusal(TokenLimitKind::PerMinute, tpm, estimate, wait)
}

fn refusal(kind: TokenLimitKind, limit: u64, needed: u64, retry_after_ms: u64) -> TokenRefusal {
    TokenRefusal {
        kind,
        limit,
        needed,
        retry_after_ms,
    }
}

fn capacity(limits: TokenLimits) -> i128 {
    limits
        .tpm
        .map_or(0, |tpm| i128::from(tpm) * UNITS_PER_TOKEN)
}

fn to_ms(units: i128) -> u64 {
    u64::try_from(units.max(0)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_796_040_000_000; // 2026-11-30T12:00Z

    #[test]
    fn tokens_per_minute_are_charged_with_the_estimate_and_corrected_at_settlement() {
        let limits = TokenLimits {
            tpm: Some(1000),
            ..TokenLimits::default()
        };
        let mut quota = TokenQuota::new(limits, 0, 0, &Calendar::utc(), NOW);
        assert_eq!(quota.admit(800, NOW).unwrap().unwrap().remaining, 200);
        let refused = quota.admit(300, NOW).unwrap_err();
        assert_eq!(refused.kind, TokenLimitKind::PerMinute);
        // 100 tokens missing at 1000 per minute: 6 s.
        assert_eq!(refused.retry_after_ms, 6000);
        quota.settle(800, 100, NOW);
        assert_eq!(quota.admit(300, NOW).unwrap().unwrap().remaining, 600);
        assert!(
            quota.admit(5000, NOW).is_err(),
            "larger than a minute never fits"
        );
    }

    #[test]
    fn daily_and_monthly_limits_count_used_and_held_tokens_and_roll_over() {
        let limits = TokenLimits {
            tpm: None,
            daily: Some(1000),
            monthly: Some(1500),
        };
        let mut quota = TokenQuota::new(limits, 900, 900, &Calendar::utc(), NOW);
        let refused = quota.admit(200, NOW).unwrap_err();
        assert_eq!(refused.kind, TokenLimitKind::Daily);
        assert_eq!(
            refused.retry_after_ms,
            12 * 3_600_000,
            "until the UTC day turns"
        );
        quota.admit(100, NOW).unwrap();
        quota.settle(100, 50, NOW);
        let tomorrow = NOW + 12 * 3_600_000;
        // December: the month rolled too.
        quota.admit(600, tomorrow).unwrap();
        assert_eq!(quota.periods(), ("2026-12-01", "2026-12"));
        let mut monthly = TokenQuota::new(limits, 0, 1400, &Calendar::utc(), NOW);
        assert_eq!(
            monthly.admit(200, NOW).unwrap_err().kind,
            TokenLimitKind::Monthly
        );
    }
}
