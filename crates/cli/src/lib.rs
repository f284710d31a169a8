//! # crossbow-cli
//!
//! The `crossbow` command (`src/main.rs`) and the library behind it, which a researcher can
//! call directly:
//!
//! * [`main_with`] runs the whole command line with the synchronisers of a
//!   [`SyncRegistry`]: register your own [`crossbow_replica::Synchroniser`] by name and every
//!   command selects it with `--sync NAME` (see the `examples/sync-periodic` crate of the
//!   repository).
//! * [`train::train`] runs a configured training job; [`train::train_with`] runs one with any
//!   backend and any synchroniser.
//!
//! Commands:
//!
//! * `crossbow train` — train a model (flags and/or a TOML config; see [`config`]).
//! * `crossbow models` — parameters, FLOPs and planned memory per model.
//! * `crossbow bench` — training throughput (images/s) per model, batch size and learner count,
//!   and what the auto-tuner picks.
//! * `crossbow explore` — several configurations as one job from one data pipeline, losers
//!   pruned early, the best written as a config file (see [`explore`]).
//! * `crossbow doctor` — the GPUs, their CUDA libraries, and every op against the CPU on
//!   every GPU (see [`doctor`]).
//! * `crossbow experiment tta` — time/epochs to accuracy, SMA against S-SGD (or any registered
//!   synchronisers).

mod app;
pub mod bench;
pub mod doctor;
pub mod experiment;
pub mod explore;
pub mod export_cmd;
pub mod models_cmd;

// The training run is a library of its own (`crossbow-session`); its modules are also
// reachable from here, as the command line uses them.
pub use crossbow_session::{
    checkpoint, config, dispatch, error, limits, paths, preflight, processes, registry, report, resume, settings,
    signals, source, train,
};

pub use app::main_with;
pub use config::{TrainConfig, TrainFile};
pub use crossbow_session::Session;
pub use error::SessionError;
pub use registry::{SyncOptions, SyncRegistry};
