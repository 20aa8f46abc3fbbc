//! Secrets come from the environment, read here and nowhere else.

use std::collections::HashMap;
use std::fmt;

pub const KEY_PEPPER_ENV: &str = "TOLLGATE_KEY_PEPPER";
pub const ADMIN_TOKEN_ENV: &str = "TOLLGATE_ADMIN_TOKEN";
pub const DATABASE_URL_ENV: &str = "TOLLGATE_DATABASE_URL";
pub const REDIS_URL_ENV: &str = "TOLLGATE_REDIS_URL";

/// Where secrets come from; tests pass a map instead of touching the process env.
pub trait EnvSource {
    fn get(&self, name: &str) -> Option<String>;
}

pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

impl<S: std::hash::BuildHasher> EnvSource for HashMap<String, String, S> {
    fn get(&self, name: &str) -> Option<String> {
        HashMap::get(self, name).cloned()
    }
}

/// A secret that never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("*****")
    }
}

/// The secret in `name`, where it is set and not empty.
pub(super) fn secret(env: &dyn EnvSource, name: &str) -> Option<Secret> {
    env.get(name)
        .filter(|value| !value.is_empty())
        .map(Secret::new)
}
