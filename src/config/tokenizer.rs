//! `[tokenizer]`: how prompts are counted where a model says nothing of its own.

use serde::Deserialize;

use super::errors::Problems;
use crate::tokenize::{Counting, Encoding};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TokenizerConfig {
    /// `o200k_base` or `cl100k_base`.
    pub encoding: String,
    /// Estimates are multiplied by this percentage (≥ 100) for providers whose tokenizer differs.
    pub safety_percent: u32,
}

impl Default for TokenizerConfig {
    fn default() -> Self {
        TokenizerConfig {
            encoding: "o200k_base".to_owned(),
            safety_percent: 110,
        }
    }
}

impl TokenizerConfig {
    pub(super) fn check(&self, problems: &mut Problems) {
        if self.safety_percent < 100 {
            problems.add("tokenizer.safety_percent", "must be at least 100");
        }
        if Encoding::parse(&self.encoding).is_none() {
            problems.add("tokenizer.encoding", "must be o200k_base or cl100k_base");
        }
    }

    /// How prompts count where neither a model nor its provider says otherwise.
    pub fn counting(&self) -> Counting {
        Counting {
            // Checked at load: only known encodings pass.
            encoding: Encoding::parse(&self.encoding).unwrap_or(Encoding::O200kBase),
            safety_percent: self.safety_percent,
            image_tokens: crate::tokenize::WORST_IMAGE_TOKENS,
        }
    }
}
