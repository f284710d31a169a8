//! Models as a layer graph: nodes in topological order, per-sample shape inference, and the
//! layout of every parameter in one flat buffer.

use crossbow_kernels::batch_norm::BatchNormGeom;
use crossbow_kernels::conv2d::Conv2dGeom;
use crossbow_kernels::linear::LinearGeom;
use crossbow_kernels::pool::Pool2dGeom;
use crossbow_tensor::{FanMode, Init, Shape};
use serde::Serialize;

use crate::error::{ReplicaError, Result};

/// Index of a node in its graph.
pub type NodeId = usize;

/// What a node computes.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Layer {
    /// The input batch.
    Input,
    /// 2-d convolution.
    Conv2d {
        /// Output channels (number of filters).
        out_channels: usize,
        /// Side of the square kernel, in pixels.
        kernel: usize,
        /// Step between windows, in pixels.
        stride: usize,
        /// Zero padding added on each side, in pixels.
        pad: usize,
        /// Whether a per-channel bias is added.
        bias: bool,
    },
    /// Batch normalisation over channels.
    BatchNorm {
        /// Added to the variance before the square root, > 0 (PyTorch default 1e-5).
        eps: f32,
        /// Running-statistics update rate, in `[0, 1]`: `r = (1 - momentum) r + momentum * batch`.
        momentum: f32,
    },
    /// `max(x, 0)`.
    Relu,
    /// Max pooling.
    MaxPool {
        /// Side of the square window, in pixels.
        kernel: usize,
        /// Step between windows, in pixels.
        stride: usize,
        /// Padding on each side, in pixels (padded positions are left out of the max).
        pad: usize,
        /// Round the output size up (Caffe-style ceil mode) rather than down.
        ceil: bool,
    },
    /// Average pooling (windows divided by their in-bounds element count).
    AvgPool {
        /// Side of the square window, in pixels.
        kernel: usize,
        /// Step between windows, in pixels.
        stride: usize,
        /// Padding on each side, in pixels (padded positions are left out of the average).
        pad: usize,
        /// Round the output size up (Caffe-style ceil mode) rather than down.
        ceil: bool,
    },
    /// Average over all spatial positions: `[c, h, w] -> [c, 1, 1]`.
    GlobalAvgPool,
    /// Fully connected; the input is flattened per sample.
    Linear {
        /// Output features per sample.
        out_features: usize,
        /// Whether a per-feature bias is added.
        bias: bool,
    },
    /// Inverted dropout (training only).
    Dropout {
        /// Probability of dropping an element, in `[0, 1)`.
        p: f32,
    },
    /// Element-wise sum of two inputs of the same shape (residual connections).
    Add,
}

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
        self.nodes.iter().enumerate().map(|(i, n)| self.layer_flops(i, n)).sum()
    }

    fn layer_flops(&self, _i: NodeId, n: &Node) -> f64 {
        match &n.layer {
            Layer::Conv2d { .. } => {
                let g = self.conv_geom(n, 1);
                g.forward_flops()
            }
            Layer::Linear { .. } => {
                let g = self.linear_geom(n, 1);
                g.forward_flops()
            }
            _ => 0.0,
        }
    }

    fn chw(s: &Shape) -> (usize, usize, usize) {
        match s.dims() {
            [c, h, w] => (*c, *h, *w),
            [f] => (*f, 1, 1),
            d => (d.iter().product(), 1, 1),
        }
    }

    /// The conv2d geometry of node `n` at batch `batch`.
    pub fn conv_geom(&self, n: &Node, batch: usize) -> Conv2dGeom {
        let (c, h, w) = Self::chw(&self.nodes[n.inputs[0]].shape);
        match n.layer {
            Layer::Conv2d { out_channels, kernel, stride, pad, bias } => {
                Conv2dGeom::square(batch, c, (h, w), out_channels, kernel, stride, pad, bias)
            }
            _ => unreachable!("conv_geom on a non-conv node"),
        }
    }

    /// The linear geometry of node `n` at batch `batch`.
    pub fn linear_geom(&self, n: &Node, batch: usize) -> LinearGeom {
        let inf = self.nodes[n.inputs[0]].shape.dims().iter().product();
        match n.layer {
            Layer::Linear { out_features, bias } => LinearGeom { batch, in_features: inf, out_features, bias },
            _ => unreachable!("linear_geom on a non-linear node"),
        }
    }

    /// The batch-norm geometry of node `n` at batch `batch`.
    pub fn bn_geom(&self, n: &Node, batch: usize) -> BatchNormGeom {
        let (c, h, w) = Self::chw(&n.shape);
        match n.layer {
            Layer::BatchNorm { eps, momentum } => BatchNormGeom { batch, channels: c, spatial: h * w, eps, momentum },
            _ => unreachable!("bn_geom on a non-bn node"),
        }
    }

    /// The pooling geometry of node `n` at batch `batch`.
    pub fn pool_geom(&self, n: &Node, batch: usize) -> Pool2dGeom {
        let (c, h, w) = Self::chw(&self.nodes[n.inputs[0]].shape);
        match n.layer {
            Layer::MaxPool { kernel, stride, pad, ceil } | Layer::AvgPool { kernel, stride, pad, ceil } => {
                Pool2dGeom { ceil_mode: ceil, ..Pool2dGeom::square(batch, c, (h, w), kernel, stride, pad) }
            }
            Layer::GlobalAvgPool => Pool2dGeom::global(batch, c, (h, w)),
            _ => unreachable!("pool_geom on a non-pool node"),
        }
    }
}

/// Builds a [`Graph`] node by node, inferring shapes and laying out parameters.
pub struct GraphBuilder {
    name: String,
    nodes: Vec<Node>,
    param_len: usize,
    stats_len: usize,
    conv_init: Init,
    linear_init: (Init, Init),
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
                layer: Layer::Input,
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

    fn check(&self, n: NodeId) -> Result<()> {
        if n < self.nodes.len() { Ok(()) } else { Err(ReplicaError::Model(format!("node {n} does not exist"))) }
    }

    fn chw(&self, n: NodeId, what: &str) -> Result<(usize, usize, usize)> {
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
    fn does_not_fit(
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

    fn push(
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

    fn region(
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

    /// A square 2-d convolution.
    #[allow(clippy::too_many_arguments)]
    pub fn conv2d(
        &mut self,
        name: &str,
        x: NodeId,
        out_channels: usize,
        kernel: usize,
        stride: usize,
        pad: usize,
        bias: bool,
    ) -> Result<NodeId> {
        self.check(x)?;
        let (c, h, w) = self.chw(x, name)?;
        let g = Conv2dGeom::square(1, c, (h, w), out_channels, kernel, stride, pad, bias);
        if g.validate().is_err() {
            return Err(self.does_not_fit(name, "convolution", (kernel, stride, pad), (c, h, w)));
        }
        let shape = Shape::new(vec![out_channels, g.out_h(), g.out_w()]);
        let region = self.region(
            g.weight_len(),
            if bias { out_channels } else { 0 },
            self.conv_init,
            Init::Constant { value: 0.0 },
            (c * kernel * kernel, out_channels * kernel * kernel),
        );
        Ok(self.push(
            name.into(),
            Layer::Conv2d { out_channels, kernel, stride, pad, bias },
            vec![x],
            shape,
            Some(region),
            None,
        ))
    }

    /// Batch normalisation (PyTorch defaults `eps = 1e-5`, `momentum = 0.1`).
    pub fn batch_norm(&mut self, name: &str, x: NodeId) -> Result<NodeId> {
        self.batch_norm_with(name, x, 1e-5, 0.1)
    }

    /// Batch normalisation with explicit constants.
    pub fn batch_norm_with(&mut self, name: &str, x: NodeId, eps: f32, momentum: f32) -> Result<NodeId> {
        self.check(x)?;
        let shape = self.nodes[x].shape.clone();
        let c = shape.dims()[0];
        let region = self.region(c, c, Init::Constant { value: 1.0 }, Init::Constant { value: 0.0 }, (1, 1));
        let stats = self.stats_len;
        self.stats_len += 2 * c;
        Ok(self.push(name.into(), Layer::BatchNorm { eps, momentum }, vec![x], shape, Some(region), Some(stats)))
    }

    /// ReLU.
    pub fn relu(&mut self, name: &str, x: NodeId) -> Result<NodeId> {
        self.check(x)?;
        let shape = self.nodes[x].shape.clone();
        Ok(self.push(name.into(), Layer::Relu, vec![x], shape, None, None))
    }

    fn pool(&mut self, name: &str, x: NodeId, layer: Layer) -> Result<NodeId> {
        self.check(x)?;
        let (c, h, w) = self.chw(x, name)?;
        let g = match layer {
            Layer::MaxPool { kernel, stride, pad, ceil } | Layer::AvgPool { kernel, stride, pad, ceil } => {
                Pool2dGeom { ceil_mode: ceil, ..Pool2dGeom::square(1, c, (h, w), kernel, stride, pad) }
            }
            _ => Pool2dGeom::global(1, c, (h, w)),
        };
        if g.validate().is_err() {
            let (k, st, p) = match layer {
                Layer::MaxPool { kernel, stride, pad, .. } | Layer::AvgPool { kernel, stride, pad, .. } => {
                    (kernel, stride, pad)
                }
                _ => (h.max(w), 1, 0),
            };
            return Err(self.does_not_fit(name, "pooling", (k, st, p), (c, h, w)));
        }
        let shape = Shape::new(vec![c, g.out_h(), g.out_w()]);
        Ok(self.push(name.into(), layer, vec![x], shape, None, None))
    }

    /// Max pooling.
    pub fn max_pool(
        &mut self,
        name: &str,
        x: NodeId,
        kernel: usize,
        stride: usize,
        pad: usize,
        ceil: bool,
    ) -> Result<NodeId> {
        self.pool(name, x, Layer::MaxPool { kernel, stride, pad, ceil })
    }

    /// Average pooling.
    pub fn avg_pool(
        &mut self,
        name: &str,
        x: NodeId,
        kernel: usize,
        stride: usize,
        pad: usize,
        ceil: bool,
    ) -> Result<NodeId> {
        self.pool(name, x, Layer::AvgPool { kernel, stride, pad, ceil })
    }

    /// Global average pooling to `[c, 1, 1]`.
    pub fn global_avg_pool(&mut self, name: &str, x: NodeId) -> Result<NodeId> {
        self.pool(name, x, Layer::GlobalAvgPool)
    }

    /// A fully connected layer over the flattened input.
    pub fn linear(&mut self, name: &str, x: NodeId, out_features: usize, bias: bool) -> Result<NodeId> {
        self.check(x)?;
        if out_features == 0 {
            return Err(ReplicaError::Model(format!("{name}: a linear layer needs at least one output")));
        }
        let inf: usize = self.nodes[x].shape.dims().iter().product();
        let (wi, bi) = self.linear_init;
        let region = self.region(inf * out_features, if bias { out_features } else { 0 }, wi, bi, (inf, out_features));
        Ok(self.push(
            name.into(),
            Layer::Linear { out_features, bias },
            vec![x],
            Shape::new(vec![out_features]),
            Some(region),
            None,
        ))
    }

    /// Dropout with probability `p`.
    pub fn dropout(&mut self, name: &str, x: NodeId, p: f32) -> Result<NodeId> {
        self.check(x)?;
        if !(0.0..1.0).contains(&p) {
            return Err(ReplicaError::Model(format!("{name}: dropout probability {p} is not in [0, 1)")));
        }
        let shape = self.nodes[x].shape.clone();
        Ok(self.push(name.into(), Layer::Dropout { p }, vec![x], shape, None, None))
    }

    /// The sum of two nodes of the same shape.
    pub fn add(&mut self, name: &str, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.check(a)?;
        self.check(b)?;
        let sa = self.nodes[a].shape.clone();
        sa.expect_eq(&self.nodes[b].shape, name).map_err(|e| ReplicaError::Model(e.to_string()))?;
        Ok(self.push(name.into(), Layer::Add, vec![a, b], sa, None, None))
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
