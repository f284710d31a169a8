//! GPU ReLU (`activation.cu`).

use crate::cuda::exec::{Dv, Exec, KernelSource, int, launch_n, ptr};
use crate::error::Result;

pub(crate) const SOURCE: KernelSource = KernelSource {
    module: "activation",
    code: include_str!("activation.cu"),
    kernels: &["cb_relu_fwd", "cb_relu_fwd_inplace", "cb_relu_bwd", "cb_relu_bwd_inplace"],
    cooperative: &[],
};

pub(crate) fn relu_forward<E: Exec>(e: &E, x: Dv, y: Dv) -> Result<()> {
    launch_n(e, "cb_relu_fwd", y.len, &[ptr(x), ptr(y), int(y.len)])
}

pub(crate) fn relu_forward_inplace<E: Exec>(e: &E, y: Dv) -> Result<()> {
    launch_n(e, "cb_relu_fwd_inplace", y.len, &[ptr(y), int(y.len)])
}

pub(crate) fn relu_backward<E: Exec>(e: &E, y: Dv, dy: Dv, dx: Dv) -> Result<()> {
    launch_n(e, "cb_relu_bwd", dx.len, &[ptr(y), ptr(dy), ptr(dx), int(dx.len)])
}

pub(crate) fn relu_backward_inplace<E: Exec>(e: &E, y: Dv, d: Dv) -> Result<()> {
    launch_n(e, "cb_relu_bwd_inplace", d.len, &[ptr(y), ptr(d), int(d.len)])
}
