//! Identifier newtypes. Ids cross every module boundary; a bare `String` in a
//! signature would let a tenant id be passed where a key id belongs.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! string_id {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Arc<str>);

        impl $name {
            pub fn new(value: impl Into<Arc<str>>) -> Self {
                Self(value.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), &*self.0)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                String::deserialize(deserializer).map(Self::new)
            }
        }
    };
}

string_id!(
    /// A tenant: lowercase letters, digits, `-` and `_`, at most 64 characters.
    TenantId
);
string_id!(
    /// The public part of an API key (`tg_<keyid>_<secret>`).
    KeyId
);
string_id!(
    /// The gateway's own id for one client request.
    RequestId
);
string_id!(RouteName);
string_id!(ProviderName);

impl TenantId {
    /// Tenant ids appear in Redis keys, metric labels and URLs, so the alphabet is narrow.
    pub fn parse(value: &str) -> Option<TenantId> {
        is_slug(value).then(|| TenantId::new(value))
    }
}

/// 1-64 lowercase letters, digits, `-` or `_`: names that go into keys,
/// labels and URLs (tenant ids, plan names).
pub fn is_slug(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 64
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Feature names (`X-Tollgate-Feature`) become ledger values, report keys and
/// budget scopes, so one rule decides what a feature name may be.
pub const FEATURE_RULE: &str = "use at most 64 letters, digits, `-`, `_`, `.`, `:` or `/`";

pub fn is_valid_feature(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'/'))
}

impl RequestId {
    pub fn generate() -> RequestId {
        RequestId::new(uuid::Uuid::now_v7().simple().to_string())
    }
}

/// One reservation inside one tenant actor's book; unique per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReservationId(pub u64);

/// A ledger event's unique id: replaying an event never inserts it twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventId(uuid::Uuid);

impl EventId {
    pub fn generate() -> EventId {
        EventId(uuid::Uuid::now_v7())
    }

    /// The one `orphaned` row of a request: whoever writes it (this process's
    /// tenant actor, another replica's sweep of a shared reservation, or a
    /// journal replay after a crash) writes the same id, so the ledger keeps one.
    pub fn orphan_of(request: &RequestId) -> EventId {
        use sha2::{Digest as _, Sha256};
        let digest = Sha256::new()
            .chain_update(b"tollgate-orphan:")
            .chain_update(request.as_str().as_bytes())
            .finalize();
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest[..16]);
        EventId(uuid::Builder::from_custom_bytes(bytes).into_uuid())
    }

    /// Reads the form `Display` writes (the journal stores ids as text).
    pub fn parse(text: &str) -> Option<EventId> {
        uuid::Uuid::try_parse(text).ok().map(EventId)
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.simple())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_requests_orphan_id_is_the_same_everywhere_and_differs_between_requests() {
        let a = RequestId::new("req-a");
        assert_eq!(EventId::orphan_of(&a), EventId::orphan_of(&a.clone()));
        assert_ne!(
            EventId::orphan_of(&a),
            EventId::orphan_of(&RequestId::new("req-b"))
        );
        let text = EventId::orphan_of(&a).to_string();
        assert_eq!(EventId::parse(&text), Some(EventId::orphan_of(&a)));
    }

    use super::*;

    #[test]
    fn tenant_ids_are_narrow() {
        assert!(TenantId::parse("acme-1_x").is_some());
        for bad in ["", "Acme", "a b", "a/b", "{x}", &"a".repeat(65)] {
            assert!(TenantId::parse(bad).is_none(), "{bad:?}");
        }
    }
}
