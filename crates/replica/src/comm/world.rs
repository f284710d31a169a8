//! The processes an engine is one of: the last level of the reduction hierarchy.
//!
//! Within a process, learners are reduced per device ([`crate::Synchroniser::reduce_device`])
//! and devices by the engine's [`crate::sync::AllReduce`]. When the job runs as several
//! processes (ranks, e.g. launched by `mpirun`), each rank's engine then sums its process
//! total with every other rank's through a [`ProcessGroup`] (host memory, one all-reduce per
//! process and iteration, not one per learner), and every device of every rank applies the
//! same total. A single process is [`Solo`], which does nothing. The MPI implementation lives
//! in the `crossbow-mpi` crate (feature `mpi`), so this crate needs no MPI.
//!
//! Every method is a collective: every rank calls the same methods in the same order (the
//! engine and the `crossbow` binary do), and each returns the same result on every rank.

use crate::error::{ReplicaError, Result};

/// A group of processes that reduce together. Every method is collective (see the module
/// documentation) and its result is identical, bit for bit, on every rank.
pub trait ProcessGroup: Send + Sync {
    /// This process's rank, in `0..size`.
    fn rank(&self) -> usize;

    /// Number of processes.
    fn size(&self) -> usize;

    /// Element-wise sum of `buf` over every rank, in place. The result must be bit-identical
    /// on every rank (the central models of all ranks must never drift apart).
    fn all_reduce_sum_f32(&self, buf: &mut [f32]) -> Result<()>;

    /// Element-wise sum of `buf` over every rank, in place (counts, loss sums).
    fn all_reduce_sum_f64(&self, buf: &mut [f64]) -> Result<()>;

    /// Every rank's `value`, by rank.
    fn all_gather_u64(&self, value: u64) -> Result<Vec<u64>>;

    /// Sends `buf` of rank `root` to every rank: on return every rank's `buf` is root's
    /// (resized to its length). For the checkpoint a resumed job starts from (rank 0 reads the
    /// file, every rank restores its slice). The default serves a single process only.
    fn broadcast_bytes(&self, root: usize, buf: &mut Vec<u8>) -> Result<()> {
        let _ = buf;
        single_only(self.size(), root, "a broadcast of bytes")
    }

    /// Every rank's `part`, by rank, on rank `root`; an empty list on the other ranks. For
    /// the checkpoint of a job (every rank's learners, written by rank 0). The default serves
    /// a single process only.
    fn gather_bytes(&self, root: usize, part: &[u8]) -> Result<Vec<Vec<u8>>> {
        single_only(self.size(), root, "a gather of bytes")?;
        Ok(vec![part.to_vec()])
    }

    /// Short description for logs (`"1 process"`, `"MPI rank 0 of 2 (Open MPI ...)"`).
    fn describe(&self) -> String {
        format!("rank {} of {}", self.rank(), self.size())
    }
}

/// What the default byte collectives accept: one process, root 0.
fn single_only(size: usize, root: usize, what: &str) -> Result<()> {
    if size > 1 {
        return Err(ReplicaError::Processes(format!(
            "this process group of {size} processes cannot do {what} (it implements only the sums)"
        )));
    }
    if root != 0 {
        return Err(ReplicaError::Processes(format!("{what}: root rank {root} does not exist (1 process)")));
    }
    Ok(())
}

/// One process alone: every collective is the identity.
#[derive(Clone, Copy, Debug, Default)]
pub struct Solo;

impl ProcessGroup for Solo {
    fn rank(&self) -> usize {
        0
    }

    fn size(&self) -> usize {
        1
    }

    fn all_reduce_sum_f32(&self, _buf: &mut [f32]) -> Result<()> {
        Ok(())
    }

    fn all_reduce_sum_f64(&self, _buf: &mut [f64]) -> Result<()> {
        Ok(())
    }

    fn all_gather_u64(&self, value: u64) -> Result<Vec<u64>> {
        Ok(vec![value])
    }

    fn describe(&self) -> String {
        "1 process".into()
    }
}

/// Where rank `rank`'s learners start in the global order, given every rank's learner count
/// (the sum of the counts of the ranks before it).
pub fn learner_offset(counts: &[usize], rank: usize) -> usize {
    counts.iter().take(rank).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solo_is_the_identity() {
        let s = Solo;
        let mut v = vec![1.0f32, 2.0];
        s.all_reduce_sum_f32(&mut v).unwrap();
        assert_eq!(v, [1.0, 2.0]);
        assert_eq!(s.all_gather_u64(7).unwrap(), [7]);
        assert_eq!((s.rank(), s.size()), (0, 1));
        let mut b = vec![1u8, 2];
        s.broadcast_bytes(0, &mut b).unwrap();
        assert_eq!(b, [1, 2]);
        assert_eq!(s.gather_bytes(0, &[3, 4]).unwrap(), [vec![3u8, 4]]);
        assert!(s.gather_bytes(1, &[3]).is_err(), "rank 1 does not exist");
        let e = s.broadcast_bytes(1, &mut b).unwrap_err().to_string();
        assert!(e.contains("root rank 1 does not exist"), "{e}");
    }

    #[test]
    fn offsets_are_prefix_sums() {
        assert_eq!(learner_offset(&[2, 3, 1], 0), 0);
        assert_eq!(learner_offset(&[2, 3, 1], 1), 2);
        assert_eq!(learner_offset(&[2, 3, 1], 2), 5);
    }
}
