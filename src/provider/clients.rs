//! The upstream HTTP clients of one worker. awc is `!Send`, so each worker
//! builds its own; the connect timeout and the trusted authorities belong to
//! awc's connector, so each distinct pair gets its own client (and connection
//! pool), made on first use so a reloaded configuration needs no rebuild.
//!
//! Over TLS the connector offers HTTP/2 first: a provider that speaks it
//! carries every concurrent call on a few connections instead of one each.
//! A relay whose caller reads slowly stops reading its stream upstream, and
//! what the provider sends meanwhile waits in that stream's window. The
//! connection's window is the largest HTTP/2 allows, room for 2,048 streams'
//! windows, so streams left unread cannot stall the other calls (other
//! tenants' among them) on their connection; each holds at most its own.

use std::cell::RefCell;
use std::time::Duration;

use crate::config::UpstreamTls;

/// Connections kept per client, across every upstream host it talks to.
const MAX_CONNECTIONS: usize = 4096;
const KEEP_ALIVE: Duration = Duration::from_secs(30);
/// What one HTTP/2 stream may receive unread: awc's default, so a large
/// answer (a batch of embeddings) from a distant provider is not slowed to
/// a small window per round trip; a stalled stream buffers no more than a
/// socket's receive buffer would over HTTP/1.1.
const STREAM_WINDOW: u32 = 1 << 20;
/// What one HTTP/2 connection may receive unread: the most HTTP/2 allows
/// (awc's default, 2 MiB, is two streams' windows).
const CONNECTION_WINDOW: u32 = (1 << 31) - 1;

/// A worker's clients, one per connector setting: few, so a scan finds one
/// without hashing certificates or copying a key on every call.
#[derive(Default)]
pub struct UpstreamClients {
    by_connector: RefCell<Vec<(u64, Option<UpstreamTls>, awc::Client)>>,
}

impl UpstreamClients {
    /// The worker's client for this connect timeout and these extra
    /// authorities (a cheap handle to a shared pool).
    pub fn get(&self, connect_timeout_ms: u64, tls: Option<&UpstreamTls>) -> awc::Client {
        let mut clients = self.by_connector.borrow_mut();
        let found = clients
            .iter()
            .find(|(timeout, extra, _)| *timeout == connect_timeout_ms && extra.as_ref() == tls);
        if let Some((_, _, client)) = found {
            return client.clone();
        }
        let client = build(connect_timeout_ms, tls);
        clients.push((connect_timeout_ms, tls.cloned(), client.clone()));
        client
    }
}

fn build(connect_timeout_ms: u64, tls: Option<&UpstreamTls>) -> awc::Client {
    let mut connector = awc::Connector::new()
        .limit(MAX_CONNECTIONS)
        .conn_keep_alive(KEEP_ALIVE)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .timeout(Duration::from_millis(connect_timeout_ms));
    if let Some(tls) = tls {
        connector = connector.rustls_0_23(tls.config.clone());
    }
    awc::Client::builder()
        .connector(connector)
        // Per-call timeouts are set on each request from the provider's settings.
        .disable_timeout()
        // A provider answers a POST where it was sent; following a
        // redirect would resend the key to whatever host it names.
        // Without the redirect layer awc also keeps no copy of each
        // request's headers while it waits for the answer.
        .disable_redirects()
        .finish()
}
