//! The Messages fake's scenarios, read from the request's `model` string.

use crate::model_string::{self, number};

/// What a `model` string such as `claude+usage-10-20-30-5+tool` asks for. Unknown segments are
/// ignored so real model names pass through; later segments override earlier ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Scenario {
    pub status: Option<u16>,
    pub delay_ms: u64,
    /// `[input, cache_creation, cache_read, output]` tokens.
    pub usage: Option<[u64; 4]>,
    pub tool: bool,
    /// A reply of this many words, ignoring `max_tokens`.
    pub words: Option<u64>,
    /// Web searches to run where a search tool is offered, up to its `max_uses`.
    pub searches: u64,
    /// `agent`: answers play a model in a tool loop.
    pub agent: bool,
    /// `thinks-N`: where the request's thinking is `display: "omitted"`, N
    /// tokens of thinking, billed and streamed only as estimates.
    pub thinks: u64,
}

impl Scenario {
    pub fn parse(model: &str) -> Self {
        let mut scenario = Self::default();
        for segment in model_string::segments(model) {
            if segment == "tool" {
                scenario.tool = true;
            } else if segment == "agent" {
                scenario.agent = true;
            } else if let Some(rest) = segment.strip_prefix("status-") {
                if let Some(status) = model_string::error_status(rest) {
                    scenario.status = Some(status);
                }
            } else if let Some(rest) = segment.strip_prefix("delay-") {
                if let Some(ms) = model_string::millis(rest) {
                    scenario.delay_ms = ms;
                }
            } else if let Some(rest) = segment.strip_prefix("words-") {
                scenario.words = number(rest).map(|n| n.min(100_000));
            } else if let Some(rest) = segment.strip_prefix("searches-") {
                scenario.searches = number(rest).map_or(0, |n| n.min(1_000));
            } else if let Some(rest) = segment.strip_prefix("thinks-") {
                scenario.thinks = number(rest).map_or(0, |n| n.min(1_000_000));
            } else if let Some(rest) = segment.strip_prefix("usage-")
                && let Some(counts) = model_string::numbers(rest)
            {
                scenario.usage = Some(counts);
            }
        }
        scenario
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_string::MAX_DELAY_MS;

    #[test]
    fn parses_scenarios() {
        assert_eq!(Scenario::parse("claude-sonnet-4-5"), Scenario::default());
        assert_eq!(
            Scenario::parse(
                "claude+status-529+delay-20ms+usage-1-2-3-4+tool+words-7+searches-3+agent+thinks-9"
            ),
            Scenario {
                status: Some(529),
                delay_ms: 20,
                usage: Some([1, 2, 3, 4]),
                tool: true,
                words: Some(7),
                searches: 3,
                agent: true,
                thinks: 9,
            }
        );
        for ignored in [
            "status-200",
            "status-x",
            "delay-5",
            "usage-1-2-3",
            "usage-1-2-3-4-5",
            "usage-a-b-c-d",
        ] {
            assert_eq!(Scenario::parse(ignored), Scenario::default(), "{ignored}");
        }
        assert_eq!(
            Scenario::parse("delay-99999999999ms").delay_ms,
            MAX_DELAY_MS
        );
    }
}
