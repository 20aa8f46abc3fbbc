//! Command-line flags of the standalone fake upstream and their conversion to `FakeConfig`.
//! Decimals stay strings on the command line and are parsed here into fixed-point integers so
//! the rest of the module never needs floats for configuration.

use std::net::SocketAddr;

use crate::model_string::is_error_status;
use crate::{FakeConfig, FakeError, Latency};

/// Flags of the `fake-upstream` subcommand.
#[derive(clap::Args, Debug, Clone)]
pub struct FakeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9100")]
    pub listen: SocketAddr,
    /// Latency added to every chat request, in milliseconds (the median when sigma > 0).
    #[arg(long, default_value_t = 0)]
    pub latency_ms: u64,
    /// 0 = fixed latency; > 0 = lognormal latency with this sigma around the median.
    #[arg(long, default_value = "0")]
    pub latency_sigma: String,
    /// Probability (0..1) of answering a chat request with a random 503.
    #[arg(long, default_value = "0")]
    pub error_rate: String,
    /// Force this HTTP status (400..=599) on every chat request.
    #[arg(long)]
    pub status: Option<u16>,
    /// Answer every model as `agent` does: a tool call while tools are offered, then text.
    #[arg(long)]
    pub agent: bool,
    /// Seed of the latency and error draws: the same seed gives the same sequence of draws.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Also serve HTTPS here, HTTP/2 or HTTP/1.1 by ALPN as providers do, with a certificate
    /// for 127.0.0.1 and localhost signed by an authority made at start (needs `--tls-ca`).
    #[arg(long, requires = "tls_ca")]
    pub tls_listen: Option<SocketAddr>,
    /// Where to write that authority's certificate (PEM), for clients to trust.
    #[arg(long, requires = "tls_listen")]
    pub tls_ca: Option<std::path::PathBuf>,
}

const PPM_DIGITS: u32 = 6;
const MILLI_DIGITS: u32 = 3;
const ONE_MILLION: u64 = 1_000_000;

impl FakeArgs {
    pub fn to_config(&self) -> Result<FakeConfig, FakeError> {
        let error_rate_ppm = parse_fixed_point(&self.error_rate, PPM_DIGITS)
            .filter(|ppm| *ppm <= ONE_MILLION)
            .and_then(|ppm| u32::try_from(ppm).ok())
            .ok_or_else(|| FakeError::ErrorRate {
                value: self.error_rate.clone(),
            })?;
        let sigma_milli = parse_fixed_point(&self.latency_sigma, MILLI_DIGITS)
            .and_then(|milli| u32::try_from(milli).ok())
            .ok_or_else(|| FakeError::LatencySigma {
                value: self.latency_sigma.clone(),
            })?;
        if let Some(status) = self.status
            && !is_error_status(status)
        {
            return Err(FakeError::Status { status });
        }
        let latency = match (self.latency_ms, sigma_milli) {
            (0, _) => Latency::None,
            (ms, 0) => Latency::Fixed { ms },
            (median_ms, sigma_milli) => Latency::LogNormal {
                median_ms,
                sigma_milli,
            },
        };
        Ok(FakeConfig {
            latency,
            error_rate_ppm,
            forced_status: self.status,
            agent: self.agent,
            seed: self.seed,
        })
    }
}

/// Parses a non-negative decimal such as `0.25`, `1` or `.5` into `value × 10^digits`.
/// Fraction digits beyond `digits` are truncated: they are below the precision we act on.
fn parse_fixed_point(text: &str, digits: u32) -> Option<u64> {
    let text = text.trim();
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let all_digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !all_digits(whole) || !all_digits(fraction) {
        return None;
    }
    let scale = 10_u64.checked_pow(digits)?;
    let whole_value = if whole.is_empty() {
        0
    } else {
        whole.parse::<u64>().ok()?
    };
    let mut fraction_value = 0_u64;
    let mut place = scale;
    for byte in fraction.bytes() {
        place /= 10;
        if place == 0 {
            break;
        }
        fraction_value += u64::from(byte - b'0') * place;
    }
    whole_value.checked_mul(scale)?.checked_add(fraction_value)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: FakeArgs,
    }

    fn parse(argv: &[&str]) -> FakeArgs {
        Cli::try_parse_from(std::iter::once("fake").chain(argv.iter().copied()))
            .unwrap()
            .args
    }

    #[test]
    fn defaults_are_a_quiet_loopback_fake() {
        let args = parse(&[]);
        assert_eq!(args.listen, "127.0.0.1:9100".parse().unwrap());
        assert_eq!(args.to_config().unwrap(), FakeConfig::default());
    }

    #[test]
    fn flags_map_to_config() {
        let args = parse(&[
            "--listen",
            "127.0.0.1:0",
            "--latency-ms",
            "40",
            "--latency-sigma",
            "0.5",
            "--error-rate",
            "0.01",
            "--status",
            "429",
            "--agent",
            "--seed",
            "7",
        ]);
        let config = args.to_config().unwrap();
        assert_eq!(
            config.latency,
            Latency::LogNormal {
                median_ms: 40,
                sigma_milli: 500
            }
        );
        assert_eq!(config.error_rate_ppm, 10_000);
        assert_eq!(config.forced_status, Some(429));
        assert!(config.agent);
        assert_eq!(config.seed, Some(7));
    }

    #[test]
    fn zero_sigma_means_fixed_latency() {
        let config = parse(&["--latency-ms", "25"]).to_config().unwrap();
        assert_eq!(config.latency, Latency::Fixed { ms: 25 });
        let config = parse(&["--latency-sigma", "1.2"]).to_config().unwrap();
        assert_eq!(config.latency, Latency::None);
    }

    #[test]
    fn rejects_bad_values() {
        for rate in ["1.01", "2", "-0.1", "abc", "", ".", "0.5.1", "1e-3"] {
            // `=` keeps clap from reading "-0.1" as a flag.
            let err = parse(&[&format!("--error-rate={rate}")])
                .to_config()
                .unwrap_err();
            assert!(matches!(err, FakeError::ErrorRate { .. }), "{rate}: {err}");
        }
        let err = parse(&["--latency-sigma=-1"]).to_config().unwrap_err();
        assert!(matches!(err, FakeError::LatencySigma { .. }));
        let err = parse(&["--status", "200"]).to_config().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid --status 200: expected an http status between 400 and 599"
        );
    }

    #[test]
    fn fixed_point_parsing() {
        assert_eq!(parse_fixed_point("1", 6), Some(1_000_000));
        assert_eq!(parse_fixed_point(" 0.25 ", 6), Some(250_000));
        assert_eq!(parse_fixed_point(".5", 3), Some(500));
        assert_eq!(parse_fixed_point("2.", 3), Some(2_000));
        assert_eq!(parse_fixed_point("0.0000019", 6), Some(1));
        assert_eq!(parse_fixed_point("1.2345", 3), Some(1_234));
        assert_eq!(parse_fixed_point("99999999999999999999", 3), None);
        assert_eq!(parse_fixed_point("+1", 3), None);
    }
}
