//! Which all-reduce sums the devices' contributions: the host path ([`crate::sync::HostAllReduce`]
//! per process, then the [`ProcessGroup`] across ranks) or NCCL ([`NcclAllReduce`]: one
//! communicator over every GPU of every rank, one all-reduce per iteration, no host copy).
//!
//! Chosen once, when the engine is made ([`Engine::in_world`]), by every rank alike: each
//! rank offers what it can ([`NcclOffer`]: the `--all-reduce` choice, how many devices, whether
//! all are CUDA devices, whether NCCL loads), the offers are all-gathered, and [`decide`] picks
//! the same [`Plan`] on every rank from the same table:
//!
//! | `--all-reduce` | every device of every rank is a GPU and NCCL loads everywhere | otherwise |
//! |---|---|---|
//! | `host` | host | host |
//! | `auto` (default) | NCCL when there are 2 or more GPUs in all, else host (nothing to sum) | host |
//! | `nccl` | NCCL (even with one GPU: a communicator of one rank) | error naming the flag, the rank and why |
//!
//! With NCCL, rank 0 makes the `ncclUniqueId`, [`ProcessGroup::broadcast_bytes`] gives it to
//! every rank, and each rank's GPUs become ranks `first_rank ..` of one communicator (GPUs
//! numbered rank by rank, device by device). NCCL is loaded only when the choice is not
//! `host` and there is something to sum, so a machine without it runs as before.

use std::fmt;
use std::str::FromStr;

use crossbow_kernels::Backend;
use crossbow_kernels::cuda::CudaBackend;
use crossbow_kernels::cuda::nccl::{Communicators, UniqueId};

use super::Engine;
use crate::error::{ReplicaError, Result};
use crate::sync::AllReduce;
use crate::world::ProcessGroup;

/// The `--all-reduce` choice (config key `all_reduce`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AllReduceChoice {
    /// NCCL when every device of every rank is a GPU, NCCL loads, and there are 2+ GPUs.
    #[default]
    Auto,
    /// Always through host memory (and MPI across ranks).
    Host,
    /// Always NCCL; an error when it cannot be used.
    Nccl,
}

impl AllReduceChoice {
    fn code(self) -> u64 {
        match self {
            AllReduceChoice::Host => 0,
            AllReduceChoice::Auto => 1,
            AllReduceChoice::Nccl => 2,
        }
    }
}

impl fmt::Display for AllReduceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AllReduceChoice::Auto => "auto",
            AllReduceChoice::Host => "host",
            AllReduceChoice::Nccl => "nccl",
        })
    }
}

impl FromStr for AllReduceChoice {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(AllReduceChoice::Auto),
            "host" => Ok(AllReduceChoice::Host),
            "nccl" => Ok(AllReduceChoice::Nccl),
            _ => Err(format!("unknown all-reduce '{s}' (expected auto, host or nccl)")),
        }
    }
}

/// What one rank's devices can do: sent to every rank before the choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NcclOffer {
    /// The rank's `--all-reduce` (a CPU factory reports `host`).
    pub choice: AllReduceChoice,
    /// The rank's devices.
    pub devices: usize,
    /// Whether every one of them is a GPU.
    pub all_cuda: bool,
    /// Whether NCCL loaded (`Err`: why not, or that it was not needed and not loaded).
    pub ready: std::result::Result<(), String>,
}

impl NcclOffer {
    /// The offer of devices that are not GPUs.
    pub fn not_cuda(devices: usize) -> Self {
        NcclOffer {
            choice: AllReduceChoice::Host,
            devices,
            all_cuda: false,
            ready: Err("the devices are not GPUs".into()),
        }
    }

    /// The offer as one number for [`ProcessGroup::all_gather_u64`].
    pub fn encode(&self) -> u64 {
        ((self.devices as u64) << 8)
            | (self.choice.code() << 2)
            | ((self.all_cuda as u64) << 1)
            | self.ready.is_ok() as u64
    }
}

/// One rank's offer, as decoded from the all-gathered table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Code {
    choice: u64,
    devices: usize,
    all_cuda: bool,
    ready: bool,
}

fn decode(c: u64) -> Code {
    Code { choice: (c >> 2) & 3, devices: (c >> 8) as usize, all_cuda: (c >> 1) & 1 == 1, ready: c & 1 == 1 }
}

/// The all-reduce every rank uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// The host path (and the process group across ranks).
    Host,
    /// One NCCL communicator of `ranks` GPUs; this rank's are `first_rank ..`.
    Nccl {
        /// GPUs of every rank.
        ranks: usize,
        /// This rank's first GPU's NCCL rank.
        first_rank: usize,
    },
}

/// The plan, from every rank's [`NcclOffer::encode`] (by rank), as seen by rank `me`
/// (`my_reason`: why NCCL did not load here, if it did not). The same table gives the same
/// plan on every rank; an `Err` (only for `nccl`) names the flag, the first rank that cannot
/// take part, and why.
pub fn decide(offers: &[u64], me: usize, my_reason: Option<&str>) -> std::result::Result<Plan, String> {
    let codes: Vec<Code> = offers.iter().map(|&c| decode(c)).collect();
    // All ranks run the same command; a rank of CPU devices reports `host` whatever it was
    // given, so the strongest choice of any rank is the job's.
    let choice = codes.iter().map(|c| c.choice).max().unwrap_or(0);
    if choice == AllReduceChoice::Host.code() {
        return Ok(Plan::Host);
    }
    let ranks: usize = codes.iter().map(|c| c.devices).sum();
    let blocker = codes.iter().enumerate().find(|(_, c)| !(c.all_cuda && c.devices > 0 && c.ready));
    if choice == AllReduceChoice::Auto.code() && (blocker.is_some() || ranks < 2) {
        return Ok(Plan::Host);
    }
    if let Some((r, c)) = blocker {
        let who = if offers.len() > 1 { format!("rank {r}") } else { "this process".to_string() };
        let why = if !c.all_cuda || c.devices == 0 {
            format!("{who} has devices that are not GPUs (NCCL sums GPU buffers only; use --devices cuda:...)")
        } else if r == me {
            format!("NCCL cannot be used on {who}: {}", my_reason.unwrap_or("it did not load"))
        } else {
            format!("NCCL cannot be used on {who} (its own message says why)")
        };
        return Err(format!("--all-reduce nccl: {why}; use --all-reduce host or auto"));
    }
    let first_rank = codes.iter().take(me).map(|c| c.devices).sum();
    Ok(Plan::Nccl { ranks, first_rank })
}

/// The NCCL all-reduce over this process's GPUs (and, through the same communicator, every
/// other rank's): in place, on each device backend's stream, so the engine's stream order
/// (contribution, then all-reduce, then the central-model update, all on the device's
/// synchronisation stream) holds as with the host all-reduce. Replaces the process group's
/// host all-reduce too ([`AllReduce::spans_ranks`]).
pub struct NcclAllReduce {
    comms: Communicators,
}

impl NcclAllReduce {
    /// Creates the communicators of `backends` (this process's device backends, in device
    /// order) as ranks `first_rank ..` of `ranks` (a collective over every rank).
    pub fn new(id: &UniqueId, first_rank: usize, ranks: usize, backends: &[&CudaBackend]) -> Result<Self> {
        Ok(NcclAllReduce { comms: Communicators::init(id, first_rank, ranks, backends)? })
    }
}

impl AllReduce<CudaBackend> for NcclAllReduce {
    fn all_reduce_sum(
        &self,
        parts: &mut [(&CudaBackend, &mut <CudaBackend as crossbow_kernels::Storage>::Buffer)],
        len: usize,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.comms.all_reduce_sum(parts, len)?;
        Ok(())
    }

    fn spans_ranks(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        format!("nccl ({} GPU(s) in all)", self.comms.ranks())
    }
}

impl<B: Backend> Engine<B> {
    /// Decides the all-reduce with every rank (a collective: see the module docs) and, for
    /// NCCL, replaces the engine's all-reduce with the factory's NCCL one.
    pub(super) fn choose_all_reduce(&mut self) -> Result<()> {
        let offer = self.factory.nccl_offer(self.world.size());
        let table = self.world.all_gather_u64(offer.encode())?;
        let plan = decide(&table, self.world.rank(), offer.ready.as_ref().err().map(String::as_str))
            .map_err(ReplicaError::Config)?;
        let Plan::Nccl { ranks, first_rank } = plan else {
            return Ok(());
        };
        let id = shared_id(&*self.world)?;
        let backends: Vec<&B> = self.devices.iter().map(|d| &d.backend).collect();
        self.allreduce = self.factory.nccl_all_reduce(&backends, &id, first_rank, ranks)?;
        Ok(())
    }

    /// How the devices' contributions are summed (`"host"`, `"nccl (4 GPU(s) in all)"`).
    pub fn all_reduce_path(&self) -> String {
        self.allreduce.describe()
    }
}

/// Rank 0's new NCCL unique id, on every rank of `world` (a collective). When rank 0 cannot
/// make one it broadcasts nothing, and every rank fails (rank 0 with NCCL's reason).
pub fn shared_id(world: &dyn ProcessGroup) -> Result<UniqueId> {
    let mut bytes = Vec::new();
    let mut mine = None;
    if world.rank() == 0 {
        match UniqueId::new() {
            Ok(id) => bytes = id.as_bytes().to_vec(),
            Err(e) => mine = Some(e),
        }
    }
    world.broadcast_bytes(0, &mut bytes)?;
    if let Some(e) = mine {
        return Err(e.into());
    }
    if bytes.is_empty() {
        return Err(ReplicaError::Processes("rank 0 could not make the NCCL unique id (see its message)".into()));
    }
    Ok(UniqueId::from_bytes(&bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(choice: AllReduceChoice, devices: usize, all_cuda: bool, ready: bool) -> u64 {
        NcclOffer { choice, devices, all_cuda, ready: if ready { Ok(()) } else { Err("x".into()) } }.encode()
    }

    use AllReduceChoice::{Auto, Host, Nccl};

    #[test]
    fn choices_parse_and_print() {
        for c in [Auto, Host, Nccl] {
            assert_eq!(c.to_string().parse::<AllReduceChoice>().unwrap(), c);
        }
        let e = "mpi".parse::<AllReduceChoice>().unwrap_err();
        assert!(e.contains("'mpi'") && e.contains("auto, host or nccl"), "{e}");
        assert_eq!(AllReduceChoice::default(), Auto);
    }

    #[test]
    fn offers_round_trip() {
        for (ch, d, a, r) in [(Auto, 3, true, true), (Host, 0, false, false), (Nccl, 1000, true, false)] {
            let c = decode(offer(ch, d, a, r));
            assert_eq!((c.choice, c.devices, c.all_cuda, c.ready), (ch.code(), d, a, r));
        }
    }

    #[test]
    fn host_is_kept_unless_every_gpu_can_use_nccl() {
        // One process.
        assert_eq!(decide(&[offer(Host, 4, true, true)], 0, None), Ok(Plan::Host));
        assert_eq!(decide(&[offer(Auto, 4, true, true)], 0, None), Ok(Plan::Nccl { ranks: 4, first_rank: 0 }));
        // auto with one GPU: nothing to sum, host (NCCL not even needed).
        assert_eq!(decide(&[offer(Auto, 1, true, true)], 0, None), Ok(Plan::Host));
        // nccl with one GPU: a communicator of one rank.
        assert_eq!(decide(&[offer(Nccl, 1, true, true)], 0, None), Ok(Plan::Nccl { ranks: 1, first_rank: 0 }));
        // auto without NCCL or on CPU devices: host.
        assert_eq!(decide(&[offer(Auto, 2, true, false)], 0, Some("no lib")), Ok(Plan::Host));
        assert_eq!(decide(&[NcclOffer::not_cuda(2).encode()], 0, None), Ok(Plan::Host));
        // nccl without NCCL: the flag and the reason.
        let e = decide(&[offer(Nccl, 2, true, false)], 0, Some("libnccl.so not found")).unwrap_err();
        assert!(e.starts_with("--all-reduce nccl:") && e.contains("libnccl.so not found"), "{e}");
        assert!(e.contains("this process"), "{e}");
    }

    #[test]
    fn ranks_agree_and_number_the_gpus_rank_by_rank() {
        let t = [offer(Auto, 2, true, true), offer(Auto, 1, true, true), offer(Auto, 3, true, true)];
        let plans: Vec<Plan> = (0..3).map(|r| decide(&t, r, None).unwrap()).collect();
        assert_eq!(
            plans,
            [
                Plan::Nccl { ranks: 6, first_rank: 0 },
                Plan::Nccl { ranks: 6, first_rank: 2 },
                Plan::Nccl { ranks: 6, first_rank: 3 }
            ]
        );
        // One GPU per rank on two ranks: NCCL under auto (two GPUs in all).
        let t = [offer(Auto, 1, true, true), offer(Auto, 1, true, true)];
        assert_eq!(decide(&t, 1, None), Ok(Plan::Nccl { ranks: 2, first_rank: 1 }));
        // A CPU rank (which reports host) makes auto fall back to host on every rank...
        let t = [offer(Auto, 1, true, true), NcclOffer::not_cuda(1).encode()];
        assert_eq!(decide(&t, 0, None), Ok(Plan::Host));
        assert_eq!(decide(&t, 1, None), Ok(Plan::Host));
        // ... and nccl fail on every rank, naming the CPU rank.
        let t = [offer(Nccl, 1, true, true), NcclOffer::not_cuda(1).encode()];
        for me in 0..2 {
            let e = decide(&t, me, None).unwrap_err();
            assert!(e.contains("rank 1 has devices that are not GPUs"), "{e}");
        }
        // NCCL missing on rank 1 only: rank 1 says why, rank 0 points at rank 1.
        let t = [offer(Nccl, 1, true, true), offer(Nccl, 1, true, false)];
        let e = decide(&t, 1, Some("libnccl.so not found")).unwrap_err();
        assert!(e.contains("rank 1: libnccl.so not found"), "{e}");
        let e = decide(&t, 0, None).unwrap_err();
        assert!(e.contains("rank 1 (its own message says why)"), "{e}");
    }

    #[test]
    fn a_single_process_shares_its_own_id() {
        // Solo: rank 0 makes the id itself; without NCCL (or without the `cuda` feature) that
        // fails with the reason, never with "rank 0 could not ...".
        match shared_id(&crate::world::Solo) {
            Ok(id) => assert_eq!(id.as_bytes().len(), 128),
            Err(e) => assert!(!e.to_string().contains("rank 0 could not"), "{e}"),
        }
    }
}
