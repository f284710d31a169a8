//! # crossbow-sma
//!
//! Synchronisers behind `crossbow_replica::Synchroniser` (to be built): SMA (synchronous model
//! averaging, the default), S-SGD (the PyTorch-DDP / TensorFlow baseline) and EA-SGD, each with
//! an intra-device reduction followed by a cross-device all-reduce.
