//! Element-wise and vector ops: residual add, the dropout backward product, and the
//! building blocks of synchronisers (axpy, weighted sums, scaling, differences, norms).

mod cpu;
pub(crate) mod cuda;
#[cfg(feature = "testing")]
pub mod tests;

use crate::backend::{Storage, View, ViewMut};
use crate::error::{Result, check_len, same_len};

/// Element-wise and vector ops. The provided methods check the arguments, then run the
/// backend's `*_unchecked` kernels (what a backend implements).
pub trait Vector: Storage {
    /// `y = a + b`.
    fn add(&self, a: View<'_, Self>, b: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        same_len("add", a.len(), &[("b", b.len()), ("y", y.len())])?;
        // SAFETY: the lengths were checked.
        unsafe { self.binary_unchecked(BinaryOp::Add, a, b, y) }
    }

    /// `y = a - b`.
    fn sub(&self, a: View<'_, Self>, b: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        same_len("sub", a.len(), &[("b", b.len()), ("y", y.len())])?;
        // SAFETY: the lengths were checked.
        unsafe { self.binary_unchecked(BinaryOp::Sub, a, b, y) }
    }

    /// `y = a * b` (element-wise).
    fn mul(&self, a: View<'_, Self>, b: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        same_len("mul", a.len(), &[("b", b.len()), ("y", y.len())])?;
        // SAFETY: the lengths were checked.
        unsafe { self.binary_unchecked(BinaryOp::Mul, a, b, y) }
    }

    checked_op! {
        /// `y += alpha * x`.
        fn axpy(&self, alpha: f32, x: View<'_, Self>, y: ViewMut<'_, Self>) {
            same_len("axpy", x.len(), &[("y", y.len())])?;
        }

        /// The kernel of [`Vector::axpy`].
        ///
        /// # Safety
        /// `x` and `y` have the same length.
        unsafe fn axpy_unchecked;
    }

    checked_op! {
        /// `y = alpha * x + beta * y` (a weighted sum; `beta = 0` ignores the old `y`, NaNs included).
        fn axpby(&self, alpha: f32, x: View<'_, Self>, beta: f32, y: ViewMut<'_, Self>) {
            same_len("axpby", x.len(), &[("y", y.len())])?;
        }

        /// The kernel of [`Vector::axpby`].
        ///
        /// # Safety
        /// `x` and `y` have the same length.
        unsafe fn axpby_unchecked;
    }

    /// `y *= alpha`.
    fn scale(&self, alpha: f32, y: ViewMut<'_, Self>) -> Result<()>;

    checked_op! {
        /// `out[0] = sum(x^2)` (a norm, and a cheap NaN/Inf detector).
        fn sum_squares(&self, x: View<'_, Self>, out: ViewMut<'_, Self>) {
            check_len("sum_squares", "out", 1, out.len())?;
        }

        /// The kernel of [`Vector::sum_squares`].
        ///
        /// # Safety
        /// `out` has length 1.
        unsafe fn sum_squares_unchecked;
    }

    /// The kernel of [`Vector::add`], [`Vector::sub`] and [`Vector::mul`].
    ///
    /// # Safety
    /// `a`, `b` and `y` have the same length.
    unsafe fn binary_unchecked(
        &self,
        op: BinaryOp,
        a: View<'_, Self>,
        b: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()>;
}

/// The element-wise binary ops of [`Vector`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    /// `y = a + b`.
    Add,
    /// `y = a - b`.
    Sub,
    /// `y = a * b` (element-wise product).
    Mul,
}
