//! The HTTP plumbing every fake shares: binding and running an actix server (embedded in the
//! caller's actix System, or standalone until a signal), capturing each request before anything
//! can fail, and the delays and `retry-after` of injected failures.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::{Server, ServerHandle};
use actix_web::http::header;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use serde_json::Value;

use crate::stats::{CapturedRequest, FakeStats, Ordinals};
use crate::tls::FakeTls;

/// Far above any realistic prompt, so large-context tests (cached documents) are not cut off
/// by actix's 256 KiB default before the request is captured.
pub(crate) const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;
/// Slow scenarios (`delay-…`) should not keep a test waiting long on `stop`.
const SHUTDOWN_TIMEOUT_SECS: u64 = 1;

/// How one fake's server runs.
pub(crate) struct Launch {
    /// How logs and errors name the fake ("the fake upstream").
    pub name: &'static str,
    pub listen: SocketAddr,
    /// Worker threads, at least 1; `None`: actix's default (one per core).
    pub workers: Option<usize>,
    /// Standalone servers stop on SIGINT/SIGTERM; embedded ones leave signals to the caller.
    pub handle_signals: bool,
    /// Counts accepted connections, where the fake reports them.
    pub connections: Option<Arc<FakeStats>>,
    /// Also serves HTTPS here (HTTP/2 or HTTP/1.1 by ALPN), as a provider does.
    pub tls: Option<(SocketAddr, FakeTls)>,
}

/// A bound server, not yet polled, and the addresses it listens on.
pub(crate) struct Bound {
    pub server: Server,
    pub addr: SocketAddr,
    pub tls_addr: Option<SocketAddr>,
}

impl Launch {
    /// Binds `listen` (and the TLS address, if any; port 0 picks a free port) with `routes`.
    pub fn bind<F>(self, routes: F) -> io::Result<Bound>
    where
        F: Fn(&mut web::ServiceConfig) + Clone + Send + 'static,
    {
        if !self.listen.ip().is_loopback() {
            tracing::warn!(listen = %self.listen, "{} bound to a non-loopback address", self.name);
        }
        let connections = self.connections;
        let mut server = HttpServer::new(move || App::new().configure(routes.clone()))
            .on_connect(move |_, _| {
                if let Some(stats) = &connections {
                    stats.connection_accepted();
                }
            })
            .shutdown_timeout(SHUTDOWN_TIMEOUT_SECS);
        if let Some(workers) = self.workers {
            server = server.workers(workers.max(1));
        }
        if !self.handle_signals {
            server = server.disable_signals();
        }
        let mut server = server.bind(self.listen)?;
        if let Some((tls_listen, tls)) = &self.tls {
            server = server.bind_rustls_0_23(tls_listen, tls.server_config())?;
        }
        let addrs = server.addrs();
        let addr = addrs
            .first()
            .copied()
            .ok_or_else(|| io::Error::other(format!("{} bound no address", self.name)))?;
        let tls_addr = self.tls.as_ref().and(addrs.get(1).copied());
        Ok(Bound {
            server: server.run(),
            addr,
            tls_addr,
        })
    }

    /// `bind`, then runs the server on the current actix System and returns at once.
    pub fn spawn<F>(self, routes: F) -> io::Result<Spawned>
    where
        F: Fn(&mut web::ServiceConfig) + Clone + Send + 'static,
    {
        // `actix_rt::spawn` panics outside an actix System; report that as an error instead.
        if actix_rt::Arbiter::try_current().is_none() {
            return Err(io::Error::other(format!(
                "{} must be started from within an actix system",
                self.name
            )));
        }
        let bound = self.bind(routes)?;
        let handle = bound.server.handle();
        actix_rt::spawn(bound.server);
        Ok(Spawned {
            addr: bound.addr,
            tls_addr: bound.tls_addr,
            handle,
        })
    }
}

/// A fake's server running inside the current actix System.
pub(crate) struct Spawned {
    pub addr: SocketAddr,
    pub tls_addr: Option<SocketAddr>,
    handle: ServerHandle,
}

impl Spawned {
    /// Base URL without a trailing slash, e.g. `http://127.0.0.1:41234`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, lets in-flight requests finish (bounded by a short timeout) and waits.
    pub async fn stop(self) {
        self.handle.stop(true).await;
    }
}

/// A request as a fake received it, recorded before anything could fail, so tests can inspect
/// what a rejected request carried.
pub(crate) struct Received {
    /// The JSON body, or why it is not JSON.
    pub request: Result<Value, serde_json::Error>,
    /// The body's `model` string, if it has one.
    pub model: Option<String>,
    pub ordinals: Ordinals,
}

impl Received {
    pub fn record(req: &HttpRequest, body: &[u8], stats: &FakeStats) -> Received {
        let request = serde_json::from_slice::<Value>(body);
        let model = request
            .as_ref()
            .ok()
            .and_then(|request| request.get("model"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let captured_body = match &request {
            Ok(request) => request.clone(),
            Err(_) => Value::String(String::from_utf8_lossy(body).into_owned()),
        };
        let captured = CapturedRequest {
            path: req.path().to_owned(),
            headers: headers(req),
            body: captured_body,
        };
        if req.version() == actix_web::http::Version::HTTP_2 {
            stats.http2_request();
        }
        let ordinals = stats.record(captured, model.as_deref());
        Received {
            request,
            model,
            ordinals,
        }
    }
}

fn headers(req: &HttpRequest) -> Vec<(String, String)> {
    // `HeaderName` is already lower-case; sorting makes captures comparable across runs
    // because the header map iterates in hash order.
    let mut headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    headers.sort_by(|(a, _), (b, _)| a.cmp(b));
    headers
}

/// Waits `ms` milliseconds (not at all for 0).
pub(crate) async fn sleep_ms(ms: u64) {
    if ms > 0 {
        actix_rt::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// Adds `retry-after: secs` to an injected failure.
pub(crate) fn retry_after(response: &mut HttpResponse, secs: u64) {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
}
