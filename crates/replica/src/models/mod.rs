//! The model zoo: LeNet-5, CIFAR ResNets (6n+2), VGG-16 with batch norm, ResNet-50.

use std::fmt;
use std::str::FromStr;

use crossbow_tensor::Shape;
use serde::{Deserialize, Serialize};

use crate::error::{ReplicaError, Result};
use crate::graph::{Graph, NodeId};

mod blocks;
mod lenet5;
mod resnet50;
mod resnet_cifar;
mod vgg16;

pub use resnet_cifar::MAX_CIFAR_RESNET_DEPTH;

/// A model from the zoo, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ModelKind {
    /// LeNet-5 (LeCun et al. 1998) with ReLU and max pooling: conv 6@5×5 (pad 2 on 28×28
    /// inputs) → pool → conv 16@5×5 → pool → FC 120 → FC 84 → FC classes. 61.7 k
    /// parameters on MNIST.
    LeNet5,
    /// A CIFAR ResNet of depth `6n + 2` (He et al. 2016, §4.2): conv 3×3 16 → 3 stages of n
    /// basic blocks (16/32/64 channels, stride 2 at stages 2–3) → global average pool → FC.
    /// Shortcuts are identities, or a 1×1 convolution + batch norm (projection) where the
    /// shape changes.
    ResNetCifar(usize),
    /// VGG-16 with batch norm for 32×32 inputs: 13 conv3×3–BN–ReLU in stages
    /// 64/128/256/512/512 with max pooling, then dropout → FC 512 → ReLU → BN → dropout → FC.
    Vgg16Bn,
    /// ResNet-50 v1.5 (stride on the 3×3 convolution of each bottleneck).
    ResNet50,
}

impl ModelKind {
    /// Every accepted name.
    pub const NAMES: &'static [&'static str] =
        &["lenet5", "resnet20", "resnet32", "resnet44", "resnet56", "resnet110", "vgg16", "resnet50"];

    /// Builds the graph for a per-sample input shape `[c, h, w]` and a class count.
    pub fn build(&self, input: &Shape, classes: usize) -> Result<Graph> {
        if classes < 2 {
            return Err(ReplicaError::Model(format!("{self}: need at least 2 classes, got {classes}")));
        }
        match *self {
            ModelKind::LeNet5 => lenet5::build(input, classes),
            ModelKind::ResNetCifar(depth) => resnet_cifar::build(depth, input, classes),
            ModelKind::Vgg16Bn => vgg16::build(input, classes),
            ModelKind::ResNet50 => resnet50::build(input, classes),
        }
    }

    /// Whether the model normalises with batch norm (every ResNet and VGG-16 here; not
    /// LeNet-5). Such models train with S-SGD by default: on them SMA needed more epochs
    /// than S-SGD (BENCHMARKS.md §4).
    pub fn has_batch_norm(&self) -> bool {
        match self {
            ModelKind::LeNet5 => false,
            ModelKind::ResNetCifar(_) | ModelKind::Vgg16Bn | ModelKind::ResNet50 => true,
        }
    }

    /// The per-sample input shape and class count the model is usually trained on (for
    /// `crossbow models` and `crossbow bench`).
    pub fn default_input(&self) -> (Shape, usize) {
        match self {
            ModelKind::LeNet5 => lenet5::default_input(),
            ModelKind::ResNetCifar(_) => resnet_cifar::default_input(),
            ModelKind::Vgg16Bn => vgg16::default_input(),
            ModelKind::ResNet50 => resnet50::default_input(),
        }
    }

    /// The PyTorch module path (`layer1.0.conv1`) of every node of `graph` (this model) that
    /// has parameters, by node id (for [`crate::export`]).
    pub fn pytorch_prefixes(&self, graph: &Graph) -> std::collections::HashMap<NodeId, String> {
        match self {
            ModelKind::LeNet5 => lenet5::pytorch_prefixes(graph),
            ModelKind::ResNetCifar(_) => resnet_cifar::pytorch_prefixes(graph),
            ModelKind::Vgg16Bn => vgg16::pytorch_prefixes(graph),
            ModelKind::ResNet50 => resnet50::pytorch_prefixes(graph),
        }
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelKind::LeNet5 => write!(f, "lenet5"),
            ModelKind::ResNetCifar(d) => write!(f, "resnet{d}"),
            ModelKind::Vgg16Bn => write!(f, "vgg16"),
            ModelKind::ResNet50 => write!(f, "resnet50"),
        }
    }
}

impl FromStr for ModelKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim().to_ascii_lowercase().replace(['-', '_'], "");
        match t.as_str() {
            "lenet5" | "lenet" => Ok(ModelKind::LeNet5),
            "vgg16" | "vgg16bn" => Ok(ModelKind::Vgg16Bn),
            "resnet50" => Ok(ModelKind::ResNet50),
            _ => {
                if let Some(d) = t.strip_prefix("resnet").and_then(|d| d.parse::<usize>().ok())
                    && d >= 8
                    && (d - 2) % 6 == 0
                {
                    if d > MAX_CIFAR_RESNET_DEPTH {
                        return Err(format!(
                            "model '{s}': CIFAR ResNets go up to depth {MAX_CIFAR_RESNET_DEPTH} (the deepest of He et al.)"
                        ));
                    }
                    return Ok(ModelKind::ResNetCifar(d));
                }
                let shown: String = s.chars().take(60).collect();
                Err(format!(
                    "unknown model '{shown}{}' (known: {}; CIFAR ResNets take any depth 6n+2 up to {MAX_CIFAR_RESNET_DEPTH})",
                    if shown.len() < s.len() { "…" } else { "" },
                    Self::NAMES.join(", ")
                ))
            }
        }
    }
}

impl TryFrom<String> for ModelKind {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<ModelKind> for String {
    fn from(m: ModelKind) -> String {
        m.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_counts() {
        let mnist = Shape::new(vec![1, 28, 28]);
        let cifar = Shape::new(vec![3, 32, 32]);
        assert_eq!(ModelKind::LeNet5.build(&mnist, 10).unwrap().num_params(), 61_706);
        // He et al. count 464,154 for ResNet-32 with parameter-free (option A) shortcuts; our
        // projection shortcuts add two 1×1 convolutions (16·32 + 32·64) and their batch norms
        // (2·32 + 2·64): 2,752 more. Both round to 0.46–0.47 M.
        let r32 = ModelKind::ResNetCifar(32).build(&cifar, 10).unwrap();
        assert_eq!(r32.num_params(), 464_154 + 2_752);
        let r20 = ModelKind::ResNetCifar(20).build(&cifar, 10).unwrap();
        assert_eq!(r20.num_params(), 269_722 + 2_752);
        let r50 = ModelKind::ResNet50.build(&Shape::new(vec![3, 224, 224]), 1000).unwrap();
        assert_eq!(r50.num_params(), 25_557_032, "torchvision resnet50 count");
        let vgg = ModelKind::Vgg16Bn.build(&cifar, 100).unwrap();
        // 13 conv weights 14,710,464 + their BN 8,448; classifier 512·512+512, BN 1,024, 512·100+100.
        assert_eq!(vgg.num_params(), 14_710_464 + 8_448 + 262_656 + 1_024 + 51_300);
    }

    #[test]
    fn has_batch_norm_says_what_the_graph_holds() {
        for name in ModelKind::NAMES {
            let kind: ModelKind = name.parse().unwrap();
            let (input, classes) = kind.default_input();
            let graph = kind.build(&input, classes).unwrap();
            let in_graph = graph.nodes.iter().any(|n| n.layer.is_batch_norm());
            assert_eq!(kind.has_batch_norm(), in_graph, "{name}");
        }
    }

    #[test]
    fn names_parse_and_print() {
        assert_eq!("resnet32".parse::<ModelKind>().unwrap(), ModelKind::ResNetCifar(32));
        assert_eq!("ResNet-110".parse::<ModelKind>().unwrap(), ModelKind::ResNetCifar(110));
        assert_eq!("vgg16".parse::<ModelKind>().unwrap().to_string(), "vgg16");
        let e = "resnet33".parse::<ModelKind>().unwrap_err();
        assert!(e.contains("unknown model 'resnet33'") && e.contains("lenet5"), "{e}");
        assert!("alexnet".parse::<ModelKind>().is_err());
    }

    #[test]
    fn shapes_flow_through() {
        let g = ModelKind::ResNetCifar(20).build(&Shape::new(vec![3, 32, 32]), 10).unwrap();
        let pool = g.nodes.iter().find(|n| n.name == "pool").unwrap();
        assert_eq!(pool.shape.dims(), &[64, 1, 1]);
        let r50 = ModelKind::ResNet50.build(&Shape::new(vec![3, 224, 224]), 1000).unwrap();
        let last = r50.nodes.iter().find(|n| n.name == "pool").unwrap();
        assert_eq!(last.shape.dims(), &[2048, 1, 1]);
        // LeNet on CIFAR-shaped input works too.
        assert!(ModelKind::LeNet5.build(&Shape::new(vec![3, 32, 32]), 10).is_ok());
        // A too-small input is an error naming the layer, not a panic.
        let e = ModelKind::LeNet5.build(&Shape::new(vec![1, 4, 4]), 10).unwrap_err().to_string();
        assert!(e.contains("conv"), "{e}");
        assert!(ModelKind::LeNet5.build(&Shape::new(vec![1, 28, 28]), 1).is_err());
    }
}
