//! Embeddings as small integers, so similarity is integer arithmetic: exact,
//! the same on every replica, and fast (the dot product of two 12-bit vectors
//! vectorizes to multiply-add instructions). Each vector also keeps its
//! signs as bits: the Hamming distance of two signatures estimates the angle
//! between them (a random hyperplane separates two vectors with probability
//! angle / π), at one XOR and one popcount per 64 dimensions, which is what a
//! large index searches first (`memory.rs`).

/// Components are scaled to ±4095: 12 bits keeps the cosine's error near
/// 1e-4, and 64 products of two such values still fit an `i32`.
const SCALE: i16 = 4095;
const CHUNK: usize = 64;
pub use crate::config::semantic_cache::ONE;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantized {
    components: Vec<i16>,
    /// The squared length, kept so a comparison costs one dot product.
    norm2: i64,
    /// Bit `i` is set when component `i` is positive.
    signs: Box<[u64]>,
}

impl Quantized {
    /// `None` for an empty vector, one of zero length, or one with a
    /// component that is not a finite number.
    pub fn from_f32(vector: &[f32]) -> Option<Quantized> {
        if vector.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let largest = vector.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        if largest <= 0.0 {
            return None;
        }
        let components = scale(vector, largest);
        let norm2 = dot(&components, &components);
        let signs = signs(&components);
        (norm2 > 0).then_some(Quantized {
            components,
            norm2,
            signs,
        })
    }

    /// Bit `i` of word `i / 64` is set when component `i` is positive.
    pub fn signs(&self) -> &[u64] {
        &self.signs
    }

    pub fn dimensions(&self) -> usize {
        self.components.len()
    }

    /// The cosine of the angle between two vectors, in millionths (negative
    /// directions count as 0). Vectors of different sizes are not similar.
    pub fn similarity(&self, other: &Quantized) -> u32 {
        if self.components.len() != other.components.len() {
            return 0;
        }
        let product = dot(&self.components, &other.components);
        if product <= 0 {
            return 0;
        }
        let lengths = u128::from(self.norm2.unsigned_abs())
            .saturating_mul(u128::from(other.norm2.unsigned_abs()))
            .isqrt();
        let scaled = u128::from(product.unsigned_abs()).saturating_mul(u128::from(ONE));
        u32::try_from(scaled / lengths.max(1))
            .unwrap_or(ONE)
            .min(ONE)
    }
}

#[expect(
    clippy::float_arithmetic,
    clippy::cast_possible_truncation,
    reason = "embeddings arrive as floats: scaled once here, compared as integers after"
)]
fn scale(vector: &[f32], largest: f32) -> Vec<i16> {
    let factor = f32::from(SCALE) / largest;
    vector
        .iter()
        .map(|x| {
            (x * factor)
                .round()
                .clamp(-f32::from(SCALE), f32::from(SCALE)) as i16
        })
        .collect()
}

/// Bits that differ between two sign arrays (`Quantized::signs`): about
/// dimensions × angle / π.
pub fn sign_distance(a: &[u64], b: &[u64]) -> u32 {
    a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
}

fn signs(components: &[i16]) -> Box<[u64]> {
    components
        .chunks(64)
        .map(|chunk| {
            chunk
                .iter()
                .enumerate()
                .filter(|(_, c)| **c > 0)
                .fold(0u64, |bits, (i, _)| bits | (1 << i))
        })
        .collect()
}

fn dot(a: &[i16], b: &[i16]) -> i64 {
    a.chunks(CHUNK)
        .zip(b.chunks(CHUNK))
        .map(|(x, y)| {
            let partial: i32 = x
                .iter()
                .zip(y)
                .map(|(p, q)| i32::from(*p) * i32::from(*q))
                .sum();
            i64::from(partial)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(v: &[f32]) -> Quantized {
        Quantized::from_f32(v).unwrap()
    }

    #[test]
    fn similarity_is_the_cosine_in_millionths() {
        assert_eq!(q(&[1.0, 0.0]).similarity(&q(&[2.0, 0.0])), ONE);
        assert_eq!(q(&[1.0, 0.0]).similarity(&q(&[0.0, 1.0])), 0);
        assert_eq!(q(&[1.0, 0.0]).similarity(&q(&[-1.0, 0.0])), 0);
        // cos(45°) = 0.707107
        let diagonal = q(&[1.0, 0.0]).similarity(&q(&[1.0, 1.0]));
        assert!((707_000..=707_200).contains(&diagonal), "{diagonal}");
        // 0.6·1 + 0.8·0 over unit lengths: 0.6
        let s = q(&[1.0, 0.0, 0.0]).similarity(&q(&[0.6, 0.8, 0.0]));
        assert!((599_900..=600_100).contains(&s), "{s}");
    }

    #[test]
    fn large_vectors_do_not_overflow_and_stay_exact_enough() {
        let a: Vec<f32> = (0..4096)
            .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 })
            .collect();
        assert_eq!(q(&a).similarity(&q(&a)), ONE);
        let mut b = a.clone();
        b[0] = -1.0;
        // One of 4096 components flipped: cos = 4094/4096 = 0.999512
        let s = q(&a).similarity(&q(&b));
        assert!((999_400..=999_600).contains(&s), "{s}");
    }

    #[test]
    fn the_sign_distance_counts_the_dimensions_whose_signs_differ() {
        let a: Vec<f32> = (0..130)
            .map(|i| if i % 3 == 0 { 1.0 } else { -1.0 })
            .collect();
        assert_eq!(sign_distance(q(&a).signs(), q(&a).signs()), 0);
        let opposite: Vec<f32> = a.iter().map(|x| -x).collect();
        assert_eq!(sign_distance(q(&a).signs(), q(&opposite).signs()), 130);
        let mut b = a.clone();
        b[0] = -1.0;
        b[129] = -b[129];
        assert_eq!(sign_distance(q(&a).signs(), q(&b).signs()), 2);
    }

    #[test]
    fn unusable_vectors_are_refused_and_sizes_must_match() {
        assert!(Quantized::from_f32(&[]).is_none());
        assert!(Quantized::from_f32(&[0.0, 0.0]).is_none());
        assert!(Quantized::from_f32(&[f32::NAN, 1.0]).is_none());
        assert_eq!(q(&[1.0, 0.0]).similarity(&q(&[1.0, 0.0, 0.0])), 0);
    }
}
