//! CIFAR ResNets of depth `6n + 2` (He et al. 2016, §4.2).

use std::collections::HashMap;

use crossbow_tensor::Shape;

use super::blocks::{conv_bn, resnet_prefixes};
use crate::error::{ReplicaError, Result};
use crate::graph::{Graph, GraphBuilder, NodeId};

/// The default input: CIFAR's 3×32×32, 10 classes.
pub(super) fn default_input() -> (Shape, usize) {
    (Shape::new(vec![3, 32, 32]), 10)
}

fn basic_block(b: &mut GraphBuilder, name: &str, x: NodeId, out: usize, stride: usize) -> Result<NodeId> {
    let cin = b.shape(x).dims()[0];
    let y = conv_bn(b, &format!("{name}.1"), x, out, 3, stride, 1)?;
    let y = b.relu(&format!("{name}.relu1"), y)?;
    let y = conv_bn(b, &format!("{name}.2"), y, out, 3, 1, 1)?;
    let shortcut =
        if stride != 1 || cin != out { conv_bn(b, &format!("{name}.proj"), x, out, 1, stride, 0)? } else { x };
    let s = b.add(&format!("{name}.add"), y, shortcut)?;
    b.relu(&format!("{name}.relu2"), s)
}

/// The deepest CIFAR ResNet built: ResNet-1202, the deepest of He et al. (2016, §4.2).
pub const MAX_CIFAR_RESNET_DEPTH: usize = 1202;

pub(super) fn build(depth: usize, input: &Shape, classes: usize) -> Result<Graph> {
    if depth < 8 || !(depth - 2).is_multiple_of(6) {
        return Err(ReplicaError::Model(format!("CIFAR ResNet depth must be 6n+2 (20, 32, 44, 56, 110), got {depth}")));
    }
    if depth > MAX_CIFAR_RESNET_DEPTH {
        return Err(ReplicaError::Model(format!(
            "CIFAR ResNet depth must be at most {MAX_CIFAR_RESNET_DEPTH} (the deepest of He et al.), got {depth}"
        )));
    }
    let n = (depth - 2) / 6;
    let mut b = GraphBuilder::new(format!("resnet{depth}"), input.clone())?;
    let x = b.input();
    let x = conv_bn(&mut b, "stem", x, 16, 3, 1, 1)?;
    let mut x = b.relu("stem.relu", x)?;
    for (stage, width) in [16usize, 32, 64].into_iter().enumerate() {
        for blk in 0..n {
            let stride = if stage > 0 && blk == 0 { 2 } else { 1 };
            x = basic_block(&mut b, &format!("stage{}.block{}", stage + 1, blk + 1), x, width, stride)?;
        }
    }
    let x = b.global_avg_pool("pool", x)?;
    let x = b.linear("fc", x, classes, true)?;
    b.finish(x)
}

/// torchvision's names (`layer1.0.conv1`, ...).
pub(super) fn pytorch_prefixes(graph: &Graph) -> HashMap<NodeId, String> {
    resnet_prefixes(graph)
}
