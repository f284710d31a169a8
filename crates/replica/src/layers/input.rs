//! The input batch: node 0 of every graph, uploaded before the program runs.

use serde::Serialize;

use super::LayerOps;
use crate::graph::NodeId;
use crate::program::{Lowering, TensorId};

/// The input batch. [`GraphBuilder::new`](crate::graph::GraphBuilder::new) makes it node 0.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Input;

impl LayerOps for Input {
    /// The lowering makes the input tensor itself before any layer.
    fn lower_forward(&self, l: &mut Lowering<'_>, _n: NodeId) -> TensorId {
        l.act(0)
    }

    /// The input batch gets no gradient.
    fn lower_backward(&self, _l: &mut Lowering<'_>, _n: NodeId, _dy: TensorId) {}
}
