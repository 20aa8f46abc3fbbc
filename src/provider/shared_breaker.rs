//! Breaker states shared by replicas through Redis: each change is written
//! under the provider's key, and every replica polls the key a few times a
//! second and takes a newer change made elsewhere, so when one replica opens
//! a breaker on a failing upstream the others stop calling it too, within
//! about a second. Losing Redis only loses the sharing: each replica's
//! breaker keeps working on its own.

use crate::ids::ProviderName;
use crate::tenant::SharedStore;

use super::breaker::BreakerState;

/// A state no replica has refreshed in this long is forgotten.
const TTL_MS: u64 = 3_600_000;

/// A breaker change as written to Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub state: BreakerState,
    pub at_ms: u64,
    /// Which actor wrote it: an actor ignores its own changes.
    origin: u64,
}

#[derive(Clone)]
pub struct SharedBreaker {
    store: SharedStore,
    key: String,
    origin: u64,
}

impl SharedBreaker {
    pub fn new(store: SharedStore, provider: &ProviderName) -> SharedBreaker {
        SharedBreaker {
            store,
            key: format!("tg:{{breaker}}:{provider}"),
            origin: rand::random(),
        }
    }

    pub async fn publish(&self, state: BreakerState, at_ms: u64) {
        let change = Change {
            state,
            at_ms,
            origin: self.origin,
        };
        if let Err(error) = self.store.set(&self.key, &encode(change), TTL_MS).await {
            tracing::debug!(error = %error, "A breaker change was not shared.");
        }
    }

    /// The latest change another actor wrote, if any.
    pub async fn fetch(&self) -> Option<Change> {
        let text = self.store.get(&self.key).await.ok()??;
        decode(&text).filter(|change| change.origin != self.origin)
    }
}

fn encode(change: Change) -> String {
    let state = match change.state {
        BreakerState::Closed => "closed".to_owned(),
        BreakerState::Open { until_ms } => format!("open:{until_ms}"),
        BreakerState::HalfOpen { step, since_ms } => format!("half:{step}:{since_ms}"),
    };
    format!("{state}|{}|{}", change.at_ms, change.origin)
}

fn decode(text: &str) -> Option<Change> {
    let mut parts = text.split('|');
    let (state, at_ms, origin) = (parts.next()?, parts.next()?, parts.next()?);
    let mut fields = state.split(':');
    let state = match (fields.next()?, fields.next(), fields.next()) {
        ("closed", None, None) => BreakerState::Closed,
        ("open", Some(until), None) => BreakerState::Open {
            until_ms: until.parse().ok()?,
        },
        ("half", Some(step), Some(since)) => BreakerState::HalfOpen {
            step: step.parse().ok()?,
            since_ms: since.parse().ok()?,
        },
        _ => return None,
    };
    Some(Change {
        state,
        at_ms: at_ms.parse().ok()?,
        origin: origin.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_survives_the_round_trip_and_garbage_is_ignored() {
        for state in [
            BreakerState::Closed,
            BreakerState::Open { until_ms: 42 },
            BreakerState::HalfOpen {
                step: 1,
                since_ms: 7,
            },
        ] {
            let change = Change {
                state,
                at_ms: 1_796_040_000_000,
                origin: 9,
            };
            assert_eq!(decode(&encode(change)), Some(change));
        }
        for garbage in [
            "",
            "open",
            "open:x|1|2",
            "half:1|1|2",
            "closed|1",
            "shut|1|2",
        ] {
            assert_eq!(decode(garbage), None, "{garbage}");
        }
    }
}
