//! API keys: `tg_<keyid>_<secret>`. Only HMAC-SHA256(pepper, secret) is
//! stored; verification finds the key by id and compares hashes in constant
//! time. Secrets are generated from the OS RNG and shown once.

use hmac::{Hmac, Mac};
use rand::Rng;
use rand::distr::Alphanumeric;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::config::Secret;
use crate::ids::KeyId;

const PREFIX: &str = "tg_";
const KEY_ID_LEN: usize = 12;
const SECRET_LEN: usize = 40;

/// A presented key split into its parts; the secret is still unverified.
pub struct PresentedKey<'a> {
    pub key_id: &'a str,
    pub secret: &'a str,
}

impl<'a> PresentedKey<'a> {
    /// `None` for anything not shaped like a Tollgate key.
    pub fn parse(token: &'a str) -> Option<PresentedKey<'a>> {
        let rest = token.strip_prefix(PREFIX)?;
        let (key_id, secret) = rest.split_once('_')?;
        let alnum = |s: &str| s.bytes().all(|b| b.is_ascii_alphanumeric());
        let ok = key_id.len() == KEY_ID_LEN
            && secret.len() == SECRET_LEN
            && alnum(key_id)
            && alnum(secret);
        ok.then_some(PresentedKey { key_id, secret })
    }
}

/// A freshly issued key: the full token is shown to the caller once.
pub struct IssuedKey {
    pub key_id: KeyId,
    pub token: Secret,
    pub secret_hash: String,
}

pub fn issue_key(pepper: &Secret) -> IssuedKey {
    let mut rng = rand::rng();
    // Key ids are lowercase so they read well in URLs and logs.
    let key_id: String = (&mut rng)
        .sample_iter(Alphanumeric)
        .take(KEY_ID_LEN)
        .map(|b| char::from(b).to_ascii_lowercase())
        .collect();
    let secret: String = (&mut rng)
        .sample_iter(Alphanumeric)
        .take(SECRET_LEN)
        .map(char::from)
        .collect();
    IssuedKey {
        token: Secret::new(format!("{PREFIX}{key_id}_{secret}")),
        secret_hash: hash_secret(pepper, &secret),
        key_id: KeyId::new(key_id),
    }
}

pub fn hash_secret(pepper: &Secret, secret: &str) -> String {
    hex(&mac(pepper.expose().as_bytes(), secret.as_bytes()))
}

/// Constant-time comparison of the presented secret's hash with the stored one.
pub fn secret_matches(pepper: &Secret, secret: &str, stored_hash: &str) -> bool {
    let presented = hash_secret(pepper, secret);
    presented.as_bytes().ct_eq(stored_hash.as_bytes()).into()
}

/// Constant-time comparison of two tokens (the admin token).
pub fn tokens_equal(presented: &str, expected: &Secret) -> bool {
    // Hashing both first makes the comparison independent of the lengths too.
    let a = mac(b"tollgate-admin", presented.as_bytes());
    let b = mac(b"tollgate-admin", expected.expose().as_bytes());
    a.ct_eq(&b).into()
}

fn mac(key: &[u8], data: &[u8]) -> [u8; 32] {
    // invariant: HMAC accepts keys of any length; the else arm cannot run.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return [0; 32];
    };
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// Bytes as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_keys_parse_and_verify_and_others_do_not() {
        let pepper = Secret::new("pepper");
        let issued = issue_key(&pepper);
        let presented = PresentedKey::parse(issued.token.expose()).unwrap();
        assert_eq!(presented.key_id, issued.key_id.as_str());
        assert!(secret_matches(
            &pepper,
            presented.secret,
            &issued.secret_hash
        ));
        assert!(!secret_matches(
            &Secret::new("other"),
            presented.secret,
            &issued.secret_hash
        ));
        let mut wrong = presented.secret.to_owned();
        wrong.replace_range(0..1, if wrong.starts_with('a') { "b" } else { "a" });
        assert!(!secret_matches(&pepper, &wrong, &issued.secret_hash));
    }

    #[test]
    fn malformed_keys_are_refused() {
        for bad in [
            "",
            "tg_",
            "sk-abc",
            "tg_short_secret",
            "tg_abcdefghijkl_short",
        ] {
            assert!(PresentedKey::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn admin_token_compare() {
        assert!(tokens_equal("admin", &Secret::new("admin")));
        assert!(!tokens_equal("admin2", &Secret::new("admin")));
    }
}
