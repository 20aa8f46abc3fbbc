//! The grammar every fake's scenario shares: a `model` string is `+`-separated segments, each a
//! name, a name and a number (`status-429`, `words-7`), or a name and milliseconds
//! (`delay-20ms`). Numbers are strict decimals so that a real model name (`gpt-4o-mini`) never
//! reads as a scenario; what each fake does with a segment is its own.

/// Upper bound on any delay a scenario asks for, so a typo in a model string or a heavy
/// lognormal tail cannot hold a connection open for hours.
pub(crate) const MAX_DELAY_MS: u64 = 600_000;

/// The segments of a `model` string, trimmed.
pub(crate) fn segments(model: &str) -> impl Iterator<Item = &str> {
    model.split('+').map(str::trim)
}

/// Strict decimal: `u64::from_str` would also accept a leading `+`.
pub(crate) fn number(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// The milliseconds of a `…-Nms` value (`20ms`), capped at `MAX_DELAY_MS`.
pub(crate) fn millis(text: &str) -> Option<u64> {
    text.strip_suffix("ms")
        .and_then(number)
        .map(|ms| ms.min(MAX_DELAY_MS))
}

/// The status of a `status-NNN` value, if it is one a fake may inject.
pub(crate) fn error_status(text: &str) -> Option<u16> {
    number(text)
        .and_then(|n| u16::try_from(n).ok())
        .filter(|status| is_error_status(*status))
}

/// Only error statuses can be injected: a 1xx/2xx/3xx "failure" would confuse HTTP clients.
pub(crate) fn is_error_status(status: u16) -> bool {
    (400..=599).contains(&status)
}

/// Exactly `N` dash-separated numbers (`usage-10-20-30-5`'s `10-20-30-5` for `N = 4`).
pub(crate) fn numbers<const N: usize>(text: &str) -> Option<[u64; N]> {
    let counts: Option<Vec<u64>> = text.split('-').map(number).collect();
    counts.and_then(|counts| <[u64; N]>::try_from(counts).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_strict_decimals() {
        assert_eq!(number("42"), Some(42));
        for bad in ["", "+3", "-1", "4x", " 4", "99999999999999999999"] {
            assert_eq!(number(bad), None, "{bad:?}");
        }
        assert_eq!(millis("20ms"), Some(20));
        assert_eq!(millis("20"), None);
        assert_eq!(millis("99999999999ms"), Some(MAX_DELAY_MS));
        assert_eq!(error_status("503"), Some(503));
        assert_eq!(error_status("200"), None);
        assert_eq!(numbers::<3>("1-2-3"), Some([1, 2, 3]));
        assert_eq!(numbers::<3>("1-2"), None);
        assert_eq!(numbers::<3>("1--3"), None);
        assert_eq!(numbers::<4>("1-2-3-4-5"), None);
        let all: Vec<&str> = segments(" a + b-1 ").collect();
        assert_eq!(all, ["a", "b-1"]);
    }
}
