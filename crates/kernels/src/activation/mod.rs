//! ReLU, forward and backward (from the forward output, so the forward pass may run in place).

pub(crate) mod cpu;
#[cfg(test)]
mod tests;
