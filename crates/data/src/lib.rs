//! # crossbow-data
//!
//! Datasets and the input pipeline (to be built): MNIST IDX and CIFAR-10/100 binary readers,
//! built-in synthetic datasets generated from a seed, augmentation (random crop with padding,
//! horizontal flip, per-channel normalisation), per-epoch shuffling, and a prefetching pipeline
//! that hands every learner its own batch.
