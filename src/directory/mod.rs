//! Tenants and API keys: the database rows (`repo`) and the in-memory view
//! every request reads (`Directory`). Requests never query the database for a
//! known key; a key issued on another replica is looked up once on a miss,
//! within the bounds of `misses` (an unknown id is not queried again for a
//! sync interval, and only a few lookups run at once).
//! A sync loop polls for issued and revoked keys and tenant changes, so a
//! change made by another replica or the CLI reaches this one within
//! `sync_interval_ms`.

pub mod misses;
pub mod repo;
pub mod tenant;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use sea_orm::DatabaseConnection;

pub use tenant::{BudgetMode, RateMode, TenantRecord};

use self::misses::{KeyLookup, KeyMisses, Outcome};
use crate::auth::{self, PresentedKey};
use crate::clock::SharedClock;
use crate::config::Secret;
use crate::ids::{KeyId, TenantId};
use crate::storage::StorageError;

#[derive(Debug, Clone)]
pub struct KeyRecord {
    pub id: KeyId,
    pub tenant: TenantId,
    pub secret_hash: String,
    /// The key's own monthly budget inside its tenant's.
    pub monthly_budget: Option<crate::money::Nanos>,
    /// When the key stops working (ms since the epoch); `None`: never.
    pub expires_at_ms: Option<i64>,
    /// Spends its prepaid balance instead of a monthly budget.
    pub on_credits: bool,
    /// What `monthly_budget` runs over.
    pub budget_period: crate::calendar::Period,
    /// The key's own cap on calls in flight at once; `None`: only the tenant's.
    pub max_in_flight: Option<u32>,
}

impl KeyRecord {
    pub fn expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms
            .is_some_and(|at| u64::try_from(at).unwrap_or(0) <= now_ms)
    }
}

/// Why a presented key was refused; all become 401.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("the API key is malformed")]
    Malformed,
    #[error("the API key is unknown or revoked")]
    Unknown,
    /// Not in memory, and too many other unknown ids are being looked up to
    /// look this one up now (see `misses::MAX_IN_FLIGHT`).
    #[error("the API key is unknown or revoked (key lookups are saturated; retry shortly)")]
    Busy,
    /// The key's `expires_at` has passed; like a revocation, but said.
    #[error("the API key has expired")]
    Expired,
    #[error("key lookup failed")]
    Storage,
}

pub struct Directory {
    db: DatabaseConnection,
    pepper: Secret,
    tenants: RwLock<HashMap<TenantId, Arc<TenantRecord>>>,
    keys: RwLock<HashMap<KeyId, Arc<KeyRecord>>>,
    misses: KeyMisses,
    clock: SharedClock,
    /// Watermarks of the last sync, in Unix ms.
    synced: RwLock<SyncMarks>,
}

#[derive(Debug, Default, Clone, Copy)]
/// The newest change of each kind seen so far, in Unix ms.
struct SyncMarks {
    keys_revoked: i64,
    keys_created: i64,
    tenants_updated: i64,
}

/// Tenants whose limits changed in a sync, so their actors can be told.
pub type ChangedTenants = Vec<Arc<TenantRecord>>;

impl Directory {
    /// `unknown_ttl_ms`: how long an id the database did not know is refused
    /// without asking again (the sync interval: a key issued on another
    /// replica is then found about as soon as a revocation there is seen).
    pub async fn load(
        db: DatabaseConnection,
        pepper: Secret,
        clock: SharedClock,
        unknown_ttl_ms: u64,
    ) -> Result<Arc<Directory>, StorageError> {
        let tenants = repo::all_tenants(&db).await?;
        let keys = repo::active_keys(&db).await?;
        let now = i64::try_from(clock.now_ms()).unwrap_or(i64::MAX);
        let directory = Directory {
            db,
            pepper,
            tenants: RwLock::new(
                tenants
                    .into_iter()
                    .map(|t| (t.id.clone(), Arc::new(t)))
                    .collect(),
            ),
            keys: RwLock::new(
                keys.into_iter()
                    .map(|k| (k.id.clone(), Arc::new(k)))
                    .collect(),
            ),
            misses: KeyMisses::new(unknown_ttl_ms),
            clock,
            synced: RwLock::new(SyncMarks {
                keys_revoked: now,
                keys_created: now,
                tenants_updated: now,
            }),
        };
        Ok(Arc::new(directory))
    }

    pub fn db(&self) -> &DatabaseConnection {
        &self.db
    }

    pub fn pepper(&self) -> &Secret {
        &self.pepper
    }

    pub fn tenant(&self, id: &TenantId) -> Option<Arc<TenantRecord>> {
        read(&self.tenants).get(id).cloned()
    }

    /// Authenticates a bearer token to its tenant.
    pub async fn authenticate(
        &self,
        token: &str,
    ) -> Result<(Arc<KeyRecord>, Arc<TenantRecord>), AuthError> {
        let presented = PresentedKey::parse(token).ok_or(AuthError::Malformed)?;
        let key_id = KeyId::new(presented.key_id);
        let cached = read(&self.keys).get(&key_id).cloned();
        let key = match cached {
            Some(key) => key,
            None => self.fetch_key(&key_id).await?,
        };
        if !auth::secret_matches(&self.pepper, presented.secret, &key.secret_hash) {
            return Err(AuthError::Unknown);
        }
        // Checked against the clock, not synced: every replica refuses at the same instant.
        if key.expired(self.clock.now_ms()) {
            return Err(AuthError::Expired);
        }
        let tenant = match self.tenant(&key.tenant) {
            Some(tenant) => tenant,
            None => self
                .fetch_tenant(&key.tenant)
                .await?
                .ok_or(AuthError::Unknown)?,
        };
        Ok((key, tenant))
    }

    /// A key issued on another replica (or by the CLI) since this one loaded.
    async fn fetch_key(&self, key_id: &KeyId) -> Result<Arc<KeyRecord>, AuthError> {
        let outcome = match self.misses.admit(key_id, self.clock.now_ms()) {
            KeyLookup::KnownUnknown => Outcome::Unknown,
            KeyLookup::Busy => return Err(AuthError::Busy),
            KeyLookup::Follow(waiting) => misses::follow(waiting).await,
            KeyLookup::Lead(ticket) => {
                let outcome = match repo::active_key(&self.db, key_id).await {
                    Ok(Some(key)) => {
                        let key = Arc::new(key);
                        // In memory before the lookup ends, so no later miss queries again.
                        write(&self.keys).insert(key_id.clone(), key.clone());
                        Outcome::Found(key)
                    }
                    Ok(None) => Outcome::Unknown,
                    Err(_) => Outcome::Failed,
                };
                ticket.finish(outcome.clone(), self.clock.now_ms());
                outcome
            }
        };
        match outcome {
            Outcome::Found(key) => Ok(key),
            Outcome::Unknown => Err(AuthError::Unknown),
            Outcome::Failed => Err(AuthError::Storage),
        }
    }

    /// Database lookups of key ids not in memory since this process started.
    pub fn key_lookups(&self) -> u64 {
        self.misses.queries()
    }

    async fn fetch_tenant(&self, id: &TenantId) -> Result<Option<Arc<TenantRecord>>, AuthError> {
        let tenant = repo::get_tenant(&self.db, id)
            .await
            .map_err(|_| AuthError::Storage)?;
        Ok(tenant.map(|t| self.put_tenant(t)))
    }

    pub fn put_tenant(&self, tenant: TenantRecord) -> Arc<TenantRecord> {
        let tenant = Arc::new(tenant);
        write(&self.tenants).insert(tenant.id.clone(), tenant.clone());
        tenant
    }

    /// A key issued through this process works at once, even if its id was
    /// presented (and found unknown) a moment before.
    pub fn put_key(&self, key: KeyRecord) {
        self.misses.forget(&key.id);
        write(&self.keys).insert(key.id.clone(), Arc::new(key));
    }

    /// Revocation through this process takes effect at once.
    pub fn evict_key(&self, key_id: &KeyId) {
        write(&self.keys).remove(key_id);
    }

    /// Pulls keys issued, keys revoked and tenants changed elsewhere; returns
    /// changed tenants. Keeping every active key in memory (not only those
    /// looked up) means a real key never depends on a lookup slot for longer
    /// than a sync interval, however many made-up keys compete for them.
    pub async fn sync(&self) -> Result<ChangedTenants, StorageError> {
        let marks = *read(&self.synced);
        let created = repo::keys_created_after(&self.db, marks.keys_created).await?;
        let revoked = repo::keys_revoked_after(&self.db, marks.keys_revoked).await?;
        let mut changed = repo::tenants_updated_after(&self.db, marks.tenants_updated).await?;
        // The look-back returns recent changes again on every sync; re-applying one
        // would read its tenant's keys again each time.
        changed.retain(|t| {
            self.tenant(&t.id)
                .is_none_or(|known| known.updated_at_ms != t.updated_at_ms)
        });
        // A changed tenant may have changed key budgets: its keys are read again.
        let changed_ids: Vec<&TenantId> = changed.iter().map(|t| &t.id).collect();
        let reread = if changed_ids.is_empty() {
            Vec::new()
        } else {
            repo::active_keys_of(&self.db, &changed_ids).await?
        };
        let mut next = marks;
        {
            let mut keys = write(&self.keys);
            for (key, created_at) in created {
                next.keys_created = next.keys_created.max(created_at);
                keys.insert(key.id.clone(), Arc::new(key));
            }
            if !changed_ids.is_empty() {
                keys.retain(|_, key| !changed_ids.contains(&&key.tenant));
            }
            for key in reread {
                keys.insert(key.id.clone(), Arc::new(key));
            }
            // Revocations last, so a key issued and revoked since the last sync is gone.
            for (key_id, revoked_at) in revoked {
                keys.remove(&key_id);
                next.keys_revoked = next.keys_revoked.max(revoked_at);
            }
        }
        let mut records = Vec::with_capacity(changed.len());
        for tenant in changed {
            next.tenants_updated = next.tenants_updated.max(tenant.updated_at_ms);
            records.push(self.put_tenant(tenant));
        }
        *write(&self.synced) = next;
        Ok(records)
    }
}

// A poisoned lock only means a panic elsewhere while holding it; the maps stay usable.
fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
