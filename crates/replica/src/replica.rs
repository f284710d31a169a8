//! A replica: one copy of the model's trainable state, each part one flat buffer.

use crossbow_kernels::{Backend, View, ViewMut};
use crossbow_tensor::Rng;

use crate::error::Result;
use crate::graph::Graph;

/// One copy of the model: parameters, gradients, momentum (velocity) and batch-norm running
/// statistics, each ONE flat buffer on the replica's device. Every layer's parameters are a
/// contiguous region ([`crate::graph::ParamRegion`]), so a synchroniser works on whole models
/// with a few vector ops and a checkpoint is a few contiguous writes.
pub struct Replica<B: Backend> {
    /// Trainable parameters `w`.
    pub params: B::Buffer,
    /// Gradient of the last mini-batch's mean loss.
    pub grads: B::Buffer,
    /// Momentum buffer of the local optimiser.
    pub velocity: B::Buffer,
    /// Batch-norm running statistics (`[mean(C), var(C)]` per BN layer).
    pub state: B::Buffer,
}

impl<B: Backend> Replica<B> {
    /// A replica with freshly initialised parameters (from `seed`), zero momentum, and running
    /// statistics at mean 0, variance 1.
    pub fn init(be: &B, graph: &Graph, seed: u64) -> Result<Self> {
        let host = initial_params(graph, seed);
        let mut params = be.alloc(graph.param_len.max(1))?;
        if !host.is_empty() {
            be.upload(&host, ViewMut::new(&mut params, 0..host.len())?)?;
        }
        let mut state = be.alloc(graph.stats_len.max(1))?;
        let st = initial_state(graph);
        if !st.is_empty() {
            be.upload(&st, ViewMut::new(&mut state, 0..st.len())?)?;
        }
        Ok(Replica {
            params,
            grads: be.alloc(graph.param_len.max(1))?,
            velocity: be.alloc(graph.param_len.max(1))?,
            state,
        })
    }

    /// A replica whose parameters and statistics are copies of `params` and `state` (host
    /// slices), with zero momentum — how a learner added at run time starts from `z`.
    pub fn from_host(be: &B, params: &[f32], state: &[f32]) -> Result<Self> {
        let mut p = be.alloc(params.len().max(1))?;
        be.upload(params, ViewMut::new(&mut p, 0..params.len())?)?;
        let mut s = be.alloc(state.len().max(1))?;
        be.upload(state, ViewMut::new(&mut s, 0..state.len())?)?;
        Ok(Replica {
            params: p,
            grads: be.alloc(params.len().max(1))?,
            velocity: be.alloc(params.len().max(1))?,
            state: s,
        })
    }

    /// Downloads the parameters (`len` = the graph's parameter count).
    pub fn params_to_host(&self, be: &B, len: usize) -> Result<Vec<f32>> {
        let mut v = vec![0.0; len];
        be.download(View::new(&self.params, 0..len)?, &mut v)?;
        Ok(v)
    }

    /// Bytes of the four flat buffers.
    pub fn bytes(graph: &Graph) -> usize {
        (3 * graph.param_len + graph.stats_len) * 4
    }
}

/// The initial flat parameter vector of `graph` from `seed` (each layer drawn from its own
/// stream, so adding a layer does not change the others).
pub fn initial_params(graph: &Graph, seed: u64) -> Vec<f32> {
    let mut out = vec![0.0f32; graph.param_len];
    for (i, node) in graph.nodes.iter().enumerate() {
        if let Some(r) = &node.params {
            let mut rng = Rng::derive(seed, 1_000 + i as u64);
            let (w, b) = out[r.range()].split_at_mut(r.weight_len);
            r.weight_init.fill(&mut rng, w, r.fan_in, r.fan_out);
            r.bias_init.fill(&mut rng, b, r.fan_in, r.fan_out);
        }
    }
    out
}

/// Initial batch-norm running statistics: mean 0, variance 1.
pub fn initial_state(graph: &Graph) -> Vec<f32> {
    let mut out = vec![0.0f32; graph.stats_len];
    for node in &graph.nodes {
        if let (true, Some(s)) = (node.layer.is_batch_norm(), node.stats) {
            let c = node.shape.dims()[0];
            out[s + c..s + 2 * c].fill(1.0);
        }
    }
    out
}
