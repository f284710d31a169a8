//! # crossbow-benches
//!
//! Criterion benchmarks for each crossbow component (`cargo bench -p crossbow-benches`), and
//! the helpers they share. Figures and the commands that produced them are in `BENCHMARKS.md`.
