//! Models as a layer graph: nodes in topological order, per-sample shape inference, and the
//! layout of every parameter in one flat buffer.

//!
//! Each layer's builder method ([`GraphBuilder::conv2d`], [`GraphBuilder::batch_norm`], ...)
//! lives in its module under [`crate::layers`].

use crossbow_tensor::{FanMode, Init, Shape};
use serde::Serialize;

use crate::error::{ReplicaError, Result};
use crate::layers::Input;
pub use crate::layers::Layer;

/// Index of a node in its graph.
pub type NodeId = usize;

/// Where a layer's parameters live in the flat parameter buffer, and how they start.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ParamRegion {
    /// First element in the flat buffer.
    pub offset: usize,
    /// Elements (weights + bias, or gamma + beta).
    pub len: usize,
    /// Elements of the first part (weights or gamma).
    pub weight_len: usize,
    /// Initialiser of the first part.
    pub weight_init: Init,
    /// Initialiser of the second part (bias or beta), if any.
    pub bias_init: Init,
    /// Input connections per output unit, used by the initialisers.
    pub fan_in: usize,
    /// Output connections per input unit, used by the initialisers.
    pub fan_out: usize,
}

impl ParamRegion {
    /// The element range in the flat buffer.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.len
    }
}

/// One node of a model graph.
#[derive(Clone, Debug, Serialize)]
pub struct Node {
    /// A readable name (`stage2.block1.conv1`).
    pub name: String,
    /// What the node computes, with its hyper-parameters.
    pub layer: Layer,
    /// Input nodes.
    pub inputs: Vec<NodeId>,
    /// Output shape per sample (`[c, h, w]`, or `[features]`).
    pub shape: Shape,
    /// Parameter region, for layers with parameters.
    pub params: Option<ParamRegion>,
    /// Region of batch-norm running statistics in the state buffer (`[mean(C), var(C)]`), and
    /// of the saved batch statistics in the per-replica scratch buffer.
    pub stats: Option<usize>,
}

/// A model: nodes in topological order, the logits node, and the flat buffer sizes.
#[derive(Clone, Debug, Serialize)]
pub struct Graph {
    /// The model's name (`resnet32`, `lenet5`, ...).
    pub name: String,
    /// Every node, inputs before the nodes that read them; node 0 is the input.
    pub nodes: Vec<Node>,
    /// The node producing the logits `[classes]`.
    pub output: NodeId,
    /// Number of classes.
    pub classes: usize,
    /// Elements of the flat parameter buffer.
    pub param_len: usize,
    /// Elements of the batch-norm state buffer (running statistics) and saved-stats buffer.
    pub stats_len: usize,
}

impl Graph {
    /// The per-sample input shape.
    pub fn input_shape(&self) -> &Shape {
        &self.nodes[0].shape
    }

    /// Number of trainable parameters.
    pub fn num_params(&self) -> usize {
        self.param_len
    }

    /// Nodes that read node `n`'s output.
    pub fn consumers(&self, n: NodeId) -> Vec<NodeId> {
        self.nodes.iter().enumerate().filter(|(_, node)| node.inputs.contains(&n)).map(|(i, _)| i).collect()
    }

    /// Elements per sample of node `n`'s output.
    pub fn per_sample(&self, n: NodeId) -> usize {
        self.nodes[n].shape.dims().iter().product()
    }

    /// Forward FLOPs per image of the convolutions and linear layers (multiply-adds × 2).
    pub fn forward_flops(&self) -> f64 {
        self.nodes.iter().map(|n| n.layer.ops().flops(self, n)).sum()
    }
}

/// Builds a [`Graph`] node by node, inferring shapes and laying out parameters.
pub struct GraphBuilder {
    name: String,
    nodes: Vec<Node>,
    param_len: usize,
    stats_len: usize,
    pub(crate) conv_init: Init,
    pub(crate) linear_init: (Init, Init),
}

impl GraphBuilder {
    /// A graph whose input has per-sample shape `input` (`[c, h, w]`).
    pub fn new(name: impl Into<String>, input: Shape) -> Result<Self> {
        input.expect_non_empty("model input")?;
        if input.rank() != 3 {
            return Err(ReplicaError::Model(format!("model input must be [c, h, w], got {input}")));
        }
        Ok(GraphBuilder {
            name: name.into(),
            nodes: vec![Node {
                name: "input".into(),
                layer: Input.into(),
                inputs: vec![],
                shape: input,
                params: None,
                stats: None,
            }],
            param_len: 0,
            stats_len: 0,
            conv_init: Init::KaimingNormal { mode: FanMode::FanOut },
            linear_init: (Init::FanInUniform, Init::FanInUniform),
        })
    }

    /// The input node.
    pub fn input(&self) -> NodeId {
        0
    }

    /// Sets the initialiser of later conv weights (biases start at zero).
    pub fn set_conv_init(&mut self, init: Init) {
        self.conv_init = init;
    }

    /// Sets the initialisers of later linear weights and biases.
    pub fn set_linear_init(&mut self, weight: Init, bias: Init) {
        self.linear_init = (weight, bias);
    }

    /// The per-sample shape of a node.
    pub fn shape(&self, n: NodeId) -> &Shape {
        &self.nodes[n].shape
    }

    pub(crate) fn check(&self, n: NodeId) -> Result<()> {
        if n < self.nodes.len() { Ok(()) } else { Err(ReplicaError::Model(format!("node {n} does not exist"))) }
    }

    pub(crate) fn chw(&self, n: NodeId, what: &str) -> Result<(usize, usize, usize)> {
        match self.nodes[n].shape.dims() {
            [c, h, w] => Ok((*c, *h, *w)),
            _ => Err(ReplicaError::Model(format!(
                "{what}: input '{}' has shape {}, expected [c, h, w]",
                self.nodes[n].name, self.nodes[n].shape
            ))),
        }
    }

    /// A layer's window does not fit its input: said in the user's terms (the model needs
    /// larger images), not as a dump of the geometry.
    pub(crate) fn does_not_fit(
        &self,
        layer: &str,
        kind: &str,
        (kernel, stride, pad): (usize, usize, usize),
        (c, h, w): (usize, usize, usize),
    ) -> ReplicaError {
        let input = self.nodes.first().map(|n| n.shape.dims().to_vec()).unwrap_or_default();
        let input = input.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x");
        ReplicaError::Model(format!(
            "model '{}' does not fit images of {input}: its {kind} '{layer}' ({kernel}x{kernel} window, stride {stride}, padding {pad}) gets a {c}x{h}x{w} input; use larger images or another model",
            self.name
        ))
    }

    pub(crate) fn push(
        &mut self,
        name: String,
        layer: Layer,
        inputs: Vec<NodeId>,
        shape: Shape,
        params: Option<ParamRegion>,
        stats: Option<usize>,
    ) -> NodeId {
        self.nodes.push(Node { name, layer, inputs, shape, params, stats });
        self.nodes.len() - 1
    }

    pub(crate) fn region(
        &mut self,
        weight_len: usize,
        bias_len: usize,
        weight_init: Init,
        bias_init: Init,
        fans: (usize, usize),
    ) -> ParamRegion {
        let r = ParamRegion {
            offset: self.param_len,
            len: weight_len + bias_len,
            weight_len,
            weight_init,
            bias_init,
            fan_in: fans.0,
            fan_out: fans.1,
        };
        self.param_len += r.len;
        r
    }

    /// A new region of `len` elements in the batch-norm state and saved-statistics buffers;
    /// returns its offset.
    pub(crate) fn stats_region(&mut self, len: usize) -> usize {
        let offset = self.stats_len;
        self.stats_len += len;
        offset
    }

    /// Finishes the graph with `logits` (a `[classes]` node) as its output.
    pub fn finish(self, logits: NodeId) -> Result<Graph> {
        self.check(logits)?;
        let classes = match self.nodes[logits].shape.dims() {
            [c] => *c,
            _ => {
                return Err(ReplicaError::Model(format!(
                    "the output '{}' must be a [classes] vector, got {}",
                    self.nodes[logits].name, self.nodes[logits].shape
                )));
            }
        };
        if logits == 0 {
            return Err(ReplicaError::Model("the model has no layers".into()));
        }
        // Every node must feed the output: a dangling branch would be computed and never trained.
        let mut live = vec![false; self.nodes.len()];
        live[logits] = true;
        for i in (0..=logits).rev() {
            if live[i] {
                for &j in &self.nodes[i].inputs {
                    live[j] = true;
                }
            }
        }
        if let Some(i) = live.iter().position(|l| !l) {
            return Err(ReplicaError::Model(format!("node '{}' does not feed the output", self.nodes[i].name)));
        }
        Ok(Graph {
            name: self.name,
            nodes: self.nodes,
            output: logits,
            classes,
            param_len: self.param_len,
            stats_len: self.stats_len,
        })
    }
}

#[cfg(test)]
mod fit_tests {
    use crate::models::ModelKind;
    use crossbow_tensor::Shape;

    /// Images too small for a model are refused in words, never with a struct dump.
    #[test]
    fn too_small_images_are_refused_in_words() {
        for (m, shape) in [
            (ModelKind::LeNet5, vec![1, 1, 1]),
            (ModelKind::LeNet5, vec![1, 40, 12]),
            (ModelKind::LeNet5, vec![1, 2, 28]),
            (ModelKind::ResNetCifar(20), vec![3, 1, 1]),
        ] {
            let Err(e) = m.build(&Shape::new(shape.clone()), 10) else { continue };
            let e = e.to_string();
            assert!(e.contains("does not fit images of") && !e.contains('{') && !e.contains("Geom"), "{shape:?}: {e}");
        }
        assert!(ModelKind::LeNet5.build(&Shape::new(vec![1, 1, 1]), 10).is_err());
    }
}
