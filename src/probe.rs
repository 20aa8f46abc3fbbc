//! The client side of `/readyz`: `tollgate healthcheck` asks it, so container
//! `HEALTHCHECK`s and exec probes work in an image that has no curl. Ready
//! means a 200 answer; anything else, or no answer in time, is not ready.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use anyhow::{Result, bail};

use crate::config::ServerConfig;

/// Where a process on the same host reaches `/readyz`: the admin listener
/// when there is one (it serves `/readyz` alone), else the API listener.
pub fn readyz_url(server: &ServerConfig) -> String {
    let bound = server.admin_listen.unwrap_or(server.listen);
    // A wildcard address is what the server binds, not an address to call.
    let ip = match bound.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}/readyz", SocketAddr::new(ip, bound.port()))
}

/// `Ok` iff `url` answers 200 within `timeout`; the error says what it got.
pub async fn check(url: &str, timeout: Duration) -> Result<()> {
    let client = awc::Client::builder().timeout(timeout).finish();
    let response = match client.get(url).send().await {
        Ok(response) => response,
        Err(error) => bail!("{url}: no answer ({error})"),
    };
    let status = response.status();
    if status != awc::http::StatusCode::OK {
        bail!("{url} answered {status}: not ready");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(listen: &str, admin: Option<&str>) -> ServerConfig {
        ServerConfig {
            listen: listen.parse().unwrap(),
            admin_listen: admin.map(|a| a.parse().unwrap()),
            ..ServerConfig::default()
        }
    }

    #[test]
    fn asks_the_admin_listener_when_there_is_one_and_never_a_wildcard() {
        assert_eq!(
            readyz_url(&server("127.0.0.1:8080", None)),
            "http://127.0.0.1:8080/readyz"
        );
        assert_eq!(
            readyz_url(&server("0.0.0.0:8080", Some("0.0.0.0:9091"))),
            "http://127.0.0.1:9091/readyz"
        );
        assert_eq!(
            readyz_url(&server("[::]:8080", None)),
            "http://[::1]:8080/readyz"
        );
        assert_eq!(
            readyz_url(&server("0.0.0.0:8080", Some("10.0.0.5:9091"))),
            "http://10.0.0.5:9091/readyz"
        );
    }
}
