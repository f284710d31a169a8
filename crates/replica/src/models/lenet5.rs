//! LeNet-5 (LeCun et al. 1998) with ReLU and max pooling.

use std::collections::HashMap;

use crossbow_tensor::Shape;

use crate::error::Result;
use crate::graph::{Graph, GraphBuilder, NodeId};

/// The default input: MNIST's 1×28×28, 10 classes.
pub(super) fn default_input() -> (Shape, usize) {
    (Shape::new(vec![1, 28, 28]), 10)
}

pub(super) fn build(input: &Shape, classes: usize) -> Result<Graph> {
    let mut b = GraphBuilder::new("lenet5", input.clone())?;
    // PyTorch's default initialisation for every layer.
    b.set_conv_init(crossbow_tensor::Init::FanInUniform);
    let x = b.input();
    // 28×28 inputs are padded to 32×32 as in the original LeNet-5; larger inputs are not.
    let pad = if b.shape(x).dims()[1] < 32 { 2 } else { 0 };
    let x = b.conv2d("conv1", x, 6, 5, 1, pad, true)?;
    let x = b.relu("relu1", x)?;
    let x = b.max_pool("pool1", x, 2, 2, 0, false)?;
    let x = b.conv2d("conv2", x, 16, 5, 1, 0, true)?;
    let x = b.relu("relu2", x)?;
    let x = b.max_pool("pool2", x, 2, 2, 0, false)?;
    let x = b.linear("fc1", x, 120, true)?;
    let x = b.relu("relu3", x)?;
    let x = b.linear("fc2", x, 84, true)?;
    let x = b.relu("relu4", x)?;
    let x = b.linear("fc3", x, classes, true)?;
    b.finish(x)
}

/// PyTorch module names: the layers keep their own (`conv1`, ..., `fc3`).
pub(super) fn pytorch_prefixes(graph: &Graph) -> HashMap<NodeId, String> {
    graph
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| matches!(n.name.as_str(), "conv1" | "conv2" | "fc1" | "fc2" | "fc3"))
        .map(|(id, n)| (id, n.name.clone()))
        .collect()
}
