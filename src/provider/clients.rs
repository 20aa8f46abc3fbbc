//! The upstream HTTP clients of one worker. awc is `!Send`, so each worker
//! builds its own; the connect timeout belongs to awc's connector, so each
//! distinct `connect_timeout_ms` gets its own client (and connection pool),
//! made on first use so a reloaded configuration needs no rebuild.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;

/// Connections kept per client, across every upstream host it talks to.
const MAX_CONNECTIONS: usize = 4096;
const KEEP_ALIVE: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct UpstreamClients {
    by_connect_timeout: RefCell<HashMap<u64, awc::Client>>,
}

impl UpstreamClients {
    /// The worker's client for this connect timeout (a cheap handle to a shared pool).
    pub fn get(&self, connect_timeout_ms: u64) -> awc::Client {
        self.by_connect_timeout
            .borrow_mut()
            .entry(connect_timeout_ms)
            .or_insert_with(|| {
                awc::Client::builder()
                    .connector(
                        awc::Connector::new()
                            .limit(MAX_CONNECTIONS)
                            .conn_keep_alive(KEEP_ALIVE)
                            .timeout(Duration::from_millis(connect_timeout_ms)),
                    )
                    // Per-call timeouts are set on each request from the provider's settings.
                    .disable_timeout()
                    // A provider answers a POST where it was sent; following a
                    // redirect would resend the key to whatever host it names.
                    // Without the redirect layer awc also keeps no copy of each
                    // request's headers while it waits for the answer.
                    .disable_redirects()
                    .finish()
            })
            .clone()
    }
}
