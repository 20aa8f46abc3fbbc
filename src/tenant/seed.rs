//! A tenant's period so far, read from the ledger's running totals (after
//! flushing this replica's batch, whose spend they would otherwise miss): what a
//! store starts from, and what reconciliation compares Redis with.

use sea_orm::DatabaseConnection;

use super::book::Seed;
use crate::calendar::{Calendar, Window};
use crate::ids::TenantId;
use crate::ledger::{LedgerHandle, repo};
use crate::money::Nanos;
use crate::telemetry::metrics::{Metric, counter_add};

#[derive(Clone)]
pub struct SeedSource {
    pub ledger: LedgerHandle,
    pub db: DatabaseConnection,
    pub tenant: TenantId,
    /// Where the days and months of its totals begin.
    pub calendar: Calendar,
}

impl SeedSource {
    pub async fn load(self, now_ms: u64) -> Result<Seed, String> {
        self.ledger.flush().await.map_err(|e| e.to_string())?;
        repo::period_totals(&self.db, &self.tenant, &self.calendar, now_ms)
            .await
            .map_err(|e| e.to_string())
    }

    /// An end user's committed spend in `window` and tokens on the local day
    /// `today`, after the same flush.
    pub async fn end_user(
        self,
        id: String,
        window: Window,
        today: String,
    ) -> Result<EndUserSeed, String> {
        counter_add(Metric::EndUserLoadsTotal, &[], 1);
        self.ledger.flush().await.map_err(|e| e.to_string())?;
        let committed = repo::end_user_committed(&self.db, &self.tenant, &id, &window)
            .await
            .map_err(|e| e.to_string())?;
        let tokens_today = repo::end_user_tokens_on(&self.db, &self.tenant, &id, &today)
            .await
            .map_err(|e| e.to_string())?;
        Ok(EndUserSeed {
            committed,
            tokens_today,
        })
    }
}

/// Where an end user stands, by the ledger.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndUserSeed {
    pub committed: Nanos,
    pub tokens_today: u64,
}
