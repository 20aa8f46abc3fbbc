//! `[server]`: where the gateway listens and how long requests may take.

use std::net::SocketAddr;

use serde::Deserialize;

use super::errors::Problems;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// A second listener for operations: when set, `/metrics`, `/readyz` and
    /// `/admin/v1/*` are served only there (and `/healthz` on both), so the
    /// API port can face callers while operations stay on an internal address.
    #[serde(deserialize_with = "admin_listen")]
    pub admin_listen: Option<SocketAddr>,
    /// Worker threads; 0 means one per core.
    pub workers: usize,
    pub body_limit_bytes: usize,
    /// How long in-flight requests may take to finish after SIGTERM; unset:
    /// the longest call the gateway waits for, and its settle (see
    /// `Config::shutdown_grace`).
    pub shutdown_grace_ms: Option<u64>,
    /// The whole request's deadline; reservations expire this long (plus a margin) after admission.
    pub request_timeout_ms: u64,
    /// Tenant actors are spread over this many arbiters (threads) of their
    /// own; 0 (the default) runs each on the worker that serves its tenant's
    /// first request, so that worker's requests reach it without waking
    /// another thread (a quarter more requests per second at full load).
    pub tenant_arbiters: usize,
    /// Streams read on after their caller left, at most this many at once (beyond: cancel).
    pub max_concurrent_drains: usize,
}

/// Parsed here rather than by `SocketAddr`'s own impl, whose error names
/// neither the setting nor the expected form.
fn admin_listen<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<SocketAddr>, D::Error> {
    let value = toml::Value::deserialize(deserializer)?;
    value
        .as_str()
        .and_then(|text| text.parse().ok())
        .map(Some)
        .ok_or_else(|| {
            serde::de::Error::custom(format!(
                "server.admin_listen: {value} is not an IP address and port (e.g. \"127.0.0.1:9091\")"
            ))
        })
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin_listen: None,
            workers: 0,
            body_limit_bytes: 4 * 1024 * 1024,
            shutdown_grace_ms: None,
            request_timeout_ms: 120_000,
            tenant_arbiters: 0,
            max_concurrent_drains: 256,
        }
    }
}

impl ServerConfig {
    pub(super) fn check(&self, problems: &mut Problems) {
        if let Some(admin) = self.admin_listen {
            // Port 0 picks a free port for each, so only a fixed port can clash.
            if admin == self.listen && admin.port() != 0 {
                problems.add(
                    "server.admin_listen",
                    format!("must differ from server.listen ({admin})"),
                );
            }
        }
    }
}
