//! # crossbow-session
//!
//! A crossbow training run as a library: what `crossbow train` does, for a program of your
//! own. A [`Session`] is built from settings (the same settings as the command line's flags
//! and config files, [`settings`]), and [`Session::run`] trains: data, model, devices (the CPU
//! or the GPUs), learners and their auto-tuner, the synchroniser, evaluation of the central
//! model, checkpoints and resume, the divergence guard and rollback, Ctrl-C, several MPI
//! ranks, the metrics file. It returns a [`Summary`]; progress goes to a callback.
//!
//! ```no_run
//! use crossbow_session::{Session, TrainFile};
//!
//! let settings = TrainFile { epochs: Some(1.0), learners_per_device: Some("2".into()), ..TrainFile::default() };
//! let summary = Session::new(settings)?.on_progress(|line| println!("{line}")).run()?;
//! println!("{:.2}% after {} iterations", 100.0 * summary.final_accuracy, summary.iterations);
//! # Ok::<(), crossbow_session::CliError>(())
//! ```
//!
//! The parts: [`settings`] (every setting declared once) and [`config`] (validated),
//! [`registry`] (synchronisers by name), [`dispatch`] (CPU or CUDA, one generic job),
//! [`train`] (the run itself, also for a backend and synchroniser of your own),
//! [`checkpoint`] and [`resume`] (files that belong to their run), [`report`] (printing and
//! the metrics file), [`signals`], [`preflight`] (what fits, before anything is allocated),
//! [`processes`] (several ranks).

pub mod checkpoint;
pub mod config;
pub mod diagnostics;
pub mod dispatch;
pub mod error;
pub mod limits;
pub mod paths;
pub mod preflight;
pub mod processes;
pub mod registry;
pub mod report;
pub mod resume;
pub mod session;
pub mod settings;
pub mod signals;
pub mod source;
pub mod train;

pub use config::{TrainConfig, TrainFile};
pub use error::CliError;
pub use registry::{SyncOptions, SyncRegistry};
pub use report::Summary;
pub use session::Session;
