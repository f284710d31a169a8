use rand::{Rng as _, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

/// A seeded, reproducible random generator (ChaCha8).
///
/// The same seed always gives the same sequence on every platform. [`Rng::derive`] makes
/// independent, reproducible streams (one per learner, per data worker, ...) from one seed,
/// and [`Rng::state`] / [`Rng::from_state`] save and restore the position for checkpoints.
#[derive(Clone, Debug)]
pub struct Rng {
    inner: ChaCha8Rng,
    seed: u64,
}

/// The full state of an [`Rng`]: enough to continue the exact same sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RngState {
    /// The seed the generator was created with.
    pub seed: u64,
    /// The ChaCha stream number.
    pub stream: u64,
    /// The position in the stream, in 32-bit words.
    pub word_pos: u128,
}

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self::derive(seed, 0)
    }

    /// An independent generator for stream `stream` of `seed`. Different streams of the same
    /// seed never overlap.
    pub fn derive(seed: u64, stream: u64) -> Self {
        let mut inner = ChaCha8Rng::seed_from_u64(seed);
        inner.set_stream(stream);
        Rng { inner, seed }
    }

    /// Restores a generator saved with [`Rng::state`].
    pub fn from_state(s: RngState) -> Self {
        let mut r = Self::derive(s.seed, s.stream);
        r.inner.set_word_pos(s.word_pos);
        r
    }

    /// The current state (seed, stream and position).
    pub fn state(&self) -> RngState {
        RngState { seed: self.seed, stream: self.inner.get_stream(), word_pos: self.inner.get_word_pos() }
    }

    /// A uniform `u32`.
    pub fn next_u32(&mut self) -> u32 {
        self.inner.next_u32()
    }

    /// A uniform `u64`.
    pub fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }

    /// A uniform `f32` in `[0, 1)`.
    pub fn uniform(&mut self) -> f32 {
        self.inner.random::<f32>()
    }

    /// A uniform `f32` in `[low, high)`.
    pub fn uniform_range(&mut self, low: f32, high: f32) -> f32 {
        low + (high - low) * self.uniform()
    }

    /// A standard normal `f32`.
    pub fn normal(&mut self) -> f32 {
        StandardNormal.sample(&mut self.inner)
    }

    /// A uniform integer in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        assert!(n > 0, "Rng::below(0)");
        self.inner.random_range(0..n)
    }

    /// True with probability `p`.
    pub fn bernoulli(&mut self, p: f32) -> bool {
        self.uniform() < p
    }

    /// Shuffles a slice in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.inner.random_range(0..=i);
            v.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut c = Rng::new(43);
        assert_ne!(Rng::new(42).next_u64(), c.next_u64());
    }

    #[test]
    fn streams_differ() {
        let mut a = Rng::derive(7, 0);
        let mut b = Rng::derive(7, 1);
        let va: Vec<u32> = (0..8).map(|_| a.next_u32()).collect();
        let vb: Vec<u32> = (0..8).map(|_| b.next_u32()).collect();
        assert_ne!(va, vb);
    }

    #[test]
    fn state_round_trip() {
        let mut a = Rng::derive(99, 3);
        for _ in 0..17 {
            a.next_u32();
        }
        let s = a.state();
        let mut b = Rng::from_state(s);
        for _ in 0..50 {
            assert_eq!(a.next_u32(), b.next_u32());
        }
    }

    #[test]
    fn shuffle_is_a_permutation() {
        let mut r = Rng::new(1);
        let mut v: Vec<usize> = (0..100).collect();
        r.shuffle(&mut v);
        let mut s = v.clone();
        s.sort();
        assert_eq!(s, (0..100).collect::<Vec<_>>());
        assert_ne!(v, (0..100).collect::<Vec<_>>());
    }
}
