//! Several processes (ranks): `mpirun -np N crossbow train ...` or `srun crossbow train ...`.
//!
//! [`World::start`] looks at the launcher's environment (`crossbow_mpi::detect`): a process
//! started by hand is alone ([`crossbow_replica::Solo`]); one started as a rank of several
//! joins the MPI job (built with the `mpi` feature) or refuses to train alone (built
//! without). Under MPI rank 0 prints; every rank writes its own metrics file
//! ([`World::metrics_path`]: rank 0 the file given, rank `r` the same name with `.rank<r>`
//! before the extension), every record carrying the rank.

use std::path::{Path, PathBuf};
use std::sync::Arc;
#[cfg(feature = "mpi")]
use std::time::Duration;

use crossbow_replica::{ProcessGroup, Solo};

use crate::error::SessionError;

/// The processes of this run and, under MPI, the handle that can stop them all.
pub struct World {
    /// What the engine reduces with.
    pub group: Arc<dyn ProcessGroup>,
    #[cfg(feature = "mpi")]
    mpi: Option<Arc<crossbow_mpi::MpiGroup>>,
}

impl World {
    /// One process.
    pub fn solo() -> Self {
        World {
            group: Arc::new(Solo),
            #[cfg(feature = "mpi")]
            mpi: None,
        }
    }

    /// The processes this one was started among; `timeout` (`--mpi-timeout`, seconds) is the
    /// deadline of every collective between ranks.
    pub fn start(timeout: Option<f64>) -> Result<Self, SessionError> {
        if let Some(t) = timeout
            && !(t.is_finite() && t > 0.0)
        {
            return Err(SessionError::usage(format!("--mpi-timeout {t}: must be a positive number of seconds")));
        }
        let launch = crossbow_mpi::detect().map_err(|e| SessionError::usage(format!("launcher environment: {e}")))?;
        let Some(launch) = launch.filter(|l| l.size > 1) else {
            return Ok(World::solo());
        };
        Self::join(launch, timeout)
    }

    #[cfg(feature = "mpi")]
    fn join(launch: crossbow_mpi::Launch, timeout: Option<f64>) -> Result<Self, SessionError> {
        let timeout = timeout.map(Duration::from_secs_f64).unwrap_or(crossbow_mpi::DEFAULT_TIMEOUT);
        let g = crossbow_mpi::MpiGroup::init(timeout).map_err(|e| SessionError::run(format!("MPI: {e}")))?;
        if g.size() != launch.size {
            return Err(SessionError::run(format!(
                "{} started {} processes, but MPI sees {}: is this crossbow linked with the MPI library of that launcher?",
                launch.launcher,
                launch.size,
                g.size()
            )));
        }
        let g = Arc::new(g);
        Ok(World { group: Arc::clone(&g) as Arc<dyn ProcessGroup>, mpi: Some(g) })
    }

    #[cfg(not(feature = "mpi"))]
    fn join(launch: crossbow_mpi::Launch, _timeout: Option<f64>) -> Result<Self, SessionError> {
        Err(SessionError::usage(format!(
            "this process is rank {} of {} started by {}, but this crossbow was built without MPI: every rank would \
             train alone on all the data. Build it with `cargo build --release -p crossbow-cli --features mpi` \
             (README: \"Several processes and servers\")",
            launch.rank, launch.size, launch.launcher
        )))
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.group.rank()
    }

    /// Number of processes.
    pub fn size(&self) -> usize {
        self.group.size()
    }

    /// This rank's metrics file for `--metrics path`: `path` itself on rank 0 (and alone),
    /// `<stem>.rank<r>.<ext>` on rank `r`.
    pub fn metrics_path(&self, path: &Path) -> PathBuf {
        rank_path(path, self.rank())
    }

    /// A rank that fails alone stops the whole job (`MPI_Abort`) after printing `msg`, so the
    /// others do not wait for it until their deadline. Alone it does nothing.
    pub fn stop_all(&self, msg: &str, code: u8) {
        #[cfg(feature = "mpi")]
        if let Some(g) = &self.mpi
            && g.size() > 1
        {
            eprintln!("crossbow: rank {}: {msg}", g.rank());
            g.abort(code as i32);
        }
        let _ = (msg, code);
    }
}

/// `path` for rank `rank`: itself for rank 0, `<stem>.rank<r>.<ext>` otherwise.
pub fn rank_path(path: &Path, rank: usize) -> PathBuf {
    if rank == 0 {
        return path.to_path_buf();
    }
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.rank{rank}.{}", ext.to_string_lossy()),
        None => format!("{stem}.rank{rank}"),
    };
    path.with_file_name(name)
}

/// Refuses `command` (`explore`, `experiment tta`) when a launcher (`mpirun`, `srun`) started
/// this process as one of several ranks: the command would run its whole search on every
/// rank, each competing for the same cores. Rank 0 returns the error at once; the other
/// ranks wait a second first, so that rank 0's line is printed before the launcher stops the
/// job (they exit with the same error if it does not).
pub fn one_process_only(command: &str) -> Result<(), SessionError> {
    let launch = crossbow_mpi::detect().map_err(|e| SessionError::usage(format!("launcher environment: {e}")))?;
    match launch.and_then(|l| several_ranks_refusal(command, &l).map(|m| (l.rank, m))) {
        None => Ok(()),
        Some((rank, msg)) => Err(refusal_of_rank(rank, msg)),
    }
}

/// The usage error every rank of a launch returns for a refusal they all make alike: rank 0
/// at once, the others after a second, so that the launcher, which stops the job at the first
/// rank that exits with an error, lets rank 0 print its line.
pub fn refusal_of_rank(rank: usize, msg: String) -> SessionError {
    if rank != 0 {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    SessionError::usage(msg)
}

/// The one line [`one_process_only`] refuses with, or `None` for a single rank.
pub fn several_ranks_refusal(command: &str, launch: &crossbow_mpi::Launch) -> Option<String> {
    (launch.size > 1).then(|| {
        format!(
            "`crossbow {command}` runs as one process, but {} started {} ranks of it (this is rank {}): each \
             would run the whole {command} on its own, competing for the same cores. Run it as one process, \
             without mpirun/srun (only `train` and `bench` join an MPI job)",
            launch.launcher, launch.size, launch.rank
        )
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn several_ranks_are_refused_naming_the_command_and_the_count() {
        let launch = |rank, size| crossbow_mpi::Launch { rank, size, launcher: "Open MPI" };
        let m = several_ranks_refusal("experiment tta", &launch(0, 4)).unwrap();
        assert!(m.contains("`crossbow experiment tta`") && m.contains("4 ranks") && m.contains("one process"), "{m}");
        assert!(!m.contains('\n'), "one line: {m}");
        // One rank (`mpirun -np 1`) is one process.
        assert_eq!(several_ranks_refusal("explore", &launch(0, 1)), None);
    }

    use super::*;

    #[test]
    fn rank_paths() {
        assert_eq!(rank_path(Path::new("out/m.jsonl"), 0), PathBuf::from("out/m.jsonl"));
        assert_eq!(rank_path(Path::new("out/m.jsonl"), 3), PathBuf::from("out/m.rank3.jsonl"));
        assert_eq!(rank_path(Path::new("m"), 1), PathBuf::from("m.rank1"));
    }

    #[test]
    fn a_bad_timeout_is_named() {
        for t in [0.0, -1.0, f64::NAN] {
            let e = World::start(Some(t)).err().unwrap().to_string();
            assert!(e.contains("--mpi-timeout"), "{e}");
        }
    }
}
