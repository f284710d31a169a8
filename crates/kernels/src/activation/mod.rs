//! ReLU, forward and backward (from the forward output, so the forward pass may run in place).

pub(crate) mod cpu;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
#[cfg(test)]
mod tests;
