//! Calendar arithmetic in UTC: budget periods are calendar months, reports
//! group by day. Pure integer math (days-from-civil), so no time crate is needed
//! on the hot path.

const MS_PER_DAY: u64 = 86_400_000;

/// A UTC calendar date.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Date {
    pub year: i32,
    pub month: u32,
    pub day: u32,
}

impl Date {
    pub fn from_unix_ms(ms: u64) -> Date {
        let days = i64::try_from(ms / MS_PER_DAY).unwrap_or(i64::MAX);
        civil_from_days(days)
    }

    /// `2026-11-30`; anything else is `None`.
    pub fn parse(text: &str) -> Option<Date> {
        let mut parts = text.splitn(3, '-');
        let year: i32 = parts.next()?.parse().ok()?;
        let month: u32 = parts.next()?.parse().ok()?;
        let day: u32 = parts.next()?.parse().ok()?;
        let date = Date { year, month, day };
        let valid = (1970..=9999).contains(&year)
            && (1..=12).contains(&month)
            && day >= 1
            && day <= days_in_month(year, month)
            && text.len() == 10;
        valid.then_some(date)
    }

    pub fn start_unix_ms(self) -> u64 {
        let days = days_from_civil(self.year, self.month, self.day);
        u64::try_from(days).unwrap_or(0) * MS_PER_DAY
    }

    /// The budget period this date falls in, e.g. `2026-11`.
    pub fn month_key(self) -> String {
        format!("{:04}-{:02}", self.year, self.month)
    }

    pub fn day_key(self) -> String {
        format!("{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }

    #[must_use]
    pub fn first_of_next_month(self) -> Date {
        if self.month == 12 {
            Date {
                year: self.year + 1,
                month: 1,
                day: 1,
            }
        } else {
            Date {
                year: self.year,
                month: self.month + 1,
                day: 1,
            }
        }
    }
}

/// An RFC 3339 instant (`2026-12-31T23:59:59Z`, `…+08:00`, fractions of a
/// second allowed) as ms since the epoch; anything else is `None`.
pub fn parse_instant(text: &str) -> Option<u64> {
    let (date, rest) = text.split_at_checked(10)?;
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    let (clock, offset_minutes) = split_offset(rest)?;
    let (hms, fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let mut parts = hms.splitn(3, ':');
    let hours: u64 = parts.next()?.parse().ok()?;
    let minutes: u64 = parts.next()?.parse().ok()?;
    let seconds: u64 = parts.next()?.parse().ok()?;
    if hms.len() != 8 || hours > 23 || minutes > 59 || seconds > 60 {
        return None;
    }
    if !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let millis: u64 = format!("{fraction:0<3}").get(..3)?.parse().ok()?;
    let local = Date::parse(date)?.start_unix_ms()
        + ((hours * 60 + minutes) * 60 + seconds) * 1000
        + millis;
    let offset_ms = offset_minutes * 60_000;
    u64::try_from(i64::try_from(local).ok()?.checked_sub(offset_ms)?).ok()
}

/// `12:00:00Z` or `12:00:00+08:00`: the clock and its offset from UTC in minutes.
fn split_offset(rest: &str) -> Option<(&str, i64)> {
    if let Some(clock) = rest.strip_suffix(['Z', 'z']) {
        return Some((clock, 0));
    }
    let at = rest.rfind(['+', '-'])?;
    let (clock, offset) = rest.split_at(at);
    let sign = if offset.starts_with('-') { -1 } else { 1 };
    let (h, m) = offset.get(1..)?.split_once(':')?;
    let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
    (offset.len() == 6 && h <= 23 && m <= 59).then_some((clock, sign * (h * 60 + m)))
}

/// The budget period (UTC calendar month) containing `ms`.
pub fn month_key(ms: u64) -> String {
    Date::from_unix_ms(ms).month_key()
}

fn is_leap(year: i32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's days_from_civil / civil_from_days, for the proleptic Gregorian calendar.
fn days_from_civil(year: i32, month: u32, day: u32) -> i64 {
    let y = i64::from(year) - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(days: i64) -> Date {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    Date {
        year: i32::try_from(year).unwrap_or(i32::MAX),
        month: u32::try_from(month).unwrap_or(1),
        day: u32::try_from(day).unwrap_or(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rfc3339_instants_with_offsets_and_fractions() {
        // 2026-11-30T12:00:00Z
        let noon = 1_796_040_000_000;
        assert_eq!(parse_instant("2026-11-30T12:00:00Z"), Some(noon));
        assert_eq!(parse_instant("2026-11-30t12:00:00z"), Some(noon));
        assert_eq!(parse_instant("2026-11-30T20:00:00+08:00"), Some(noon));
        assert_eq!(parse_instant("2026-11-30T07:30:00-04:30"), Some(noon));
        assert_eq!(parse_instant("2026-11-30T12:00:00.25Z"), Some(noon + 250));
        assert_eq!(
            parse_instant("2026-11-30T12:00:00.123456Z"),
            Some(noon + 123)
        );
        for bad in [
            "2026-11-30",
            "2026-11-30T12:00Z",
            "2026-11-30T12:00:00",
            "2026-11-30T25:00:00Z",
            "2026-11-31T12:00:00Z",
            "2026-11-30T12:00:00+8:00",
            "2026-11-30T12:00:00.x5Z",
            "1970-01-01T00:00:00+01:00",
            "next tuesday",
        ] {
            assert_eq!(parse_instant(bad), None, "{bad}");
        }
    }

    #[test]
    fn round_trips_dates_and_periods() {
        // 2026-11-30T12:00:00Z
        let ms = 1_796_040_000_000;
        let date = Date::from_unix_ms(ms);
        assert_eq!(date.day_key(), "2026-11-30");
        assert_eq!(date.month_key(), "2026-11");
        assert_eq!(
            Date::parse("2026-11-30").unwrap().start_unix_ms(),
            1_795_996_800_000
        );
        assert_eq!(date.first_of_next_month().day_key(), "2026-12-01");
        assert_eq!(Date::parse("2024-02-29").unwrap().day_key(), "2024-02-29");
        assert!(Date::parse("2026-02-29").is_none());
        assert!(Date::parse("2026-13-01").is_none());
        assert_eq!(Date::from_unix_ms(0).day_key(), "1970-01-01");
    }
}
