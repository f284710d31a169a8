use crate::Shape;

/// A shape that is invalid on its own or does not fit another shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// The number of elements does not fit in `usize`.
    #[error("shape {shape} has too many elements (overflows usize)")]
    Overflow { shape: String },
    /// An operation needed two shapes to agree and they do not.
    #[error("{what}: expected shape {expected}, got {actual}")]
    Mismatch { what: String, expected: Shape, actual: Shape },
    /// A buffer of the wrong length was supplied for a shape.
    #[error("{what}: shape {shape} needs {expected} elements, got {actual}")]
    Length { what: String, shape: Shape, expected: usize, actual: usize },
    /// The shape has the wrong number of dimensions.
    #[error("{what}: expected a rank-{expected} shape, got {actual}")]
    Rank { what: String, expected: usize, actual: Shape },
    /// Any other invalid geometry (zero-sized dimension, kernel larger than input, ...).
    #[error("{0}")]
    Invalid(String),
}
