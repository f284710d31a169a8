//! VGG-16 with batch norm, for 32×32 inputs.

use std::collections::HashMap;

use crossbow_tensor::Shape;

use super::blocks::conv_bn;
use crate::error::Result;
use crate::graph::{Graph, GraphBuilder, NodeId};

/// The default input: CIFAR-100's 3×32×32, 100 classes.
pub(super) fn default_input() -> (Shape, usize) {
    (Shape::new(vec![3, 32, 32]), 100)
}

pub(super) fn build(input: &Shape, classes: usize) -> Result<Graph> {
    let mut b = GraphBuilder::new("vgg16", input.clone())?;
    let mut x = b.input();
    let stages: [&[usize]; 5] = [&[64, 64], &[128, 128], &[256, 256, 256], &[512, 512, 512], &[512, 512, 512]];
    for (s, widths) in stages.iter().enumerate() {
        for (i, &w) in widths.iter().enumerate() {
            let name = format!("stage{}.conv{}", s + 1, i + 1);
            x = conv_bn(&mut b, &name, x, w, 3, 1, 1)?;
            x = b.relu(&format!("{name}.relu"), x)?;
        }
        // Pool while the map is at least 2×2 (inputs smaller than 32×32 stop pooling early).
        if b.shape(x).dims()[1] >= 2 {
            x = b.max_pool(&format!("stage{}.pool", s + 1), x, 2, 2, 0, false)?;
        }
    }
    let x = b.dropout("drop1", x, 0.5)?;
    let x = b.linear("fc1", x, 512, true)?;
    let x = b.relu("fc1.relu", x)?;
    let x = b.batch_norm("fc1.bn", x)?;
    let x = b.dropout("drop2", x, 0.5)?;
    let x = b.linear("fc2", x, classes, true)?;
    b.finish(x)
}

/// Two `nn.Sequential`s: every node of the convolutional stages is one module of `features`,
/// every later node one of `classifier` (dropout, linear, ReLU, BN).
pub(super) fn pytorch_prefixes(graph: &Graph) -> HashMap<NodeId, String> {
    let mut out = HashMap::new();
    let (mut features, mut classifier) = (0usize, 0usize);
    for (id, node) in graph.nodes.iter().enumerate().skip(1) {
        if node.name.starts_with("stage") {
            out.insert(id, format!("features.{features}"));
            features += 1;
        } else {
            out.insert(id, format!("classifier.{classifier}"));
            classifier += 1;
        }
    }
    out
}
