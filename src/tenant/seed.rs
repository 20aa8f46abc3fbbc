//! A tenant's period so far, read from the ledger (after flushing this
//! replica's batch, whose spend the query would otherwise miss): what a
//! store starts from, and what reconciliation compares Redis with.

use sea_orm::DatabaseConnection;

use super::book::Seed;
use crate::ids::TenantId;
use crate::ledger::{LedgerHandle, repo};
use crate::period::{self, Date};

#[derive(Clone)]
pub struct SeedSource {
    pub ledger: LedgerHandle,
    pub db: DatabaseConnection,
    pub tenant: TenantId,
}

impl SeedSource {
    pub async fn load(self, now_ms: u64) -> Result<Seed, String> {
        let month = period::month_key(now_ms);
        let day = Date::from_unix_ms(now_ms).day_key();
        self.ledger.flush().await.map_err(|e| e.to_string())?;
        let committed = repo::committed_in_period(&self.db, &self.tenant, &month)
            .await
            .map_err(|e| e.to_string())?;
        let (keys, features) = repo::committed_by_scope(&self.db, &self.tenant, &month)
            .await
            .map_err(|e| e.to_string())?;
        let (tokens_today, tokens_this_month) =
            repo::tokens_used(&self.db, &self.tenant, &day, &month)
                .await
                .map_err(|e| e.to_string())?;
        Ok(Seed {
            committed,
            keys,
            features,
            tokens_today,
            tokens_this_month,
        })
    }
}
