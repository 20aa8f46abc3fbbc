//! After this replica restarts, the reservations it held in Redis are
//! settled by the ledger, which its journal replay has just completed: a
//! request with rows is committed at what they charged (an `orphaned` row: at
//! its reserved amount), and one with no row at all (reserved, never sent)
//! is released. Without this they would wait for the expiry sweep and be
//! committed at their reserved amount, though the ledger knows better.
//! Reservations carry their replica's id, which lives in its journal
//! directory and so survives restarts.

use std::collections::BTreeMap;
use std::path::Path;

use sea_orm::DatabaseConnection;

use super::SharedStore;
use super::expiry;
use crate::ids::TenantId;
use crate::ledger::repo;
use crate::money::Nanos;

const REPLICA_FILE: &str = "replica-id";

/// This replica's id: kept in the journal directory when there is one.
pub fn replica_id(journal_dir: Option<&Path>) -> String {
    let fresh = || uuid::Uuid::new_v4().simple().to_string();
    let Some(dir) = journal_dir else {
        return fresh();
    };
    let path = dir.join(REPLICA_FILE);
    if let Ok(text) = std::fs::read_to_string(&path)
        && !text.trim().is_empty()
    {
        return text.trim().to_owned();
    }
    let id = fresh();
    if let Err(error) = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, &id)) {
        tracing::warn!(error = %error, path = %path.display(), "Cannot keep the replica id; reservations held before a restart will wait for their expiry.");
    }
    id
}

/// Tries at resolving, and the wait before the first retry (doubled after each).
const RESOLVE_TRIES: u32 = 4;
const RESOLVE_RETRY_MS: u64 = 250;

/// Settles or releases what this replica held before it stopped; returns
/// how many reservations it resolved. A failed try (Redis or the database
/// slow or away) is retried a few times before serving starts: until they are
/// resolved, the tenants' shared spend lacks what the replay charged. What is
/// still unresolved after the last try waits for its expiry.
pub async fn resolve_own(
    store: &SharedStore,
    db: &DatabaseConnection,
    replica: &str,
    now_ms: u64,
) -> usize {
    let mut resolved = 0;
    let mut delay = RESOLVE_RETRY_MS;
    for attempt in 1..=RESOLVE_TRIES {
        match resolve_once(store, db, replica, now_ms).await {
            Ok(n) => return resolved + n,
            Err((n, error)) => {
                resolved += n;
                if attempt == RESOLVE_TRIES {
                    tracing::warn!(error = %error, resolved, "Cannot resolve all of this replica's shared reservations; the rest wait for their expiry.");
                    break;
                }
                tracing::info!(error = %error, attempt, "Resolving this replica's shared reservations failed; retrying.");
                actix_rt::time::sleep(std::time::Duration::from_millis(delay)).await;
                delay *= 2;
            }
        }
    }
    resolved
}

/// One pass; on failure, how many it resolved before it.
async fn resolve_once(
    store: &SharedStore,
    db: &DatabaseConnection,
    replica: &str,
    now_ms: u64,
) -> Result<usize, (usize, String)> {
    let held = store
        .held_by_replica(replica)
        .await
        .map_err(|e| (0, e.to_string()))?;
    let mut by_tenant: BTreeMap<TenantId, Vec<String>> = BTreeMap::new();
    for (tenant, request) in held {
        by_tenant.entry(tenant).or_default().push(request);
    }
    let mut resolved = 0;
    for (tenant, requests) in by_tenant {
        let rows = repo::rows_of_requests(db, &tenant, &requests)
            .await
            .map_err(|e| (resolved, e.to_string()))?;
        let quota = store.tenant(&tenant);
        for request in requests {
            let (charged, tokens) = match expiry::ledger_outcome(&rows, &request) {
                // The replay wrote a row for every attempt sent: none means never sent.
                expiry::Outcome::NoRow => (Some(Nanos::ZERO), Some(0)),
                outcome => outcome.close_with(),
            };
            match quota.close_request(&request, charged, tokens, now_ms).await {
                Ok(true) => resolved += 1,
                Ok(false) => {}
                Err(error) => return Err((resolved, error.to_string())),
            }
        }
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replica_id_survives_a_restart_in_its_journal_directory() {
        let dir = tempfile::tempdir().unwrap();
        let first = replica_id(Some(dir.path()));
        assert_eq!(replica_id(Some(dir.path())), first);
        assert_ne!(replica_id(None), first);
    }
}
