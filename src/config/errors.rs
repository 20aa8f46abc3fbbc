//! What a configuration that cannot load is refused with: every problem
//! found, each at its TOML path, so one run of `check-config` names them all.

use std::fmt;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: String,
        source: Box<toml::de::Error>,
    },
    #[error("{entry}: {reason}")]
    Invalid { entry: String, reason: String },
}

pub(crate) fn invalid(entry: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        entry: entry.into(),
        reason: reason.into(),
    }
}

/// Every problem one load found, in the order the sections are checked;
/// never empty. Shown one per line.
#[derive(Debug)]
pub struct ConfigErrors(Vec<ConfigError>);

impl ConfigErrors {
    pub fn iter(&self) -> impl Iterator<Item = &ConfigError> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true: a load that found nothing wrong returns its configuration.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl From<ConfigError> for ConfigErrors {
    fn from(error: ConfigError) -> Self {
        ConfigErrors(vec![error])
    }
}

/// Collects problems so that checking goes on past the first: each section
/// adds its own and hands back what it could build.
#[derive(Debug, Default)]
pub(crate) struct Problems(Vec<ConfigError>);

impl Problems {
    pub(crate) fn add(&mut self, entry: impl Into<String>, reason: impl Into<String>) {
        self.0.push(invalid(entry, reason));
    }

    /// The value, or `None` with its error kept.
    pub(crate) fn ok<T>(&mut self, result: Result<T, ConfigError>) -> Option<T> {
        result.map_err(|error| self.0.push(error)).ok()
    }

    /// Every problem so far and `error`, after which nothing more can be checked.
    pub(crate) fn stop(mut self, error: ConfigError) -> ConfigErrors {
        self.0.push(error);
        ConfigErrors(self.0)
    }

    /// `value` when nothing was wrong, else every problem.
    pub(crate) fn finish<T>(self, value: T) -> Result<T, ConfigErrors> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(ConfigErrors(self.0))
        }
    }
}
