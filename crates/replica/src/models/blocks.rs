//! Building blocks shared by the zoo's models.

use crate::error::Result;
use crate::graph::{GraphBuilder, NodeId};

/// A convolution without bias followed by batch norm (`NAME.conv`, `NAME.bn`).
pub(super) fn conv_bn(
    b: &mut GraphBuilder,
    name: &str,
    x: NodeId,
    out: usize,
    k: usize,
    s: usize,
    p: usize,
) -> Result<NodeId> {
    let x = b.conv2d(&format!("{name}.conv"), x, out, k, s, p, false)?;
    b.batch_norm(&format!("{name}.bn"), x)
}

/// torchvision's ResNet names for crossbow's (`stem.conv`, `stage2.block1.proj.bn`, `fc`).
pub(super) fn resnet_prefix(name: &str) -> Option<String> {
    match name {
        "stem.conv" => return Some("conv1".into()),
        "stem.bn" => return Some("bn1".into()),
        "fc" => return Some("fc".into()),
        _ => {}
    }
    let parts: Vec<&str> = name.split('.').collect();
    let [stage, block, part, op] = parts.as_slice() else { return None };
    let stage: usize = stage.strip_prefix("stage")?.parse().ok()?;
    let block: usize = block.strip_prefix("block")?.parse().ok()?;
    let module = match (*part, *op) {
        ("1" | "2" | "3", "conv") => format!("conv{part}"),
        ("1" | "2" | "3", "bn") => format!("bn{part}"),
        ("proj", "conv") => "downsample.0".into(),
        ("proj", "bn") => "downsample.1".into(),
        _ => return None,
    };
    Some(format!("layer{stage}.{}.{module}", block.checked_sub(1)?))
}

/// The torchvision names of every ResNet node with parameters.
pub(super) fn resnet_prefixes(graph: &crate::graph::Graph) -> std::collections::HashMap<NodeId, String> {
    graph.nodes.iter().enumerate().filter_map(|(id, n)| resnet_prefix(&n.name).map(|p| (id, p))).collect()
}
