//! Balances on Redis: a balance and its grants as the credit hash keeps
//! them, and booking what expired grants left (`tenant/grants.rs` states
//! the rule; `scripts.rs` keeps it in Lua).

use super::seeding::grant_state;
use super::{KeyId, Nanos, SharedQuota, StoreFailure, field, nanos};
use crate::tenant::book::{Balance, BalanceStatus};
use crate::tenant::grants::Pool;

/// Grants whose breakage is due: (key, grant row, what it left).
pub type DueBreakage = Vec<(Option<KeyId>, i64, Nanos)>;

impl SharedQuota {
    /// The tenant's (`None`) or a key's balance and its grants (`None`
    /// outside: not seeded yet).
    pub async fn balance(
        &self,
        key: Option<&KeyId>,
        now_ms: u64,
    ) -> Result<Option<Balance>, StoreFailure> {
        let arg = key.map(ToString::to_string).unwrap_or_default();
        let reply = self
            .store
            .run(
                &self.store.scripts.credit_status,
                &[self.keys.credit()],
                &[arg, now_ms.to_string()],
            )
            .await?;
        if field(&reply, 0)? == "seed" {
            return Ok(None);
        }
        let at = if key.is_some() { 4 } else { 1 };
        let status = BalanceStatus::new(
            nanos(&reply, at)?,
            nanos(&reply, at + 1)?,
            nanos(&reply, at + 2)?,
        );
        let listed: Vec<String> = serde_json::from_str(field(&reply, 7)?)
            .map_err(|e| StoreFailure(format!("a balance's grants: {e}")))?;
        let grants = listed
            .iter()
            .map(|text| grant_state(text))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| StoreFailure(format!("a grant: {listed:?}")))?;
        Ok(Some(Balance { status, grants }))
    }

    /// Why a balance refused, in its grants' words (see `grants::note`).
    pub async fn grants_note(&self, key: Option<&KeyId>, now_ms: u64) -> Option<String> {
        let balance = self.balance(key, now_ms).await.ok()??;
        let mut pool = Pool::default();
        for state in balance.grants {
            pool.add(state);
        }
        crate::tenant::grants::note(&pool, now_ms)
    }

    /// Grants closed by `now_ms` whose breakage is not booked.
    pub async fn due_breakage(&self, now_ms: u64) -> Result<DueBreakage, StoreFailure> {
        let reply = self
            .store
            .run(
                &self.store.scripts.due_breakage,
                &[self.keys.credit()],
                &[now_ms.to_string()],
            )
            .await?;
        let mut due = Vec::new();
        for at in (0..reply.len()).step_by(3) {
            let key = field(&reply, at)?;
            let grant = field(&reply, at + 1)?
                .parse()
                .map_err(|_| StoreFailure(format!("a grant id: {reply:?}")))?;
            let key = (!key.is_empty()).then(|| KeyId::new(key));
            due.push((key, grant, nanos(&reply, at + 2)?));
        }
        Ok(due)
    }

    /// A grant's breakage is booked.
    pub async fn mark_booked(&self, grant: i64) -> Result<(), StoreFailure> {
        self.store
            .run(
                &self.store.scripts.mark_booked,
                &[self.keys.credit()],
                &[grant.to_string()],
            )
            .await?;
        Ok(())
    }
}
