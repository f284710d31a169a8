use crate::Shape;

/// A shape that is invalid on its own or does not fit another shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// The number of elements does not fit in `usize`.
    #[error("shape {shape} has too many elements (overflows usize)")]
    Overflow {
        /// The offending shape, rendered as text.
        shape: String,
    },
    /// An operation needed two shapes to agree and they do not.
    #[error("{what}: expected shape {expected}, got {actual}")]
    Mismatch {
        /// The operation or argument whose shapes were compared.
        what: String,
        /// The shape the operation required.
        expected: Shape,
        /// The shape it was given.
        actual: Shape,
    },
    /// A buffer of the wrong length was supplied for a shape.
    #[error("{what}: shape {shape} needs {expected} elements, got {actual}")]
    Length {
        /// The operation or argument that received the buffer.
        what: String,
        /// The shape the buffer was meant to fill.
        shape: Shape,
        /// Elements the shape needs (its `numel`).
        expected: usize,
        /// Elements the buffer actually holds.
        actual: usize,
    },
    /// The shape has the wrong number of dimensions.
    #[error("{what}: expected a rank-{expected} shape, got {actual}")]
    Rank {
        /// The operation or argument whose shape was checked.
        what: String,
        /// The number of dimensions required.
        expected: usize,
        /// The shape given, with the wrong number of dimensions.
        actual: Shape,
    },
    /// Any other invalid geometry (zero-sized dimension, kernel larger than input, ...).
    #[error("{0}")]
    Invalid(String),
}
