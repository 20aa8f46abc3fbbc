//! Counting that can neither panic nor stall. The tokenizer splits a text
//! with a backtracking regex before it merges byte pairs, and both steps grow
//! with the length of one split piece: about a megabyte of spaces overflows
//! the regex's stack (an error the crate unwraps into a panic), and merging
//! one long piece costs the square of its length. Only a long run of
//! characters of one kind (spaces, letters, punctuation) makes a long piece,
//! so such a run is never handed to the tokenizer: it counts as its bytes, a
//! strict bound (a byte-level BPE never yields more tokens than the text has
//! bytes), and the text between such runs is counted exactly, piece by piece.
//! Real prose and code have no such runs, so their counts are exact; a
//! failure of the tokenizer all the same counts its piece as its bytes.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};

use tiktoken_rs::CoreBPE;

use crate::telemetry::metrics::{Metric, counter_add};

/// The longest run of one kind of character the tokenizer is given. Words
/// are shorter; a longer run (a 40-letter identifier, a ruler of `=`) is
/// held at its bytes, a few tokens more than its count.
const RUN_BYTES: usize = 32;

/// Pieces the tokenizer failed on since start (the metric's count, for tests).
static FAILURES: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Blank,
    Letter,
    /// The regex splits digits into groups of three: a run of them is cheap.
    Digit,
    Other,
}

fn kind(c: char) -> Kind {
    if c.is_whitespace() {
        Kind::Blank
    } else if c.is_alphabetic() {
        Kind::Letter
    } else if c.is_numeric() {
        Kind::Digit
    } else {
        Kind::Other
    }
}

/// Tokens in `text`: exact where it has no long run of one kind, and never
/// below the exact count by more than the pieces' seams (a split word).
pub(super) fn count(bpe: &CoreBPE, text: &str) -> u64 {
    let mut tokens = 0;
    // Start of the text not counted yet, and of the current run.
    let mut pending = 0;
    let mut run = (0, Kind::Blank);
    for (at, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        let k = if at == text.len() {
            None
        } else {
            Some(kind(c))
        };
        if k == Some(run.1) {
            continue;
        }
        let (start, was) = run;
        if at - start > RUN_BYTES && was != Kind::Digit {
            tokens += count_piece(bpe, &text[pending..start]) + to_u64(at - start);
            pending = at;
        }
        run = (at, k.unwrap_or(Kind::Blank));
    }
    tokens + count_piece(bpe, &text[pending..])
}

/// One piece with no long run, exactly; its bytes if the tokenizer fails.
fn count_piece(bpe: &CoreBPE, piece: &str) -> u64 {
    if piece.is_empty() {
        return 0;
    }
    if let Ok(count) = catch_unwind(AssertUnwindSafe(|| bpe.count_ordinary(piece))) {
        return to_u64(count);
    }
    FAILURES.fetch_add(1, Ordering::Relaxed);
    counter_add(Metric::TokenizerFailuresTotal, &[], 1);
    to_u64(piece.len())
}

fn to_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bpe() -> &'static CoreBPE {
        tiktoken_rs::o200k_base_singleton()
    }

    /// The tokenizer itself, unguarded: what `count` must agree with.
    fn exact(text: &str) -> u64 {
        to_u64(bpe().count_ordinary(text))
    }

    #[test]
    fn prose_and_code_count_exactly() {
        let prose = "The quick brown fox jumps over the lazy dog, twice. ".repeat(50);
        let code =
            "fn main() {\n    let total: u64 = (1..=100).sum();\n    println!(\"{total}\");\n}\n"
                .repeat(20);
        let mixed = "Grüße, 世界! 12345678 café — naïve\t\r\n".repeat(30);
        for text in [prose.as_str(), &code, &mixed, "", "a", "    indented"] {
            assert_eq!(count(bpe(), text), exact(text), "{text:?}");
        }
    }

    #[test]
    fn a_long_run_counts_as_its_bytes_and_the_rest_exactly() {
        let spaces = " ".repeat(100);
        let text = format!("hello{spaces}world");
        assert_eq!(count(bpe(), &text), exact("hello") + 100 + exact("world"));
        assert!(count(bpe(), &text) >= exact(&text));
    }

    /// Inputs that crash or stall the tokenizer when given whole: each is
    /// counted without a panic (the guard's counter does not move: the
    /// tokenizer never failed) and at no less than the byte-level bound.
    #[test]
    fn runs_that_break_the_tokenizer_are_bounded_without_calling_it() {
        let megabyte = 1 << 20;
        let texts = [
            " ".repeat(megabyte),
            "\n".repeat(megabyte),
            " \t".repeat(megabyte / 2),
            "A".repeat(megabyte),
            "a".repeat(megabyte),
            "=".repeat(megabyte),
            "é".repeat(megabyte / 2),
            format!("x{}y", " ".repeat(megabyte)),
        ];
        let failures = || FAILURES.load(Ordering::Relaxed);
        let before = failures();
        for text in &texts {
            let tokens = count(bpe(), text);
            assert!(tokens >= 1, "{}", text.len());
            assert!(tokens <= to_u64(text.len()));
        }
        assert_eq!(
            failures(),
            before,
            "the tokenizer was handed a run it failed on"
        );
    }
}
