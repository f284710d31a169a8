//! Element-wise and vector ops: residual add, the dropout backward product, and the
//! building blocks of synchronisers (axpy, weighted sums, scaling, differences, norms).

pub(crate) mod cpu;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
#[cfg(test)]
mod tests;
