//! # crossbow-replica
//!
//! Models, replicas, learners and the engine (to be built): models as a layer graph with shape
//! inference and a memory plan; the `Replica` whose parameters, gradients and momentum each
//! live in one flat buffer; the `Learner` that binds a replica to a device stream or worker
//! thread; the `Engine` that runs iterations over devices; and the `Synchroniser` trait that
//! synchronisation crates such as `crossbow-sma` implement.
