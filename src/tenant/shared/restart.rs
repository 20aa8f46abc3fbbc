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

/// Settles or releases what this replica held before it stopped; returns
/// how many reservations it resolved. Any failure leaves the rest to expiry.
pub async fn resolve_own(
    store: &SharedStore,
    db: &DatabaseConnection,
    replica: &str,
    now_ms: u64,
) -> usize {
    let held = match store.held_by_replica(replica).await {
        Ok(held) => held,
        Err(error) => {
            tracing::warn!(error = %error, "Cannot list this replica's shared reservations; they wait for their expiry.");
            return 0;
        }
    };
    let mut by_tenant: BTreeMap<TenantId, Vec<String>> = BTreeMap::new();
    for (tenant, request) in held {
        by_tenant.entry(tenant).or_default().push(request);
    }
    let mut resolved = 0;
    for (tenant, requests) in by_tenant {
        let Ok(rows) = repo::rows_of_requests(db, &tenant, &requests).await else {
            return resolved;
        };
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
                Err(_) => return resolved,
            }
        }
    }
    resolved
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
