use crate::{Shape, ShapeError};

/// A dense `f32` tensor in host memory, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    shape: Shape,
    data: Vec<f32>,
}

impl Tensor {
    /// A tensor of zeros.
    pub fn zeros(shape: impl Into<Shape>) -> Result<Self, ShapeError> {
        let shape = shape.into();
        let n = shape.numel()?;
        Ok(Tensor { shape, data: vec![0.0; n] })
    }

    /// A tensor filled with `value`.
    pub fn full(shape: impl Into<Shape>, value: f32) -> Result<Self, ShapeError> {
        let shape = shape.into();
        let n = shape.numel()?;
        Ok(Tensor { shape, data: vec![value; n] })
    }

    /// A tensor over existing data; the length must match the shape.
    pub fn from_vec(shape: impl Into<Shape>, data: Vec<f32>) -> Result<Self, ShapeError> {
        let shape = shape.into();
        let n = shape.numel()?;
        if n != data.len() {
            return Err(ShapeError::Length { what: "Tensor::from_vec".into(), shape, expected: n, actual: data.len() });
        }
        Ok(Tensor { shape, data })
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The elements, row-major.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// The elements, row-major, mutable.
    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        &mut self.data
    }

    /// Consumes the tensor, returning its elements.
    pub fn into_vec(self) -> Vec<f32> {
        self.data
    }

    /// The same elements under another shape with the same element count.
    pub fn reshape(self, shape: impl Into<Shape>) -> Result<Self, ShapeError> {
        let shape = shape.into();
        let n = shape.numel()?;
        if n != self.data.len() {
            return Err(ShapeError::Mismatch {
                what: format!("reshape of {} elements", self.data.len()),
                expected: self.shape,
                actual: shape,
            });
        }
        Ok(Tensor { shape, data: self.data })
    }

    /// Element at a multi-index, or an error naming the index and shape.
    pub fn get(&self, index: &[usize]) -> Result<f32, ShapeError> {
        let dims = self.shape.dims();
        if index.len() != dims.len() || index.iter().zip(dims).any(|(i, d)| i >= d) {
            return Err(ShapeError::Invalid(format!("index {index:?} is out of range for shape {}", self.shape)));
        }
        let off: usize = index.iter().zip(self.shape.strides()).map(|(i, s)| i * s).sum();
        Ok(self.data[off])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn construct_and_index() {
        let t = Tensor::from_vec([2, 3], (0..6).map(|x| x as f32).collect()).unwrap();
        assert_eq!(t.get(&[1, 2]).unwrap(), 5.0);
        assert!(t.get(&[2, 0]).is_err());
        assert!(Tensor::from_vec([2, 3], vec![0.0; 5]).is_err());
        let r = t.clone().reshape([3, 2]).unwrap();
        assert_eq!(r.get(&[2, 1]).unwrap(), 5.0);
        assert!(t.reshape([4, 2]).is_err());
    }
}
