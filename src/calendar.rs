//! Budget periods in the billing time zone (`billing.timezone`, an IANA
//! name): a day, an ISO week or a calendar month begins at local midnight
//! there, and a lifetime never ends. A period is named by a key (`2026-12-02`,
//! `2026-W49`, `2026-12`, `lifetime`) that stores and the ledger share, and
//! ends at an instant, after which every store starts the next one. Time
//! zone rules (offsets, daylight saving) are the bundled IANA database's.

use std::fmt;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
use serde::{Deserialize, Serialize};

/// How long a budget lasts before it starts again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    #[default]
    Day,
    Week,
    Month,
    /// Never resets: spend only adds up.
    Lifetime,
}

impl Period {
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
            Period::Lifetime => "lifetime",
        }
    }

    pub fn parse(text: &str) -> Option<Period> {
        [Period::Day, Period::Week, Period::Month, Period::Lifetime]
            .into_iter()
            .find(|p| p.as_str() == text)
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The key of the lifetime period, which every instant falls in.
pub const LIFETIME: &str = "lifetime";

/// One occurrence of a period: its key, the local days it spans, and when it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub key: String,
    /// Its first local day (`None` for a lifetime).
    pub first_day: Option<Date>,
    /// Local days in it (0 for a lifetime).
    pub days: u32,
    /// The instant it began (0 for a lifetime).
    pub start_ms: u64,
    /// The instant the next period begins (`u64::MAX` for a lifetime).
    pub end_ms: u64,
}

#[derive(Debug, Clone)]
pub struct Calendar {
    zone: TimeZone,
    name: String,
}

impl PartialEq for Calendar {
    fn eq(&self, other: &Calendar) -> bool {
        self.name == other.name
    }
}

impl Eq for Calendar {}

impl Default for Calendar {
    fn default() -> Calendar {
        Calendar::utc()
    }
}

impl Calendar {
    pub fn utc() -> Calendar {
        Calendar {
            zone: TimeZone::UTC,
            name: "UTC".to_owned(),
        }
    }

    /// The calendar of an IANA zone name (`Asia/Shanghai`); unknown names are an error.
    pub fn named(name: &str) -> Result<Calendar, String> {
        let zone = TimeZone::get(name)
            .map_err(|e| format!("`{name}` is not an IANA time zone name: {e}"))?;
        Ok(Calendar {
            zone,
            name: name.to_owned(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The local date of an instant.
    pub fn date_of(&self, now_ms: u64) -> Date {
        let millis = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let instant = Timestamp::from_millisecond(millis).unwrap_or(Timestamp::MAX);
        instant.to_zoned(self.zone.clone()).date()
    }

    /// The local day key (`2026-12-02`) of an instant.
    pub fn day_key(&self, now_ms: u64) -> String {
        day_key(self.date_of(now_ms))
    }

    /// The occurrence of `period` that `now_ms` falls in.
    pub fn window(&self, period: Period, now_ms: u64) -> Window {
        let today = self.date_of(now_ms);
        let (key, first, days) = match period {
            Period::Lifetime => {
                return Window {
                    key: LIFETIME.to_owned(),
                    first_day: None,
                    days: 0,
                    start_ms: 0,
                    end_ms: u64::MAX,
                };
            }
            Period::Day => (day_key(today), today, 1),
            Period::Week => {
                let week = today.iso_week_date();
                let monday = today
                    .checked_sub(i64::from(today.weekday().to_monday_zero_offset()).days())
                    .unwrap_or(today);
                let key = format!("{:04}-W{:02}", week.year(), week.week());
                (key, monday, 7)
            }
            Period::Month => {
                let first = today.first_of_month();
                let key = format!("{:04}-{:02}", first.year(), first.month());
                (
                    key,
                    first,
                    u32::try_from(today.days_in_month()).unwrap_or(31),
                )
            }
        };
        let next = first
            .checked_add(i64::from(days).days())
            .unwrap_or(Date::MAX);
        Window {
            key,
            first_day: Some(first),
            days,
            start_ms: self.start_ms(first),
            end_ms: self.start_ms(next),
        }
    }

    /// The local day `YYYY-MM-DD` (`None`: not such a day).
    pub fn day(&self, text: &str) -> Option<Window> {
        let date = crate::period::Date::parse(text)?;
        let day = Date::new(
            i16::try_from(date.year).ok()?,
            i8::try_from(date.month).ok()?,
            i8::try_from(date.day).ok()?,
        )
        .ok()?;
        Some(self.window(Period::Day, self.start_ms(day)))
    }

    /// The local day before the one `now_ms` falls in.
    pub fn yesterday(&self, now_ms: u64) -> crate::period::Date {
        let today = self.window(Period::Day, now_ms);
        let key = self.day_key(today.start_ms.saturating_sub(1));
        crate::period::Date::parse(&key)
            .unwrap_or_else(|| crate::period::Date::from_unix_ms(now_ms))
    }

    /// Minutes since local midnight at `now_ms`.
    pub fn minute_of_day(&self, now_ms: u64) -> u32 {
        let millis = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let instant = Timestamp::from_millisecond(millis).unwrap_or(Timestamp::MAX);
        let zoned = instant.to_zoned(self.zone.clone());
        u32::try_from(i32::from(zoned.hour()) * 60 + i32::from(zoned.minute())).unwrap_or(0)
    }

    /// The local calendar month `YYYY-MM` (`None`: not such a month).
    pub fn month(&self, text: &str) -> Option<Window> {
        let (year, month) = text.split_once('-')?;
        if year.len() != 4 || month.len() != 2 {
            return None;
        }
        let first = Date::new(year.parse().ok()?, month.parse().ok()?, 1).ok()?;
        Some(self.window(Period::Month, self.start_ms(first)))
    }

    /// Local midnight of `date` (or the first instant of that day where a
    /// daylight-saving gap skips midnight) as ms since the epoch.
    fn start_ms(&self, date: Date) -> u64 {
        date.to_zoned(self.zone.clone()).map_or(u64::MAX, |zoned| {
            u64::try_from(zoned.timestamp().as_millisecond()).unwrap_or(0)
        })
    }
}

/// `2026-12-02`.
pub fn day_key(date: Date) -> String {
    format!("{:04}-{:02}-{:02}", date.year(), date.month(), date.day())
}

/// The local day keys of a window, in order (none for a lifetime).
pub fn day_keys(window: &Window) -> Vec<String> {
    let Some(first) = window.first_day else {
        return Vec::new();
    };
    (0..window.days)
        .filter_map(|offset| first.checked_add(i64::from(offset).days()).ok())
        .map(day_key)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> u64 {
        crate::period::parse_instant(text).unwrap()
    }

    #[test]
    fn a_day_in_shanghai_begins_at_sixteen_hundred_utc() {
        let shanghai = Calendar::named("Asia/Shanghai").unwrap();
        let before = shanghai.window(Period::Day, ms("2026-12-02T15:59:59.999Z"));
        let after = shanghai.window(Period::Day, ms("2026-12-02T16:00:00Z"));
        assert_eq!(before.key, "2026-12-02");
        assert_eq!(after.key, "2026-12-03");
        assert_eq!(before.end_ms, ms("2026-12-02T16:00:00Z"));
        assert_eq!(after.end_ms, ms("2026-12-03T16:00:00Z"));
        let utc = Calendar::utc().window(Period::Day, ms("2026-12-02T16:00:00Z"));
        assert_eq!(utc.key, "2026-12-02");
    }

    #[test]
    fn weeks_are_iso_weeks_from_monday_and_months_calendar_months() {
        let utc = Calendar::utc();
        // 2026-12-31 is a Thursday in ISO week 53 of 2026.
        let week = utc.window(Period::Week, ms("2026-12-31T12:00:00Z"));
        assert_eq!(week.key, "2026-W53");
        assert_eq!(week.end_ms, ms("2027-01-04T00:00:00Z"));
        assert_eq!(day_keys(&week)[0], "2026-12-28");
        assert_eq!(day_keys(&week).len(), 7);
        let month = utc.window(Period::Month, ms("2027-02-10T00:00:00Z"));
        assert_eq!(month.key, "2027-02");
        assert_eq!(month.days, 28);
        assert_eq!(month.end_ms, ms("2027-03-01T00:00:00Z"));
    }

    #[test]
    fn a_lifetime_never_ends_and_a_daylight_saving_day_is_its_local_length() {
        let life = Calendar::utc().window(Period::Lifetime, 0);
        assert_eq!((life.key.as_str(), life.end_ms), (LIFETIME, u64::MAX));
        assert!(day_keys(&life).is_empty());
        // New York springs forward on 2026-03-08: that day lasts 23 hours.
        let new_york = Calendar::named("America/New_York").unwrap();
        let day = new_york.window(Period::Day, ms("2026-03-08T12:00:00Z"));
        let start = ms("2026-03-08T05:00:00Z");
        assert_eq!(day.end_ms - start, 23 * 3_600_000);
    }

    #[test]
    fn an_unknown_zone_is_an_error_that_names_it() {
        let error = Calendar::named("Mars/Olympus").unwrap_err();
        assert!(error.contains("Mars/Olympus"), "{error}");
    }
}
