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
