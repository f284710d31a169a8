//! ResNet-50 v1.5 (stride on the 3×3 convolution of each bottleneck).

use std::collections::HashMap;

use crossbow_tensor::Shape;

use super::blocks::{conv_bn, resnet_prefixes};
use crate::error::Result;
use crate::graph::{Graph, GraphBuilder, NodeId};

/// The default input: ImageNet's 3×224×224, 1000 classes.
pub(super) fn default_input() -> (Shape, usize) {
    (Shape::new(vec![3, 224, 224]), 1000)
}

fn bottleneck(b: &mut GraphBuilder, name: &str, x: NodeId, width: usize, stride: usize) -> Result<NodeId> {
    let cin = b.shape(x).dims()[0];
    let out = width * 4;
    let y = conv_bn(b, &format!("{name}.1"), x, width, 1, 1, 0)?;
    let y = b.relu(&format!("{name}.relu1"), y)?;
    let y = conv_bn(b, &format!("{name}.2"), y, width, 3, stride, 1)?;
    let y = b.relu(&format!("{name}.relu2"), y)?;
    let y = conv_bn(b, &format!("{name}.3"), y, out, 1, 1, 0)?;
    let shortcut =
        if stride != 1 || cin != out { conv_bn(b, &format!("{name}.proj"), x, out, 1, stride, 0)? } else { x };
    let s = b.add(&format!("{name}.add"), y, shortcut)?;
    b.relu(&format!("{name}.relu3"), s)
}

pub(super) fn build(input: &Shape, classes: usize) -> Result<Graph> {
    let mut b = GraphBuilder::new("resnet50", input.clone())?;
    let x = b.input();
    let x = conv_bn(&mut b, "stem", x, 64, 7, 2, 3)?;
    let x = b.relu("stem.relu", x)?;
    let mut x = b.max_pool("stem.pool", x, 3, 2, 1, false)?;
    for (stage, (&blocks, &width)) in [3usize, 4, 6, 3].iter().zip(&[64usize, 128, 256, 512]).enumerate() {
        for blk in 0..blocks {
            let stride = if stage > 0 && blk == 0 { 2 } else { 1 };
            x = bottleneck(&mut b, &format!("stage{}.block{}", stage + 1, blk + 1), x, width, stride)?;
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
