//! Breakage: once a grant closes (no call admitted before its expiry can
//! still settle), what it left is booked in the ledger, once, and the
//! deciding store (the book, or Redis) marks it booked. The ledger row comes
//! first: a replica that dies between the two, or two replicas booking at
//! once, write the same amount again, which the ledger's unique grant keeps
//! as one row.

use actix::{ActorFutureExt, AsyncContext, Context, WrapFuture};

use super::TenantActor;
use crate::ledger::credits;

/// How often a tenant on Redis asks it for grants due (a round trip; the book's is a look).
const SHARED_EVERY_MS: u64 = 10_000;

impl TenantActor {
    /// Books the breakage of grants due in the deciding store.
    pub(super) fn book_breakage(&mut self, now_ms: u64, ctx: &mut Context<Self>) {
        if self.booking_breakage {
            return;
        }
        let shared = self.shared().filter(|q| q.health().is_up()).cloned();
        let due = match &shared {
            Some(_) if now_ms < self.next_shared_breakage_ms => return,
            Some(_) => None,
            None => Some(self.book.due_breakage(now_ms)),
        };
        if due.as_ref().is_some_and(Vec::is_empty) {
            return;
        }
        self.next_shared_breakage_ms = now_ms.saturating_add(SHARED_EVERY_MS);
        self.booking_breakage = true;
        let db = self.db.clone();
        let tenant = self.tenant.clone();
        let at = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let work = async move {
            let due = match (due, &shared) {
                (Some(due), _) => due,
                (None, Some(quota)) => quota.due_breakage(now_ms).await.unwrap_or_default(),
                (None, None) => Vec::new(),
            };
            let mut booked = Vec::with_capacity(due.len());
            for (key, grant, left) in due {
                let written =
                    credits::book_breakage(&db, &tenant, key.as_ref(), grant, left, at).await;
                if let Err(error) = written {
                    tracing::warn!(tenant = %tenant, grant, error = %error, "Cannot book a grant's breakage yet; trying again.");
                    continue;
                }
                if let Some(quota) = &shared
                    && quota.mark_booked(grant).await.is_err()
                {
                    continue;
                }
                booked.push((key, grant, left));
            }
            booked
        };
        ctx.spawn(work.into_actor(self).map(|booked, actor, _| {
            actor.booking_breakage = false;
            for (key, grant, left) in booked {
                actor.book.mark_booked(key.as_ref(), grant);
                tracing::info!(tenant = %actor.tenant, grant, breakage = %left, "Booked an expired grant's breakage.");
            }
        }));
    }
}
