//! # crossbow-session
//!
//! A crossbow training run as a library: what `crossbow train` does, for a program of your
//! own. A [`Trainer`] is started from a [`Config`] of typed values (or, through a
//! [`Session`], from the same settings as the command line's flags and config files,
//! [`settings`]) and trains: data, model, devices (the CPU or the GPUs), learners and their
//! auto-tuner, the synchroniser, evaluation of the central model, checkpoints and resume, the
//! divergence guard and rollback, Ctrl-C, several MPI ranks, the metrics file. It takes one
//! iteration at a time ([`Trainer::step`], with [`Trainer::evaluate`] and [`Trainer::save`]
//! on demand) or runs to the end, and returns a [`Summary`]; progress goes to a callback.
//!
//! ```no_run
//! use crossbow_session::{Config, Learners, ModelKind, Trainer};
//!
//! let config = Config::new(ModelKind::LeNet5).learners(Learners::Fixed(2)).epochs(1.0);
//! let summary = Trainer::new(config.on_progress(|line| println!("{line}")))?.run()?;
//! println!("{:.2}% after {} iterations", 100.0 * summary.final_accuracy, summary.iterations);
//! # Ok::<(), crossbow_session::SessionError>(())
//! ```
//!
//! The parts: [`settings`] (every setting declared once) and [`config`] (validated),
//! [`registry`] (synchronisers by name), [`dispatch`] (CPU or CUDA, one generic job),
//! [`trainer`] (the typed API), [`branch`] (a configuration fed batches from outside, as
//! `crossbow explore` runs several from one stream), [`train`] (the run itself, also for a backend and
//! synchroniser of your own),
//! [`checkpoint`] and [`resume`] (files that belong to their run), [`report`] (printing and
//! the metrics file), [`signals`], [`preflight`] (what fits, before anything is allocated),
//! [`processes`] (several ranks).

pub mod branch;
pub mod checkpoint;
pub mod config;
pub mod diagnostics;
pub mod dispatch;
pub mod error;
pub mod limits;
pub mod paths;
pub mod preflight;
pub mod probing;
pub mod processes;
pub mod registry;
pub mod report;
pub mod resume;
pub mod session;
pub mod settings;
pub mod signals;
pub mod source;
pub mod train;
pub mod trainer;

pub use branch::{Branch, BranchState, BranchStep};
pub use config::{TrainConfig, TrainFile};
pub use crossbow_data::DatasetKind;
pub use crossbow_replica::ModelKind;
pub use crossbow_replica::engine::IterationRecord;
pub use crossbow_replica::schedule::Schedule;
pub use crossbow_tensor::DeviceSpec;
pub use error::SessionError;
pub use registry::{SyncOptions, SyncRegistry};
pub use report::Summary;
pub use session::Session;
pub use train::{Data, load_data};
pub use trainer::{Config, Learners, Trainer};
