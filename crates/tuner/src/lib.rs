//! # crossbow-tuner
//!
//! The auto-tuner (to be built): from measured throughput and memory figures it decides how
//! many learners each device should run. It depends on no other crossbow crate so it can be
//! embedded in other systems.
