//! Money as integer nano-units (1e-9) of the billing currency. Decimal strings
//! are parsed exactly; costs are accumulated in nano-units × tokens-per-million
//! and rounded up once per call, so no float ever touches the money path.

use std::fmt;

use serde::{Serialize, Serializer};

/// Nano-units per currency unit.
const NANOS_PER_UNIT: u64 = 1_000_000_000;
const FRACTION_DIGITS: usize = 9;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nanos(u64);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MoneyError {
    #[error(
        "`{0}` is not a decimal amount (expected digits with an optional `.` and at most 9 decimals)"
    )]
    Malformed(String),
    #[error("`{0}` is too large")]
    Overflow(String),
}

impl Nanos {
    pub const ZERO: Nanos = Nanos(0);
    pub const MAX: Nanos = Nanos(u64::MAX);

    pub const fn new(nanos: u64) -> Self {
        Nanos(nanos)
    }

    pub const fn get(self) -> u64 {
        self.0
    }

    /// Parses `"2.0"`, `"0.04"`, `"5"`: no sign, no exponent, at most 9 decimals.
    pub fn parse_decimal(text: &str) -> Result<Self, MoneyError> {
        let malformed = || MoneyError::Malformed(text.to_owned());
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() && fraction.is_empty()
            || !all_digits(whole)
            || !all_digits(fraction)
            || fraction.len() > FRACTION_DIGITS
            || (text.contains('.') && fraction.is_empty())
        {
            return Err(malformed());
        }
        let overflow = || MoneyError::Overflow(text.to_owned());
        let whole_units: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| overflow())?
        };
        let mut fraction_nanos: u64 = 0;
        for (i, digit) in fraction.bytes().enumerate() {
            let place = 10u64.pow(u32::try_from(FRACTION_DIGITS - 1 - i).map_err(|_| malformed())?);
            fraction_nanos += u64::from(digit - b'0') * place;
        }
        whole_units
            .checked_mul(NANOS_PER_UNIT)
            .and_then(|n| n.checked_add(fraction_nanos))
            .map(Nanos)
            .ok_or_else(overflow)
    }

    pub fn checked_add(self, other: Nanos) -> Option<Nanos> {
        self.0.checked_add(other.0).map(Nanos)
    }

    #[must_use]
    pub fn saturating_add(self, other: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(other.0))
    }

    #[must_use]
    pub fn saturating_sub(self, other: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(other.0))
    }

    /// The database stores money as `BIGINT`; amounts past `i64::MAX` nano-units
    /// (9.2 billion currency units) are clamped rather than wrapped.
    pub fn to_db(self) -> i64 {
        i64::try_from(self.0).unwrap_or(i64::MAX)
    }

    /// Negative values cannot be written by the gateway; a hand-edited row reads as zero.
    pub fn from_db(value: i64) -> Nanos {
        Nanos(u64::try_from(value).unwrap_or(0))
    }
}

impl fmt::Display for Nanos {
    /// Exact decimal in currency units with trailing zeros trimmed: `0.00528`, `5`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / NANOS_PER_UNIT;
        let fraction = self.0 % NANOS_PER_UNIT;
        if fraction == 0 {
            return write!(f, "{whole}");
        }
        let digits = format!("{fraction:09}");
        write!(f, "{whole}.{}", digits.trim_end_matches('0'))
    }
}

impl Serialize for Nanos {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Read back from the decimal text it is written as.
impl<'de> serde::Deserialize<'de> for Nanos {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Nanos::parse_decimal(&text).map_err(serde::de::Error::custom)
    }
}

/// A price in nano-units per one million tokens (prices are quoted per 1M tokens).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PricePerMTok(Nanos);

impl PricePerMTok {
    pub fn parse_decimal(text: &str) -> Result<Self, MoneyError> {
        Nanos::parse_decimal(text).map(PricePerMTok)
    }

    pub const fn from_nanos(nanos: Nanos) -> Self {
        PricePerMTok(nanos)
    }

    pub const fn nanos_per_mtok(self) -> Nanos {
        self.0
    }
}

/// Sums `tokens × price` exactly and rounds up to whole nano-units once, at the end.
#[derive(Clone, Copy, Debug, Default)]
pub struct CostAccumulator {
    /// nano-units × tokens-per-million; u128 cannot overflow for any u64 × u64 term.
    scaled: u128,
}

impl CostAccumulator {
    pub fn add(&mut self, tokens: u64, price: PricePerMTok) -> &mut Self {
        let term = u128::from(tokens) * u128::from(price.0.0);
        self.scaled = self.scaled.saturating_add(term);
        self
    }

    pub fn total(&self) -> Nanos {
        let nanos = self.scaled.div_ceil(1_000_000);
        Nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_exact_decimals() {
        assert_eq!(Nanos::parse_decimal("2.0").unwrap(), Nanos(2_000_000_000));
        assert_eq!(Nanos::parse_decimal("0.04").unwrap(), Nanos(40_000_000));
        assert_eq!(Nanos::parse_decimal("5").unwrap(), Nanos(5_000_000_000));
        assert_eq!(Nanos::parse_decimal(".5").unwrap(), Nanos(500_000_000));
        assert_eq!(Nanos::parse_decimal("0.000000001").unwrap(), Nanos(1));
    }

    #[test]
    fn rejects_what_is_not_a_plain_decimal() {
        for bad in [
            "",
            ".",
            "1.",
            "-1",
            "1e3",
            "0.0000000001",
            "1,5",
            " 1",
            "abc",
        ] {
            assert!(
                Nanos::parse_decimal(bad).is_err(),
                "{bad:?} should be refused"
            );
        }
        assert!(matches!(
            Nanos::parse_decimal("99999999999999999999"),
            Err(MoneyError::Overflow(_))
        ));
    }

    #[test]
    fn formats_with_trailing_zeros_trimmed() {
        assert_eq!(Nanos(5_280_000).to_string(), "0.00528");
        assert_eq!(Nanos(5_000_000_000).to_string(), "5");
        assert_eq!(Nanos(0).to_string(), "0");
        assert_eq!(Nanos(1).to_string(), "0.000000001");
    }

    #[test]
    fn cost_of_3000_prompt_2000_cached_400_completion_is_exactly_0_00528() {
        let input = PricePerMTok::parse_decimal("2").unwrap();
        let cached = PricePerMTok::parse_decimal("0.04").unwrap();
        let output = PricePerMTok::parse_decimal("8").unwrap();
        let mut cost = CostAccumulator::default();
        cost.add(1000, input).add(2000, cached).add(400, output);
        assert_eq!(cost.total().to_string(), "0.00528");
    }

    #[test]
    fn a_fraction_of_a_nano_rounds_up_once() {
        let price = PricePerMTok::parse_decimal("0.000000001").unwrap();
        let mut cost = CostAccumulator::default();
        cost.add(1, price).add(1, price);
        assert_eq!(cost.total(), Nanos(1));
    }
}
