//! Which elements a learner exchanges when, and how many partitions `auto` picks.

use std::ops::Range;

/// The largest `p` that `partitions=auto` picks: beyond it a gradient element would wait more
/// than 64 iterations before reaching the other learners.
pub const AUTO_MAX_PARTITIONS: usize = 64;

/// Elements `[q·len/p, (q+1)·len/p)`: partition `q` of `p` contiguous, nearly equal parts of a
/// flat `len`-element buffer (the sizes differ by at most one element). Every element lies
/// in exactly one partition.
pub fn partition_range(len: usize, p: usize, q: usize) -> Range<usize> {
    let p = p.max(1);
    let q = q.min(p);
    let at = |i: usize| ((i as u128 * len as u128) / p as u128) as usize;
    at(q)..at(q + 1).min(len)
}

/// The partition learner `slot` sends at `iteration`: `(iteration + slot) mod p`. Each learner
/// goes round-robin through all `p` partitions in any `p` consecutive iterations; the learners
/// are staggered by their slot, so that with `k >= p` every partition of the model is
/// exchanged by someone every iteration.
pub fn partition_sent(iteration: u64, slot: usize, p: usize) -> usize {
    let p = p.max(1) as u64;
    ((iteration % p + slot as u64 % p) % p) as usize
}

/// The `p` in force: one learner has no one to exchange with, so it sends everything (`p =
/// 1`, plain momentum SGD); no more partitions than elements.
pub fn effective_partitions(p: usize, learners: usize, len: usize) -> usize {
    if learners <= 1 { 1 } else { p.clamp(1, len.max(1)) }
}

/// The rule of `partitions=auto`: the fewest partitions whose exchange fits in one iteration.
/// Each of `k` learners sends `1/p` of a `model_bytes` model to each of the other `k − 1`
/// (Ako's peer-to-peer exchange), over a link of `bandwidth` bytes/s, while an iteration takes
/// `iteration_seconds`:
///
/// ```text
/// (k − 1) · model_bytes / (p · bandwidth) <= iteration_seconds
/// p = ceil((k − 1) · model_bytes / (bandwidth · iteration_seconds)),  1 <= p <= 64
/// ```
///
/// ```
/// use crossbow_ako::auto_partitions;
///
/// // 4 learners, a 1 MB model, 1 GB/s, 1 ms per iteration: 3 MB would take 3 ms, so p = 3.
/// assert_eq!(auto_partitions(1e6, 4, 1e9, 1e-3), 3);
/// // Fast links or one learner: everything every iteration.
/// assert_eq!(auto_partitions(1e6, 4, 1e12, 1e-3), 1);
/// assert_eq!(auto_partitions(1e6, 1, 1.0, 1e-3), 1);
/// ```
pub fn auto_partitions(model_bytes: f64, learners: usize, bandwidth: f64, iteration_seconds: f64) -> usize {
    if learners <= 1 {
        return 1;
    }
    let need = (learners - 1) as f64 * model_bytes / (bandwidth * iteration_seconds);
    if need.is_nan() {
        return 1;
    }
    // Float-to-int `as` saturates; the clamp bounds it anyway.
    (need.ceil().max(1.0).min(AUTO_MAX_PARTITIONS as f64) as usize).clamp(1, AUTO_MAX_PARTITIONS)
}
