//! The scenario language carried in a request's `model` string, and everything derived from it:
//! which failure (if any) to answer with, how long to wait, and the `usage` block to report.
//! Pure functions only, so the rules are unit-testable without a server.

use std::sync::Mutex;

use rand::Rng;
use rand::rngs::StdRng;
use serde_json::{Value, json};

use crate::model_string::{self, MAX_DELAY_MS, number};
use crate::{FakeConfig, Latency};
const DEFAULT_COMPLETION_TOKENS: u64 = 12;
const TOKENS_PER_MESSAGE: u64 = 4;
const BYTES_PER_TOKEN: u64 = 4;
const DEFAULT_RETRY_AFTER_SECS: u64 = 1;
const PPM_SCALE: u32 = 1_000_000;

/// What a `model` string such as `status-503+delay-20ms` asks for. Later segments override
/// earlier ones of the same kind; unknown segments are ignored so real model names pass through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Scenario {
    pub status: Option<u16>,
    pub retry_after_secs: Option<u64>,
    pub delay_ms: u64,
    /// The first `flaky` requests for this exact model string fail; 0 disables.
    pub flaky: u64,
    pub usage: UsageMode,
    /// `tool`: a complete answer calls the request's first tool.
    pub tool: bool,
    /// `agent`: answers play a model in a tool loop (`agent.rs`).
    pub agent: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum UsageMode {
    /// Estimated from the request itself.
    #[default]
    Estimate,
    OpenAi {
        prompt: u64,
        cached: u64,
        completion: u64,
    },
    DeepSeek {
        prompt: u64,
        cached: u64,
        completion: u64,
    },
    /// Completion tokens equal the request's token limit.
    MaxTokens,
    Omitted,
}

impl Scenario {
    pub fn parse(model: &str) -> Self {
        let mut scenario = Self::default();
        for segment in model_string::segments(model) {
            scenario.apply(segment);
        }
        scenario
    }

    fn apply(&mut self, segment: &str) {
        match segment {
            "usage-max" => self.usage = UsageMode::MaxTokens,
            "no-usage" => self.usage = UsageMode::Omitted,
            "tool" => self.tool = true,
            "agent" => self.agent = true,
            _ => {
                if let Some(rest) = segment.strip_prefix("status-") {
                    if let Some(status) = model_string::error_status(rest) {
                        self.status = Some(status);
                    }
                } else if let Some(rest) = segment.strip_prefix("retry-after-") {
                    if let Some(secs) = number(rest) {
                        self.retry_after_secs = Some(secs);
                    }
                } else if let Some(rest) = segment.strip_prefix("delay-") {
                    if let Some(ms) = model_string::millis(rest) {
                        self.delay_ms = ms;
                    }
                } else if let Some(rest) = segment.strip_prefix("flaky-") {
                    if let Some(count) = number(rest) {
                        self.flaky = count;
                    }
                } else if let Some(rest) = segment.strip_prefix("usage-") {
                    if let Some([prompt, cached, completion]) = model_string::numbers(rest) {
                        self.usage = UsageMode::OpenAi {
                            prompt,
                            cached,
                            completion,
                        };
                    }
                } else if let Some(rest) = segment.strip_prefix("deepseek-")
                    && let Some([prompt, cached, completion]) = model_string::numbers(rest)
                {
                    self.usage = UsageMode::DeepSeek {
                        prompt,
                        cached,
                        completion,
                    };
                }
            }
        }
    }
}

/// A failure to answer with instead of a completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub status: u16,
    pub message: String,
    pub retry_after_secs: Option<u64>,
}

/// Picks the failure for a request, most deliberate first: the instance's forced status, the
/// model's `status-…`, its `flaky-…` warm-up, then the random error rate.
/// `model_ordinal` is this request's 1-based position among requests for the same model.
pub(crate) fn failure(
    config: &FakeConfig,
    scenario: &Scenario,
    model: &str,
    model_ordinal: u64,
    random_error: bool,
) -> Option<Failure> {
    let (status, message) = if let Some(status) = config.forced_status {
        (
            status,
            format!("fake upstream: status {status} is forced on every request"),
        )
    } else if let Some(status) = scenario.status {
        (
            status,
            format!("fake upstream scenario: status-{status} requested by model {model:?}"),
        )
    } else if model_ordinal <= scenario.flaky {
        let flaky = scenario.flaky;
        let message = format!(
            "fake upstream scenario: flaky-{flaky}, request {model_ordinal} for model {model:?} \
             fails"
        );
        (503, message)
    } else if random_error {
        (503, "fake upstream: injected random error".to_owned())
    } else {
        return None;
    };
    let retry_after_secs = (status == 429).then(|| {
        scenario
            .retry_after_secs
            .unwrap_or(DEFAULT_RETRY_AFTER_SECS)
    });
    Some(Failure {
        status,
        message,
        retry_after_secs,
    })
}

/// OpenAI's `error.type` closest to the status, so clients classifying errors behave as they
/// would against the real API.
pub(crate) fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        500..=599 => "server_error",
        _ => "invalid_request_error",
    }
}

/// This request's injected faults: whether it fails at random, and how long it waits in all
/// (its `delay-…` and the instance's latency, within `MAX_DELAY_MS`). `seeded`: the instance's
/// seeded draws, else the thread's random ones.
pub(crate) fn roll(
    config: &FakeConfig,
    scenario: &Scenario,
    seeded: Option<&Mutex<StdRng>>,
) -> (bool, u64) {
    let (random_error, latency_ms) = match seeded.map(Mutex::lock) {
        Some(Ok(mut rng)) => draw(config, &mut *rng),
        // A poisoned lock only means another worker panicked mid-draw: its state is still a state.
        Some(Err(poisoned)) => draw(config, &mut *poisoned.into_inner()),
        None => draw(config, &mut rand::rng()),
    };
    let delay_ms = scenario
        .delay_ms
        .saturating_add(latency_ms)
        .min(MAX_DELAY_MS);
    (random_error, delay_ms)
}

/// Whether the request fails at random, and the instance's latency for it.
fn draw(config: &FakeConfig, rng: &mut impl Rng) -> (bool, u64) {
    let random_error = roll_random_error(config.error_rate_ppm, rng);
    (random_error, sample_latency_ms(config.latency, rng))
}

fn roll_random_error(error_rate_ppm: u32, rng: &mut impl Rng) -> bool {
    error_rate_ppm > 0 && rng.random_range(0..PPM_SCALE) < error_rate_ppm
}

fn sample_latency_ms(latency: Latency, rng: &mut impl Rng) -> u64 {
    match latency {
        Latency::None => 0,
        Latency::Fixed { ms } => ms,
        Latency::LogNormal {
            median_ms,
            sigma_milli,
        } => lognormal_ms(median_ms, sigma_milli, rng.random(), rng.random()),
    }
}

/// Box–Muller on two uniforms in `[0, 1)`; `f64 as u64` saturates (and maps NaN to 0), which is
/// exactly the clamping wanted for absurd sigmas.
#[expect(
    clippy::float_arithmetic,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "lognormal sampling needs floats; the result is clamped by the saturating cast"
)]
fn lognormal_ms(median_ms: u64, sigma_milli: u32, uniform_a: f64, uniform_b: f64) -> u64 {
    // 1 - a lies in (0, 1], so the logarithm is finite.
    let normal = (-2.0 * (1.0 - uniform_a).ln()).sqrt() * (std::f64::consts::TAU * uniform_b).cos();
    let sigma = f64::from(sigma_milli) / 1000.0;
    (median_ms as f64 * (sigma * normal).exp()).round() as u64
}

/// The `usage` block for a successful answer, or `None` when the scenario omits it.
pub(crate) fn usage(mode: UsageMode, request: &Value) -> Option<Value> {
    let max_tokens = requested_max_tokens(request);
    match mode {
        UsageMode::Estimate => {
            let completion = max_tokens.map_or(DEFAULT_COMPLETION_TOKENS, |max| {
                max.min(DEFAULT_COMPLETION_TOKENS)
            });
            Some(openai_usage(estimate_prompt_tokens(request), 0, completion))
        }
        UsageMode::MaxTokens => Some(openai_usage(
            estimate_prompt_tokens(request),
            0,
            max_tokens.unwrap_or(DEFAULT_COMPLETION_TOKENS),
        )),
        UsageMode::OpenAi {
            prompt,
            cached,
            completion,
        } => Some(openai_usage(prompt, cached, completion)),
        UsageMode::DeepSeek {
            prompt,
            cached,
            completion,
        } => Some(json!({
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt.saturating_add(completion),
            "prompt_cache_hit_tokens": cached,
            "prompt_cache_miss_tokens": prompt.saturating_sub(cached),
        })),
        UsageMode::Omitted => None,
    }
}

fn openai_usage(prompt: u64, cached: u64, completion: u64) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt.saturating_add(completion),
        "prompt_tokens_details": { "cached_tokens": cached },
    })
}

fn requested_max_tokens(request: &Value) -> Option<u64> {
    request
        .get("max_tokens")
        .and_then(Value::as_u64)
        .or_else(|| request.get("max_completion_tokens").and_then(Value::as_u64))
}

/// A deliberately crude tokenizer stand-in (4 bytes per token plus a per-message overhead): the
/// gateway's own estimate must not be able to rely on matching it exactly.
fn estimate_prompt_tokens(request: &Value) -> u64 {
    let Some(messages) = request.get("messages").and_then(Value::as_array) else {
        return 0;
    };
    let text_bytes: usize = messages
        .iter()
        .map(|message| match message.get("content") {
            Some(Value::String(text)) => text.len(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .map(str::len)
                .sum(),
            _ => 0,
        })
        .fold(0, usize::saturating_add);
    let text_bytes = u64::try_from(text_bytes).unwrap_or(u64::MAX);
    let message_count = u64::try_from(messages.len()).unwrap_or(u64::MAX);
    text_bytes
        .div_ceil(BYTES_PER_TOKEN)
        .saturating_add(message_count.saturating_mul(TOKENS_PER_MESSAGE))
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn plain_model_names_are_the_default_scenario() {
        assert_eq!(Scenario::parse(""), Scenario::default());
        assert_eq!(Scenario::parse("ok"), Scenario::default());
        assert_eq!(Scenario::parse("gpt-4o-mini"), Scenario::default());
    }

    #[test]
    fn parses_combined_segments() {
        let scenario =
            Scenario::parse("gpt-4o+status-429+retry-after-7+delay-20ms+flaky-2+tool+agent");
        assert_eq!(
            scenario,
            Scenario {
                status: Some(429),
                retry_after_secs: Some(7),
                delay_ms: 20,
                flaky: 2,
                usage: UsageMode::Estimate,
                tool: true,
                agent: true,
            }
        );
    }

    #[test]
    fn parses_usage_modes() {
        assert_eq!(
            Scenario::parse("usage-3000-2000-400").usage,
            UsageMode::OpenAi {
                prompt: 3000,
                cached: 2000,
                completion: 400
            }
        );
        assert_eq!(
            Scenario::parse("deepseek-10-4-5").usage,
            UsageMode::DeepSeek {
                prompt: 10,
                cached: 4,
                completion: 5
            }
        );
        assert_eq!(Scenario::parse("usage-max").usage, UsageMode::MaxTokens);
        assert_eq!(Scenario::parse("no-usage").usage, UsageMode::Omitted);
        assert_eq!(
            Scenario::parse("no-usage+usage-1-0-1").usage,
            openai(1, 0, 1)
        );
    }

    fn openai(prompt: u64, cached: u64, completion: u64) -> UsageMode {
        UsageMode::OpenAi {
            prompt,
            cached,
            completion,
        }
    }

    #[test]
    fn malformed_segments_are_ignored() {
        for model in [
            "status-",
            "status-abc",
            "status-200",
            "status-99999",
            "status-+503",
            "delay-20",
            "delay-ms",
            "delay--5ms",
            "flaky-x",
            "retry-after-",
            "usage-1-2",
            "usage-1-2-3-4",
            "usage-1--3",
            "deepseek-a-b-c",
            "usage-99999999999999999999-1-1",
            "+++",
            "status-503\u{0}",
        ] {
            assert_eq!(Scenario::parse(model), Scenario::default(), "{model:?}");
        }
    }

    #[test]
    fn failure_precedence() {
        let forced = FakeConfig {
            forced_status: Some(502),
            ..FakeConfig::default()
        };
        let status = Scenario::parse("status-404+flaky-5");
        let failure_of = |config: &FakeConfig, scenario: &Scenario, ordinal, random| {
            failure(config, scenario, "m", ordinal, random).map(|f| f.status)
        };
        assert_eq!(failure_of(&forced, &status, 1, true), Some(502));
        let plain = FakeConfig::default();
        assert_eq!(failure_of(&plain, &status, 1, true), Some(404));
        let flaky = Scenario::parse("flaky-2");
        assert_eq!(failure_of(&plain, &flaky, 1, false), Some(503));
        assert_eq!(failure_of(&plain, &flaky, 2, false), Some(503));
        assert_eq!(failure_of(&plain, &flaky, 3, false), None);
        assert_eq!(failure_of(&plain, &flaky, 3, true), Some(503));
        assert_eq!(failure_of(&plain, &Scenario::default(), 1, false), None);
    }

    #[test]
    fn retry_after_only_on_429() {
        let plain = FakeConfig::default();
        let default_retry = failure(&plain, &Scenario::parse("status-429"), "m", 1, false);
        assert_eq!(default_retry.unwrap().retry_after_secs, Some(1));
        let custom = failure(
            &plain,
            &Scenario::parse("status-429+retry-after-9"),
            "m",
            1,
            false,
        );
        assert_eq!(custom.unwrap().retry_after_secs, Some(9));
        let forced = FakeConfig {
            forced_status: Some(429),
            ..plain
        };
        let forced = failure(&forced, &Scenario::parse("retry-after-3"), "m", 1, false);
        assert_eq!(forced.unwrap().retry_after_secs, Some(3));
        let other = failure(
            &plain,
            &Scenario::parse("status-503+retry-after-9"),
            "m",
            1,
            false,
        );
        let other = other.unwrap();
        assert_eq!(other.retry_after_secs, None);
        assert!(other.message.contains("status-503"), "{}", other.message);
    }

    #[test]
    fn default_usage_estimates_from_messages() {
        let request = json!({
            "model": "ok",
            "messages": [
                {"role": "system", "content": "12345"},
                {"role": "user", "content": [
                    {"type": "text", "text": "abc"},
                    {"type": "image_url", "image_url": {"url": "http://127.0.0.1/x.png"}},
                ]},
                {"role": "assistant", "content": null},
            ],
        });
        // 8 text bytes -> 2 tokens, plus 4 per message.
        assert_eq!(
            usage(UsageMode::Estimate, &request),
            Some(json!({
                "prompt_tokens": 14,
                "completion_tokens": 12,
                "total_tokens": 26,
                "prompt_tokens_details": {"cached_tokens": 0},
            }))
        );
        let capped = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5});
        let capped = usage(UsageMode::Estimate, &capped).unwrap();
        assert_eq!(capped["prompt_tokens"], 5);
        assert_eq!(capped["completion_tokens"], 5);
        assert_eq!(capped["total_tokens"], 10);
    }

    #[test]
    fn default_usage_survives_odd_bodies() {
        for request in [
            json!(null),
            json!([]),
            json!({"messages": "x"}),
            json!({"messages": [1]}),
        ] {
            let usage = usage(UsageMode::Estimate, &request).unwrap();
            assert_eq!(usage["completion_tokens"], 12);
        }
    }

    #[test]
    fn explicit_usage_shapes() {
        assert_eq!(
            usage(openai(3000, 2000, 400), &json!({})),
            Some(json!({
                "prompt_tokens": 3000,
                "completion_tokens": 400,
                "total_tokens": 3400,
                "prompt_tokens_details": {"cached_tokens": 2000},
            }))
        );
        assert_eq!(
            usage(
                UsageMode::DeepSeek {
                    prompt: 100,
                    cached: 30,
                    completion: 7
                },
                &json!({})
            ),
            Some(json!({
                "prompt_tokens": 100,
                "completion_tokens": 7,
                "total_tokens": 107,
                "prompt_cache_hit_tokens": 30,
                "prompt_cache_miss_tokens": 70,
            }))
        );
        assert_eq!(usage(UsageMode::Omitted, &json!({})), None);
    }

    #[test]
    fn usage_max_reports_the_token_limit() {
        let request = json!({"messages": [], "max_completion_tokens": 777});
        assert_eq!(
            usage(UsageMode::MaxTokens, &request).unwrap()["completion_tokens"],
            777
        );
        let request = json!({"messages": [], "max_tokens": 50, "max_completion_tokens": 777});
        assert_eq!(
            usage(UsageMode::MaxTokens, &request).unwrap()["completion_tokens"],
            50
        );
        let request = json!({"messages": []});
        assert_eq!(
            usage(UsageMode::MaxTokens, &request).unwrap()["completion_tokens"],
            12
        );
    }

    #[test]
    fn latency_sampling() {
        let mut rng = StdRng::seed_from_u64(7);
        assert_eq!(sample_latency_ms(Latency::None, &mut rng), 0);
        assert_eq!(sample_latency_ms(Latency::Fixed { ms: 30 }, &mut rng), 30);
        // A zero normal draw lands exactly on the median.
        assert_eq!(lognormal_ms(100, 500, 0.0, 0.25), 100);
        assert_eq!(lognormal_ms(100, 0, 0.9, 0.0), 100);
        // Absurd inputs saturate rather than panic.
        assert_eq!(lognormal_ms(u64::MAX, u32::MAX, 0.999_999, 0.0), u64::MAX);
        let samples: Vec<u64> = (0..1000)
            .map(|_| {
                sample_latency_ms(
                    Latency::LogNormal {
                        median_ms: 100,
                        sigma_milli: 500,
                    },
                    &mut rng,
                )
            })
            .collect();
        let below = samples.iter().filter(|ms| **ms < 100).count();
        assert!(
            (400..600).contains(&below),
            "{below} of 1000 samples below the median"
        );
        assert!(samples.iter().any(|ms| *ms != 100));
    }

    #[test]
    fn random_errors_follow_the_rate() {
        let mut rng = StdRng::seed_from_u64(1);
        assert!(!(0..1000).any(|_| roll_random_error(0, &mut rng)));
        assert!((0..1000).all(|_| roll_random_error(PPM_SCALE, &mut rng)));
        let hits = (0..10_000)
            .filter(|_| roll_random_error(250_000, &mut rng))
            .count();
        assert!((2_000..3_000).contains(&hits), "{hits}");
    }

    #[test]
    fn seeded_rolls_repeat_in_arrival_order() {
        let config = FakeConfig {
            latency: Latency::LogNormal {
                median_ms: 1_500,
                sigma_milli: 500,
            },
            error_rate_ppm: 50_000,
            seed: Some(36),
            ..FakeConfig::default()
        };
        let rolls = |seed| {
            let rng = Mutex::new(StdRng::seed_from_u64(seed));
            (0..200)
                .map(|_| roll(&config, &Scenario::default(), Some(&rng)))
                .collect::<Vec<_>>()
        };
        let first = rolls(36);
        assert_eq!(first, rolls(36));
        assert_ne!(first, rolls(37));
        assert!(first.iter().any(|(error, _)| *error));
        assert!(first.iter().any(|(_, ms)| *ms != first[0].1));
    }
}
