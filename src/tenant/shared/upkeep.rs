//! Upkeep of what the store holds: holds past their expiry, and the holds of a
//! request a journal replay closed.

use super::args::{CloseRequestArgs, CloseRequestReply};
use super::{Expired, Nanos, ReservationId, SharedQuota, StoreFailure, field, number};

impl SharedQuota {
    /// Reservations past their expiry, still held (see `EXPIRED`).
    pub async fn expired(&self, now_ms: u64, limit: usize) -> Result<Vec<Expired>, StoreFailure> {
        let reply = self
            .store
            .run(
                &self.store.scripts.expired,
                &[self.keys.expiry(), self.keys.held()],
                &[now_ms.to_string(), limit.to_string()],
            )
            .await?;
        reply
            .chunks(2)
            .map(|chunk| {
                let id = number(chunk, 0)?;
                let record = field(chunk, 1)?;
                // `C`: counted in the credit hash (see `scripts.rs`).
                let record = record.strip_prefix('C').unwrap_or(record);
                let amount = record.split('|').next().unwrap_or_default();
                Ok(Expired {
                    id: ReservationId(u64::try_from(id).unwrap_or(0)),
                    amount: Nanos::new(amount.parse().unwrap_or(0)),
                    meta: record.splitn(8, '|').nth(7).unwrap_or_default().to_owned(),
                })
            })
            .collect()
    }

    /// After a journal replay: closes what `request` still holds, at
    /// `charged` (`None`: at its reserved amount, an orphan). Returns whether
    /// it held anything.
    pub async fn close_request(
        &self,
        request: &str,
        charged: Option<Nanos>,
        tokens: Option<u64>,
        now_ms: u64,
    ) -> Result<bool, StoreFailure> {
        let (keys, month) = self.book_keys(now_ms);
        let args = CloseRequestArgs {
            now: now_ms.to_string(),
            request,
            charged: charged.map_or_else(|| "-1".to_owned(), |c| c.get().to_string()),
            used_tokens: tokens.map_or_else(|| "-1".to_owned(), |t| t.to_string()),
            month,
            day: self.today(now_ms),
            end_users: self.end_user_windows(now_ms),
        };
        let reply = self
            .store
            .run_for(&self.store.scripts.close_request, &keys, &args)
            .await?;
        Ok(matches!(reply, CloseRequestReply::Closed { .. }))
    }
}
