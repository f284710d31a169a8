//! Element-wise kernel calls that several layers and the lowering itself emit: sums
//! (residual connections), products (dropout's backward pass), copies, and the accumulation
//! of a tensor's gradient contributions.

use crossbow_kernels::Backend;

use super::Op;
use crate::error::Result;
use crate::exec::ExecCx;
use crate::program::TensorId;

/// An element-wise kernel call.
#[derive(Clone, Debug)]
pub enum TensorOp {
    /// `y = a * b`, element-wise (dropout backward: `dx = dy * mask`).
    Mul {
        /// First factor.
        a: TensorId,
        /// Second factor.
        b: TensorId,
        /// Product (written).
        y: TensorId,
    },
    /// `y = a + b`, element-wise (residual connections).
    Add {
        /// First term.
        a: TensorId,
        /// Second term.
        b: TensorId,
        /// Sum (written).
        y: TensorId,
    },
    /// `dst = src`.
    Copy {
        /// Tensor read.
        src: TensorId,
        /// Tensor written, same length as `src`.
        dst: TensorId,
    },
    /// `dst += src`.
    Accumulate {
        /// Tensor added.
        src: TensorId,
        /// Tensor accumulated into, same length as `src`.
        dst: TensorId,
    },
}

impl Op for TensorOp {
    fn reads(&self) -> Vec<TensorId> {
        match self {
            TensorOp::Mul { a, b, .. } | TensorOp::Add { a, b, .. } => vec![*a, *b],
            TensorOp::Copy { src, .. } => vec![*src],
            TensorOp::Accumulate { src, dst } => vec![*src, *dst],
        }
    }

    fn writes(&self) -> Vec<TensorId> {
        match self {
            TensorOp::Mul { y, .. } | TensorOp::Add { y, .. } => vec![*y],
            TensorOp::Copy { dst, .. } | TensorOp::Accumulate { dst, .. } => vec![*dst],
        }
    }

    fn exec<B: Backend>(&self, cx: &mut ExecCx<'_, B>) -> Result<()> {
        let be = cx.be;
        match self {
            TensorOp::Mul { a, b, y } => be.mul(cx.read(*a)?, cx.read(*b)?, cx.write(*y)?)?,
            TensorOp::Add { a, b, y } => be.add(cx.read(*a)?, cx.read(*b)?, cx.write(*y)?)?,
            TensorOp::Copy { src, dst } => be.copy(cx.read(*src)?, cx.write(*dst)?)?,
            TensorOp::Accumulate { src, dst } => be.axpy(1.0, cx.read(*src)?, cx.write(*dst)?)?,
        }
        Ok(())
    }
}
