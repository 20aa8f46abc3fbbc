//! What one scope (the tenant, a key, a feature) has spent in each period a
//! budget may run over: this day, ISO week and month of the billing time
//! zone, and its lifetime. Every settle adds to all four, so a scope's budget
//! reads the one its period names, and a change of period needs no reload.

use crate::calendar::{Calendar, Period};
use crate::money::Nanos;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    pub day: Nanos,
    pub week: Nanos,
    pub month: Nanos,
    pub lifetime: Nanos,
}

impl Spent {
    pub fn get(&self, period: Period) -> Nanos {
        match period {
            Period::Day => self.day,
            Period::Week => self.week,
            Period::Month => self.month,
            Period::Lifetime => self.lifetime,
        }
    }

    pub fn add(&mut self, amount: Nanos) {
        for spent in [
            &mut self.day,
            &mut self.week,
            &mut self.month,
            &mut self.lifetime,
        ] {
            *spent = spent.saturating_add(amount);
        }
    }

    /// A new occurrence of `period` began: nothing is spent in it yet.
    pub fn restart(&mut self, period: Period) {
        match period {
            Period::Day => self.day = Nanos::ZERO,
            Period::Week => self.week = Nanos::ZERO,
            Period::Month => self.month = Nanos::ZERO,
            Period::Lifetime => {}
        }
    }
}

/// The current day, week and month keys. They are recomputed only once the
/// day has ended (a week or a month never ends inside a day), so the time
/// zone's rules are consulted once a day, not on every call.
#[derive(Debug, Clone)]
pub struct Windows {
    keys: [String; 3],
    day_ends_ms: u64,
}

const ROLLING: [Period; 3] = [Period::Day, Period::Week, Period::Month];

impl Windows {
    pub fn new(calendar: &Calendar, now_ms: u64) -> Windows {
        Windows {
            keys: ROLLING.map(|p| calendar.window(p, now_ms).key),
            day_ends_ms: calendar.window(Period::Day, now_ms).end_ms,
        }
    }

    /// The periods that began since the last call, in order (day, week, month).
    pub fn roll(&mut self, calendar: &Calendar, now_ms: u64) -> Vec<Period> {
        if now_ms < self.day_ends_ms {
            return Vec::new();
        }
        let next = Windows::new(calendar, now_ms);
        let began = ROLLING
            .iter()
            .zip(self.keys.iter().zip(&next.keys))
            .filter(|(_, (old, new))| old != new)
            .map(|(period, _)| *period)
            .collect();
        *self = next;
        began
    }

    /// The key of the current occurrence of `period` (`lifetime` for a lifetime).
    pub fn key(&self, period: Period) -> &str {
        match period {
            Period::Day => &self.keys[0],
            Period::Week => &self.keys[1],
            Period::Month => &self.keys[2],
            Period::Lifetime => crate::calendar::LIFETIME,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> u64 {
        crate::period::parse_instant(text).unwrap()
    }

    #[test]
    fn a_new_day_restarts_the_day_and_a_new_month_the_month_but_never_the_lifetime() {
        let shanghai = Calendar::named("Asia/Shanghai").unwrap();
        let mut windows = Windows::new(&shanghai, ms("2026-11-30T15:00:00Z"));
        assert_eq!(windows.key(Period::Day), "2026-11-30");
        assert!(
            windows
                .roll(&shanghai, ms("2026-11-30T15:59:59Z"))
                .is_empty()
        );
        // Midnight in Shanghai, Tuesday 1 December: a new day and month, the same ISO week.
        let began = windows.roll(&shanghai, ms("2026-11-30T16:00:00Z"));
        assert_eq!(began, vec![Period::Day, Period::Month]);
        assert_eq!(windows.key(Period::Month), "2026-12");
        assert_eq!(windows.key(Period::Week), "2026-W49");

        let mut spent = Spent::default();
        spent.add(Nanos::new(5));
        for period in began {
            spent.restart(period);
        }
        assert_eq!(spent.get(Period::Week), Nanos::new(5));
        assert_eq!(spent.get(Period::Day), Nanos::ZERO);
        spent.restart(Period::Lifetime);
        assert_eq!(spent.get(Period::Lifetime), Nanos::new(5));
    }
}
