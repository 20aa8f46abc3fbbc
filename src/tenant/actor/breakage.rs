//! Breakage: once no call admitted before a grant's expiry can still settle,
//! what the grant left is booked in the ledger, once, and the book closes
//! it. The ledger row comes first: a replica that dies between the two
//! books the same amount again on its next start, which the ledger's unique
//! grant keeps as one row.

use actix::{ActorFutureExt, AsyncContext, Context, WrapFuture};

use super::TenantActor;
use crate::ledger::credits;

/// Past a hold's lifetime: the sweep has committed every hold by then.
const SLACK_MS: u64 = 60_000;

impl TenantActor {
    /// Books the breakage of grants due, when the book decides (Redis keeps
    /// plain grants only: none of them expires).
    pub(super) fn book_breakage(&mut self, now_ms: u64, ctx: &mut Context<Self>) {
        if self.redis.is_some() || self.booking_breakage {
            return;
        }
        let cutoff = now_ms.saturating_sub(self.hold_lifetime_ms.saturating_add(SLACK_MS));
        let due = self.book.due_breakage(cutoff);
        if due.is_empty() {
            return;
        }
        self.booking_breakage = true;
        let db = self.db.clone();
        let tenant = self.tenant.clone();
        let at = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let work = async move {
            let mut booked = Vec::with_capacity(due.len());
            for (key, grant, left) in due {
                match credits::book_breakage(&db, &tenant, key.as_ref(), grant, left, at).await {
                    Ok(()) => booked.push((key, grant, left)),
                    Err(error) => {
                        tracing::warn!(tenant = %tenant, grant, error = %error, "Cannot book a grant's breakage yet; trying again.");
                    }
                }
            }
            booked
        };
        ctx.spawn(work.into_actor(self).map(|booked, actor, _| {
            actor.booking_breakage = false;
            for (key, grant, left) in booked {
                actor.book.close_grant(key.as_ref(), grant);
                tracing::info!(tenant = %actor.tenant, grant, breakage = %left, "Booked an expired grant's breakage.");
            }
        }));
    }
}
