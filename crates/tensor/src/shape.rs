use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ShapeError;

/// The dimensions of a dense, row-major tensor. Images are NCHW.
///
/// A `Shape` is only a list of dimensions; arithmetic on it is checked and returns
/// [`ShapeError`] instead of overflowing.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Shape(Vec<usize>);

impl Shape {
    /// A shape from its dimensions, outermost first.
    pub fn new(dims: impl Into<Vec<usize>>) -> Self {
        Shape(dims.into())
    }

    /// A 4-d image batch shape `[n, c, h, w]`.
    pub fn nchw(n: usize, c: usize, h: usize, w: usize) -> Self {
        Shape(vec![n, c, h, w])
    }

    /// The dimensions, outermost first.
    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// Number of elements, or an error if it overflows `usize`. A rank-0 shape has one element.
    pub fn numel(&self) -> Result<usize, ShapeError> {
        self.0
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| ShapeError::Overflow { shape: self.to_string() })
    }

    /// Number of bytes of an `f32` tensor of this shape.
    pub fn bytes_f32(&self) -> Result<usize, ShapeError> {
        self.numel()?.checked_mul(4).ok_or_else(|| ShapeError::Overflow { shape: self.to_string() })
    }

    /// Row-major strides (in elements).
    pub fn strides(&self) -> Vec<usize> {
        let mut s = vec![1usize; self.0.len()];
        for i in (0..self.0.len().saturating_sub(1)).rev() {
            s[i] = s[i + 1].saturating_mul(self.0[i + 1]);
        }
        s
    }

    /// Dimension `i`, or an error naming the shape if `i` is out of range.
    pub fn dim(&self, i: usize) -> Result<usize, ShapeError> {
        self.0
            .get(i)
            .copied()
            .ok_or_else(|| ShapeError::Invalid(format!("shape {self} has no dimension {i} (rank {})", self.rank())))
    }

    /// The four dimensions of an NCHW shape, or an error if the rank is not 4.
    pub fn as_nchw(&self, what: &str) -> Result<(usize, usize, usize, usize), ShapeError> {
        match self.0[..] {
            [n, c, h, w] => Ok((n, c, h, w)),
            _ => Err(ShapeError::Rank { what: what.to_string(), expected: 4, actual: self.clone() }),
        }
    }

    /// The two dimensions of a matrix shape, or an error if the rank is not 2.
    pub fn as_matrix(&self, what: &str) -> Result<(usize, usize), ShapeError> {
        match self.0[..] {
            [r, c] => Ok((r, c)),
            _ => Err(ShapeError::Rank { what: what.to_string(), expected: 2, actual: self.clone() }),
        }
    }

    /// The leading dimension (batch) and the product of the rest (features per sample).
    pub fn batch_and_features(&self) -> Result<(usize, usize), ShapeError> {
        let n = *self.0.first().ok_or_else(|| ShapeError::Invalid("a rank-0 shape has no batch dimension".into()))?;
        let f = Shape::new(&self.0[1..]).numel().map_err(|_| ShapeError::Overflow { shape: self.to_string() })?;
        Ok((n, f))
    }

    /// The same shape with the leading (batch) dimension replaced.
    pub fn with_batch(&self, n: usize) -> Shape {
        let mut d = self.0.clone();
        if let Some(first) = d.first_mut() {
            *first = n;
        }
        Shape(d)
    }

    /// An error unless `self == expected`.
    pub fn expect_eq(&self, expected: &Shape, what: &str) -> Result<(), ShapeError> {
        if self == expected {
            Ok(())
        } else {
            Err(ShapeError::Mismatch { what: what.to_string(), expected: expected.clone(), actual: self.clone() })
        }
    }

    /// An error unless every dimension is non-zero.
    pub fn expect_non_empty(&self, what: &str) -> Result<(), ShapeError> {
        if self.0.contains(&0) {
            Err(ShapeError::Invalid(format!("{what}: shape {self} has a zero-sized dimension")))
        } else {
            Ok(())
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{d}")?;
        }
        write!(f, "]")
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl From<&[usize]> for Shape {
    fn from(d: &[usize]) -> Self {
        Shape(d.to_vec())
    }
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(d: [usize; N]) -> Self {
        Shape(d.to_vec())
    }
}

impl From<Vec<usize>> for Shape {
    fn from(d: Vec<usize>) -> Self {
        Shape(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn numel_and_strides() {
        let s = Shape::nchw(2, 3, 4, 5);
        assert_eq!(s.numel().unwrap(), 120);
        assert_eq!(s.strides(), vec![60, 20, 5, 1]);
        assert_eq!(s.to_string(), "[2, 3, 4, 5]");
        assert_eq!(Shape::new(vec![]).numel().unwrap(), 1);
    }

    #[test]
    fn overflow_is_an_error() {
        let s = Shape::new(vec![usize::MAX, 2]);
        let e = s.numel().unwrap_err();
        assert!(e.to_string().contains("too many elements"), "{e}");
    }

    #[test]
    fn mismatch_names_both_shapes() {
        let a = Shape::nchw(1, 2, 3, 4);
        let b = Shape::nchw(1, 2, 3, 5);
        let e = a.expect_eq(&b, "conv2d input").unwrap_err().to_string();
        assert!(e.contains("[1, 2, 3, 4]") && e.contains("[1, 2, 3, 5]") && e.contains("conv2d input"), "{e}");
    }

    #[test]
    fn rank_errors() {
        let e = Shape::new(vec![3, 4]).as_nchw("x").unwrap_err().to_string();
        assert!(e.contains("rank-4") && e.contains("[3, 4]"), "{e}");
        assert!(Shape::new(vec![]).batch_and_features().is_err());
    }

    #[test]
    fn serde_round_trip() {
        let s = Shape::nchw(8, 3, 32, 32);
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(j, "[8,3,32,32]");
        assert_eq!(serde_json::from_str::<Shape>(&j).unwrap(), s);
    }

    proptest! {
        #[test]
        fn numel_matches_product(d in proptest::collection::vec(0usize..50, 0..5)) {
            let s = Shape::new(d.clone());
            prop_assert_eq!(s.numel().unwrap(), d.iter().product::<usize>());
            let st = s.strides();
            if !d.is_empty() {
                prop_assert_eq!(st[d.len() - 1], 1);
            }
        }
    }
}
