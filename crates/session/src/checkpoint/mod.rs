//! Checkpoints of a training run: the flags, the background writer that keeps the last few
//! files in a folder, and finding the newest good one to resume from.
//!
//! A checkpoint is written in two steps: the training thread downloads every buffer (the only
//! pause training sees), then a writer thread serialises the file, writes it next to its final
//! name, syncs it, renames it into place and syncs the folder
//! ([`crossbow_replica::checkpoint::write_atomic`]), and only then deletes checkpoints beyond
//! `--keep-checkpoints`. A crash, a `kill -9` or a full disk at any moment therefore leaves
//! every earlier checkpoint whole; what it loses is the work since the last one.

mod lines;
mod load;
mod lock;
mod policy;
mod writer;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;

pub use lines::*;
pub use load::*;
pub use lock::*;
pub use policy::*;
pub use writer::*;
