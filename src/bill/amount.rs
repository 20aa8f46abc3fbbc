//! A bill's amounts in nano-units, read from their decimal text: OpenAI's
//! `amount.value` is a JSON number (read from the document's own digits,
//! never through a float), Anthropic's `amount` a string of cents. Both may
//! carry more decimals than a nano-unit holds; those round to the nearest
//! nano-unit (halves away from zero), which is the ledger's resolution.

use std::fmt;

use serde::{Serialize, Serializer};

use crate::money::Nanos;

/// Digits of a mantissa read at most: 30 fit an `i128` with room to scale.
const MAX_DIGITS: usize = 30;

/// `text` (`12`, `-0.06`, `1.5e-3`) × 10^`shift` currency units, in nano-units.
pub fn decimal_nanos(text: &str, shift: i32) -> Result<i64, String> {
    let bad = || format!("`{text}` is not a decimal number");
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().map_err(|_| bad())?),
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{whole}{fraction}");
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let digits = digits.trim_start_matches('0');
    if digits.len() > MAX_DIGITS {
        return Err(format!("`{text}` has more digits than an amount can"));
    }
    let value: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| bad())?
    };
    let fraction_digits = i32::try_from(fraction.len()).map_err(|_| bad())?;
    let scale = exponent
        .checked_add(9)
        .and_then(|s| s.checked_add(shift))
        .and_then(|s| s.checked_sub(fraction_digits))
        .ok_or_else(bad)?;
    let too_large = || format!("`{text}` is too large an amount");
    let nanos = if scale >= 0 {
        let factor = 10i128
            .checked_pow(u32::try_from(scale).map_err(|_| too_large())?)
            .ok_or_else(too_large)?;
        value.checked_mul(factor).ok_or_else(too_large)?
    } else {
        let divisor = u32::try_from(-scale)
            .ok()
            .and_then(|s| 10i128.checked_pow(s));
        match divisor {
            Some(divisor) => (value + divisor / 2) / divisor,
            // Below any power of ten an i128 holds: nothing left of it.
            None => 0,
        }
    };
    let nanos = i64::try_from(nanos).map_err(|_| too_large())?;
    Ok(if negative { -nanos } else { nanos })
}

/// A signed amount in nano-units: a bill's line (credits are negative) or a
/// difference; written as a decimal with its sign, like the amounts beside it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Signed(pub i64);

impl Signed {
    pub fn of(nanos: Nanos) -> Signed {
        Signed(nanos.to_db())
    }
}

impl fmt::Display for Signed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        write!(f, "{sign}{}", Nanos::new(self.0.unsigned_abs()))
    }
}

impl Serialize for Signed {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_and_cents_are_read_to_the_nano_unit_without_a_float() {
        assert_eq!(decimal_nanos("0.06", 0), Ok(60_000_000));
        assert_eq!(decimal_nanos("1.1", 0), Ok(1_100_000_000));
        assert_eq!(decimal_nanos("-0.01", 0), Ok(-10_000_000));
        assert_eq!(decimal_nanos("1.5e-3", 0), Ok(1_500_000));
        assert_eq!(decimal_nanos("2E2", 0), Ok(200_000_000_000));
        // Cents: "123.45" is $1.2345.
        assert_eq!(decimal_nanos("123.45", -2), Ok(1_234_500_000));
        assert_eq!(decimal_nanos("0.0000001", -2), Ok(1));
        // 0.1 + 0.2 as a float is not 0.3; its text is.
        assert_eq!(decimal_nanos("0.30000000000000004", 0), Ok(300_000_000));
        assert_eq!(decimal_nanos("0.0000000015", 0), Ok(2));
        assert_eq!(decimal_nanos("0.0000000014", 0), Ok(1));
        // Seventeen significant digits: a float would lose the last ones.
        assert_eq!(
            decimal_nanos("12345678.123456789", 0),
            Ok(12_345_678_123_456_789)
        );
    }

    #[test]
    fn what_is_not_an_amount_is_named() {
        for text in ["", "abc", "1.2.3", "--1", "1e", "0x10", "1,5"] {
            let error = decimal_nanos(text, 0).unwrap_err();
            assert!(error.contains(&format!("`{text}`")), "{error}");
        }
        assert!(decimal_nanos("1e30", 0).unwrap_err().contains("too large"));
    }

    #[test]
    fn a_signed_amount_reads_as_a_decimal() {
        assert_eq!(Signed(-1_500_000_000).to_string(), "-1.5");
        assert_eq!(Signed(60_000_000).to_string(), "0.06");
    }
}
