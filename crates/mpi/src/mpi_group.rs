//! [`MpiGroup`]: the ranks of an MPI job as a [`ProcessGroup`], every collective with a
//! deadline.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbow_replica::{ProcessGroup, ReplicaError, Result};
use mpi::collective::SystemOperation;
use mpi::datatype::Equivalence;
use mpi::environment::{Threading, Universe};
use mpi::request::{Request, Scope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use crate::Peer;

/// Tag of the small "I am at collective #n" messages each rank sends every other rank before
/// a collective and, while it waits in one, a few times per deadline: a rank whose deadline
/// passes names who never came, or came and then fell silent (stopped inside it).
const ARRIVAL_TAG: i32 = 0x0C0B;

/// Tag of the byte messages of [`MpiGroup::gather_bytes`].
const DATA_TAG: i32 = 0x0C0C;

/// Largest message of the byte collectives (MPI counts are 32-bit): longer buffers go in
/// pieces of this size, each with its own deadline.
const CHUNK: usize = 1 << 28;

/// Exit code of the ranks stopped by `MPI_Abort` after a deadline.
pub const TIMEOUT_EXIT_CODE: i32 = 3;

/// The MPI state, used by one thread at a time (behind the [`MpiGroup`]'s mutex).
struct Inner {
    world: SimpleCommunicator,
    /// Collectives started so far (the number of the current one).
    seq: u64,
    /// What was last heard from each rank: the collective it reached, and when.
    seen: Vec<(u64, Instant)>,
    /// Finalises MPI when dropped (after `world`: fields drop in order).
    _universe: Universe,
}

// SAFETY: MPI is initialised with `Threading::Serialized` (checked in `MpiGroup::init`): any
// thread may call MPI as long as no two do at once. `Inner` holds the only communicator and is
// only reached through `MpiGroup::inner`'s mutex, so calls never overlap.
unsafe impl Send for Inner {}

/// The ranks of the job (`MPI_COMM_WORLD`) as a [`ProcessGroup`]. Sums are bit-identical on
/// every rank by construction: with 2 ranks `MPI_Allreduce` (each rank adds the same two
/// numbers, and `a + b == b + a` exactly), with more a gather to rank 0, which adds the
/// buffers in rank order (as one process adds its devices), followed by a broadcast of its
/// result (rank 0 receives every rank's buffer: `p` times the traffic of a tree reduction at
/// the root, the price of a sum in a fixed order). Every collective is non-blocking and polled against a deadline;
/// before it each rank tells the others it arrived, so that a rank whose deadline passes
/// names the ranks that never came, then stops the whole job with `MPI_Abort`.
pub struct MpiGroup {
    inner: Mutex<Inner>,
    rank: usize,
    size: usize,
    timeout: Duration,
    library: String,
}

impl MpiGroup {
    /// Initialises MPI (`MPI_Init_thread`, serialized threading) with `timeout` as the
    /// deadline of every collective. Errors: MPI was already initialised, or the library
    /// cannot give serialized threading.
    pub fn init(timeout: Duration) -> Result<Self, String> {
        let (universe, threading) = mpi::initialize_with_threading(Threading::Serialized)
            .ok_or_else(|| "MPI was already initialised in this process".to_string())?;
        if !matches!(threading, Threading::Serialized | Threading::Multiple) {
            return Err(format!(
                "the MPI library gives only {threading:?} threading; crossbow needs Serialized (calls from any one thread at a time)"
            ));
        }
        let world = universe.world();
        let rank = world.rank() as usize;
        let size = world.size() as usize;
        let library = mpi::environment::library_version()
            .ok()
            .and_then(|v| v.split([',', '\n']).next().map(|l| l.trim().to_string()))
            .unwrap_or_else(|| "unknown MPI library".into());
        Ok(MpiGroup {
            inner: Mutex::new(Inner { world, seq: 0, seen: vec![(0, Instant::now()); size], _universe: universe }),
            rank,
            size,
            timeout,
            library,
        })
    }

    /// The deadline of every collective.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Stops every rank of the job (`MPI_Abort`) with exit code `code`: what a rank does when
    /// it fails alone, so that the others do not wait for it until their deadline.
    pub fn abort(&self, code: i32) -> ! {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.world.abort(code)
    }

    fn check_root(&self, root: usize) -> Result<()> {
        if root >= self.size {
            return Err(ReplicaError::Processes(format!("root rank {root} does not exist ({} ranks)", self.size)));
        }
        Ok(())
    }

    fn lock(&self) -> Result<MutexGuard<'_, Inner>> {
        self.inner.lock().map_err(|_| ReplicaError::Processes("the MPI state is poisoned by a panic".into()))
    }

    /// Element-wise sum over the ranks, identical on every rank (see the type's docs).
    fn sum<T>(&self, buf: &mut [T], what: &str) -> Result<()>
    where
        T: Equivalence + Copy + std::ops::AddAssign,
        [T]: Buffer + BufferMut,
    {
        if self.size <= 1 {
            return Ok(());
        }
        let mut g = self.lock()?;
        let Inner { world, seq, seen, .. } = &mut *g;
        let send = buf.to_vec();
        let sum = SystemOperation::sum();
        let n = arrive(world, seq, self.rank);
        if self.size == 2 {
            mpi::request::scope(|sc| {
                let req = world.immediate_all_reduce_into(sc, &send[..], &mut *buf, sum);
                wait(world, seen, n, self.timeout, what, req);
            });
            return Ok(());
        }
        // More ranks: every rank's buffer to rank 0, added there in rank order (the order in
        // which one process adds its devices, so 3 ranks of 1 device are bit-identical to 1
        // process of 3; MPI_Reduce may add in any order), then broadcast.
        let len = buf.len();
        if len == 0 {
            return Ok(());
        }
        if len.checked_mul(self.size).is_none_or(|t| t > i32::MAX as usize) {
            return Err(ReplicaError::Processes(format!(
                "{what}: {len} values x {} ranks exceed MPI's count limit of one gather",
                self.size
            )));
        }
        let root = world.process_at_rank(0);
        if self.rank == 0 {
            let mut all = vec![send[0]; len * self.size];
            mpi::request::scope(|sc| {
                let req = root.immediate_gather_into_root(sc, &send[..], &mut all[..]);
                wait(world, seen, n, self.timeout, what, req);
            });
            buf.copy_from_slice(&all[..len]);
            for part in all[len..].chunks_exact(len) {
                for (b, v) in buf.iter_mut().zip(part) {
                    *b += *v;
                }
            }
        } else {
            mpi::request::scope(|sc| {
                let req = root.immediate_gather_into(sc, &send[..]);
                wait(world, seen, n, self.timeout, what, req);
            });
        }
        let n = arrive(world, seq, self.rank);
        mpi::request::scope(|sc| {
            let req = root.immediate_broadcast_into(sc, &mut *buf);
            wait(world, seen, n, self.timeout, what, req);
        });
        Ok(())
    }
}

impl ProcessGroup for MpiGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_reduce_sum_f32(&self, buf: &mut [f32]) -> Result<()> {
        self.sum(buf, "the all-reduce of the central-model update")
    }

    fn all_reduce_sum_f64(&self, buf: &mut [f64]) -> Result<()> {
        self.sum(buf, "a sum of counts")
    }

    fn all_gather_u64(&self, value: u64) -> Result<Vec<u64>> {
        let mut out = vec![0u64; self.size];
        if self.size <= 1 {
            out[0] = value;
            return Ok(out);
        }
        let mut g = self.lock()?;
        let Inner { world, seq, seen, .. } = &mut *g;
        let n = arrive(world, seq, self.rank);
        mpi::request::scope(|sc| {
            let req = world.immediate_all_gather_into(sc, &value, &mut out[..]);
            wait(world, seen, n, self.timeout, "the agreement on every rank's learner count", req);
        });
        Ok(out)
    }

    /// Root's length first, then the bytes in pieces of at most [`CHUNK`], each a
    /// broadcast with the deadline.
    fn broadcast_bytes(&self, root: usize, buf: &mut Vec<u8>) -> Result<()> {
        self.check_root(root)?;
        if self.size <= 1 {
            return Ok(());
        }
        let mut g = self.lock()?;
        let Inner { world, seq, seen, .. } = &mut *g;
        let what = "a broadcast of bytes (the checkpoint resumed, or the NCCL unique id)";
        let from = world.process_at_rank(root as i32);
        let mut len = buf.len() as u64;
        let n = arrive(world, seq, self.rank);
        mpi::request::scope(|sc| {
            let req = from.immediate_broadcast_into(sc, &mut len);
            wait(world, seen, n, self.timeout, what, req);
        });
        let len = usize::try_from(len)
            .map_err(|_| ReplicaError::Processes(format!("{what}: {len} bytes do not fit in memory")))?;
        if self.rank != root {
            buf.clear();
            buf.resize(len, 0);
        }
        for piece in buf.chunks_mut(CHUNK) {
            let n = arrive(world, seq, self.rank);
            mpi::request::scope(|sc| {
                let req = from.immediate_broadcast_into(sc, piece);
                wait(world, seen, n, self.timeout, what, req);
            });
        }
        Ok(())
    }

    /// Every rank's length (an all-gather), then each other rank's bytes to `root` in rank
    /// order, point to point, in pieces of at most [`CHUNK`], each with the deadline.
    fn gather_bytes(&self, root: usize, part: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.check_root(root)?;
        if self.size <= 1 {
            return Ok(vec![part.to_vec()]);
        }
        let lens = self.all_gather_u64(part.len() as u64)?;
        let mut g = self.lock()?;
        let Inner { world, seq, seen, .. } = &mut *g;
        let what = "the gather of every rank's part of a checkpoint";
        let n = arrive(world, seq, self.rank);
        if self.rank != root {
            let to = world.process_at_rank(root as i32);
            for piece in part.chunks(CHUNK) {
                mpi::request::scope(|sc| {
                    let req = to.immediate_send_with_tag(sc, piece, DATA_TAG);
                    wait(world, seen, n, self.timeout, what, req);
                });
            }
            return Ok(vec![]);
        }
        let mut out = Vec::with_capacity(self.size);
        for (r, &len) in lens.iter().enumerate() {
            if r == root {
                out.push(part.to_vec());
                continue;
            }
            let len = usize::try_from(len)
                .map_err(|_| ReplicaError::Processes(format!("{what}: rank {r}'s {len} bytes do not fit in memory")))?;
            let mut buf = vec![0u8; len];
            let from = world.process_at_rank(r as i32);
            for piece in buf.chunks_mut(CHUNK) {
                mpi::request::scope(|sc| {
                    let req = from.immediate_receive_into_with_tag(sc, piece, DATA_TAG);
                    wait(world, seen, n, self.timeout, what, req);
                });
            }
            out.push(buf);
        }
        Ok(out)
    }

    fn describe(&self) -> String {
        format!("MPI rank {} of {} ({})", self.rank, self.size, self.library)
    }
}

/// Starts the next collective: numbers it and tells every other rank this one reached it.
fn arrive(world: &SimpleCommunicator, seq: &mut u64, rank: usize) -> u64 {
    *seq += 1;
    tell(world, *seq, rank);
    *seq
}

/// Tells every other rank that this one is at collective `n`.
fn tell(world: &SimpleCommunicator, n: u64, rank: usize) {
    for r in 0..world.size() {
        if r as usize != rank {
            // 8 bytes: sent eagerly, so this returns even if rank `r` is stopped.
            world.process_at_rank(r).send_with_tag(&n, ARRIVAL_TAG);
        }
    }
}

/// Reads every arrival message that came in.
fn drain(world: &SimpleCommunicator, seen: &mut [(u64, Instant)]) {
    while let Some((msg, status)) = world.any_process().immediate_matched_probe_with_tag(ARRIVAL_TAG) {
        let (n, _) = msg.matched_receive::<u64>();
        if let Some(s) = seen.get_mut(status.source_rank() as usize) {
            *s = (s.0.max(n), Instant::now());
        }
    }
}

/// Polls `req` until it completes; past `timeout` prints which ranks never reached
/// collective `n` and stops the job.
fn wait<'a, D: ?Sized, S: Scope<'a>>(
    world: &SimpleCommunicator,
    seen: &mut [(u64, Instant)],
    n: u64,
    timeout: Duration,
    what: &str,
    mut req: Request<'a, D, S>,
) {
    let start = Instant::now();
    let me = world.rank() as usize;
    // While waiting, tell the others this rank is alive 8 times per deadline; a rank silent
    // for over 3 of those intervals is stopped or hung.
    let beat = timeout / 8;
    let mut last_beat = start;
    let mut polls = 0u64;
    // Time this rank spent suspended (a gap between two polls longer than a beat: it was
    // stopped or starved, not waiting): it must not then blame the others for its own hang.
    let mut last_poll = start;
    let mut suspended = Duration::ZERO;
    loop {
        drain(world, seen);
        match req.test() {
            Ok(_) => return,
            Err(r) => req = r,
        }
        let now = Instant::now();
        let gap = now.duration_since(last_poll);
        if gap > beat {
            suspended += gap;
        }
        last_poll = now;
        if now.duration_since(last_beat) >= beat {
            tell(world, n, me);
            last_beat = now;
        }
        if now.duration_since(start) >= timeout {
            let peers: Vec<Option<Peer>> = seen
                .iter()
                .enumerate()
                .map(|(r, (reached, heard))| {
                    (r != me).then(|| Peer { reached: *reached, silent_for: now.duration_since(*heard).as_secs_f64() })
                })
                .collect();
            let limit = 3.0 * beat.as_secs_f64();
            let msg = crate::timeout_message_after(me, what, n, timeout, limit, &peers, suspended.as_secs_f64());
            // One write, so that lines of several ranks do not run together.
            let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("crossbow: error: {msg}\n").as_bytes());
            world.abort(TIMEOUT_EXIT_CODE);
        }
        polls += 1;
        // Progress needs polls (MPI moves a non-blocking collective on in `test`), but a
        // waiting rank must not take the cores its own devices' threads need.
        if polls < 100 {
            std::hint::spin_loop();
        } else if polls < 2000 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}
