//! Export of a model's weights for PyTorch: every parameter region and batch-norm running
//! statistic of a zoo [`Graph`] under the name and shape it has in the `state_dict()` of the
//! same architecture written as a PyTorch module (`scripts/pytorch_models.py`), and a
//! [safetensors](https://github.com/huggingface/safetensors) writer.
//!
//! Crossbow's layouts are PyTorch's, so no tensor is transposed: conv weights are
//! `[out, in, kh, kw]` (NCHW activations), linear weights `[out, in]` (`y = x W^T + b`, the
//! input flattened in `c, h, w` order as `torch.flatten(x, 1)` does), batch-norm parameters
//! `gamma` (`weight`) then `beta` (`bias`), running statistics `[mean(C), var(C)]` with the
//! unbiased variance. Every batch-norm layer also gets PyTorch's `num_batches_tracked` (an
//! `int64` scalar, written as 0: crossbow does not count batches, and PyTorch only reads it
//! when `momentum=None`), so the file's keys are exactly `model.state_dict().keys()`.
//!
//! The names, per model (see `docs/export.md` for the full table):
//!
//! * LeNet-5: crossbow's own (`conv1`, `conv2`, `fc1`, `fc2`, `fc3`).
//! * CIFAR ResNets and ResNet-50: torchvision's (`conv1`, `bn1`, `layer{s}.{b}.conv{i}`,
//!   `layer{s}.{b}.bn{i}`, `layer{s}.{b}.downsample.{0,1}` for a projection shortcut, `fc`).
//! * VGG-16: torchvision's `nn.Sequential` indices (`features.{i}`, `classifier.{i}`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use safetensors::tensor::{Dtype, TensorView};

use crate::error::{ReplicaError, Result};
use crate::graph::{Graph, NodeId};
use crate::models::ModelKind;

/// The values of an exported tensor.
#[derive(Clone, Debug, PartialEq)]
pub enum ExportData {
    /// 32-bit floats (weights, biases, running statistics).
    F32(Vec<f32>),
    /// 64-bit integers (batch norm's `num_batches_tracked`).
    I64(Vec<i64>),
}

impl ExportData {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            ExportData::F32(v) => v.len(),
            ExportData::I64(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The safetensors dtype.
    pub fn dtype(&self) -> Dtype {
        match self {
            ExportData::F32(_) => Dtype::F32,
            ExportData::I64(_) => Dtype::I64,
        }
    }

    /// Little-endian bytes, as safetensors stores them.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match self {
            ExportData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            ExportData::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }
}

/// One named tensor of a PyTorch `state_dict`, row-major (C order).
#[derive(Clone, Debug, PartialEq)]
pub struct ExportTensor {
    /// The `state_dict` key (`layer1.0.conv1.weight`).
    pub name: String,
    /// The PyTorch shape (`[]` for a scalar).
    pub shape: Vec<usize>,
    /// The values; as many as the shape's product.
    pub data: ExportData,
}

impl ExportTensor {
    pub(crate) fn f32(name: String, shape: Vec<usize>, data: &[f32]) -> Self {
        ExportTensor { name, shape, data: ExportData::F32(data.to_vec()) }
    }

    pub(crate) fn i64(name: String, shape: Vec<usize>, data: &[i64]) -> Self {
        ExportTensor { name, shape, data: ExportData::I64(data.to_vec()) }
    }
}

/// The tensors of `graph`'s PyTorch `state_dict`, in its order, from a flat parameter buffer
/// (`graph.param_len` values) and a batch-norm state buffer (`graph.stats_len` values: the
/// running statistics).
///
/// Errors if the graph is not a zoo model (its name does not parse as a [`ModelKind`]), if a
/// node with parameters has no PyTorch name, or if a buffer's length does not match the graph.
pub fn pytorch_tensors(graph: &Graph, params: &[f32], stats: &[f32]) -> Result<Vec<ExportTensor>> {
    if params.len() != graph.param_len {
        return Err(ReplicaError::Model(format!(
            "{}: {} parameter values given, the model has {}",
            graph.name,
            params.len(),
            graph.param_len
        )));
    }
    if stats.len() != graph.stats_len {
        return Err(ReplicaError::Model(format!(
            "{}: {} batch-norm statistics given, the model has {}",
            graph.name,
            stats.len(),
            graph.stats_len
        )));
    }
    let prefixes = pytorch_prefixes(graph)?;
    let mut out = Vec::new();
    let mut exported = 0usize;
    for (id, node) in graph.nodes.iter().enumerate() {
        let Some(region) = &node.params else { continue };
        let Some(prefix) = prefixes.get(&id) else {
            return Err(ReplicaError::Model(format!(
                "{}: node '{}' has parameters but no PyTorch name",
                graph.name, node.name
            )));
        };
        let Some((weight_shape, bias_len)) = node.layer.ops().pytorch_shapes(graph, node) else {
            return Err(ReplicaError::Model(format!(
                "{}: node '{}' has parameters but its layer has no PyTorch parameters",
                graph.name, node.name
            )));
        };
        let weight_len: usize = weight_shape.iter().product();
        if region.weight_len != weight_len || region.len != weight_len + bias_len || region.range().end > params.len() {
            return Err(ReplicaError::Model(format!(
                "{}: node '{}' has a parameter region of {} + {} values at {}, its shape {:?} needs {} + {}",
                graph.name,
                node.name,
                region.weight_len,
                region.len - region.weight_len.min(region.len),
                region.offset,
                weight_shape,
                weight_len,
                bias_len
            )));
        }
        let p = &params[region.range()];
        let (w, b) = p.split_at(weight_len);
        out.push(ExportTensor::f32(format!("{prefix}.weight"), weight_shape, w));
        if bias_len > 0 {
            out.push(ExportTensor::f32(format!("{prefix}.bias"), vec![bias_len], b));
        }
        exported += region.len;
        out.extend(node.layer.ops().pytorch_buffers(graph, node, prefix, stats)?);
    }
    if exported != graph.param_len {
        return Err(ReplicaError::Model(format!(
            "{}: the layers' parameter regions cover {exported} of {} values",
            graph.name, graph.param_len
        )));
    }
    let mut seen = HashSet::new();
    if let Some(t) = out.iter().find(|t| !seen.insert(t.name.as_str())) {
        return Err(ReplicaError::Model(format!("{}: two tensors are named '{}'", graph.name, t.name)));
    }
    Ok(out)
}

/// The PyTorch module path of every node with parameters, by node id (the model's own
/// mapping, [`ModelKind::pytorch_prefixes`]).
fn pytorch_prefixes(graph: &Graph) -> Result<HashMap<NodeId, String>> {
    let kind: ModelKind = graph.name.parse().map_err(|_| {
        ReplicaError::Model(format!(
            "no PyTorch names for model '{}': export knows the zoo's models ({})",
            graph.name,
            ModelKind::NAMES.join(", ")
        ))
    })?;
    Ok(kind.pytorch_prefixes(graph))
}

/// Metadata describing `graph` for the safetensors header: `format = pt` (what
/// `transformers`-style loaders check), and the crossbow model name, per-sample input shape
/// and class count.
pub fn export_metadata(graph: &Graph) -> BTreeMap<String, String> {
    let dims: Vec<String> = graph.input_shape().dims().iter().map(|d| d.to_string()).collect();
    BTreeMap::from([
        ("format".to_string(), "pt".to_string()),
        ("crossbow.model".to_string(), graph.name.clone()),
        ("crossbow.input_shape".to_string(), dims.join(",")),
        ("crossbow.classes".to_string(), graph.classes.to_string()),
    ])
}

/// Writes `tensors` to `path` as a safetensors file with `metadata` in its header (a
/// `format = pt` entry is added unless `metadata` has a `format`).
///
/// The write is atomic: the file is written to a temporary file in the same directory,
/// flushed to disk, then renamed over `path`, so a reader sees the old file or the whole new
/// one. Errors if two tensors share a name, if a tensor's data does not match its shape, or
/// on any I/O failure (the temporary file is then removed).
pub fn write_safetensors(path: &Path, tensors: &[ExportTensor], metadata: &BTreeMap<String, String>) -> Result<()> {
    let mut seen = HashSet::new();
    for t in tensors {
        if !seen.insert(t.name.as_str()) {
            return Err(ReplicaError::Config(format!("safetensors export: two tensors are named '{}'", t.name)));
        }
        let numel: usize = t.shape.iter().product();
        if numel != t.data.len() {
            return Err(ReplicaError::Config(format!(
                "safetensors export: tensor '{}' has shape {:?} ({numel} values) but {} values",
                t.name,
                t.shape,
                t.data.len()
            )));
        }
    }
    let bytes: Vec<Vec<u8>> = tensors.iter().map(|t| t.data.to_le_bytes()).collect();
    let views = tensors
        .iter()
        .zip(&bytes)
        .map(|(t, b)| Ok((t.name.as_str(), TensorView::new(t.data.dtype(), t.shape.clone(), b)?)))
        .collect::<std::result::Result<Vec<_>, safetensors::SafeTensorError>>()
        .map_err(|e| ReplicaError::Config(format!("safetensors export: {e}")))?;
    let mut header: HashMap<String, String> = metadata.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    header.entry("format".into()).or_insert_with(|| "pt".into());
    let buffer = safetensors::serialize(views, Some(header))
        .map_err(|e| ReplicaError::Config(format!("safetensors export: {e}")))?;
    let buffer = crate::checkpoint::canonical_header(buffer)
        .map_err(|e| ReplicaError::Config(format!("safetensors export: {e}")))?;
    write_atomically(path, &buffer)
}

/// Writes `bytes` to a temporary file next to `path`, syncs it, and renames it to `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let io = |what: &str, p: &Path, e: std::io::Error| ReplicaError::Data(format!("{what} {}: {e}", p.display()));
    let file_name = path
        .file_name()
        .ok_or_else(|| ReplicaError::Config(format!("export path '{}' has no file name", path.display())))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{}.{}-{n}.tmp", file_name.to_string_lossy(), std::process::id()));
    let written = (|| {
        let mut f = File::create(&tmp).map_err(|e| io("creating", &tmp, e))?;
        f.write_all(bytes).map_err(|e| io("writing", &tmp, e))?;
        f.sync_all().map_err(|e| io("syncing", &tmp, e))?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(|e| io("renaming the temporary file to", path, e))
    })();
    if written.is_err() {
        // Best effort: the write already failed, and that is the error to report.
        let _ = std::fs::remove_file(&tmp);
        return written;
    }
    // Make the rename itself durable (directories cannot be opened for syncing everywhere).
    #[cfg(unix)]
    File::open(&dir).and_then(|d| d.sync_all()).map_err(|e| io("syncing the directory", &dir, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use crossbow_tensor::Shape;
    use safetensors::SafeTensors;

    use super::*;
    use crate::graph::GraphBuilder;
    use crate::replica::initial_params;

    fn graph(kind: &str, input: &[usize], classes: usize) -> Graph {
        kind.parse::<ModelKind>().unwrap().build(&Shape::new(input.to_vec()), classes).unwrap()
    }

    /// Distinct values everywhere, so that a misplaced slice shows.
    fn ramp(n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|i| i as f32 * scale).collect()
    }

    fn find<'a>(ts: &'a [ExportTensor], name: &str) -> &'a ExportTensor {
        ts.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("no tensor {name}"))
    }

    fn f32s(t: &ExportTensor) -> &[f32] {
        match &t.data {
            ExportData::F32(v) => v,
            ExportData::I64(_) => panic!("{} is not f32", t.name),
        }
    }

    #[test]
    fn every_value_is_exported_once_from_its_region() {
        let g = graph("resnet20", &[3, 32, 32], 10);
        let params = ramp(g.param_len, 1.0);
        let stats = ramp(g.stats_len, -1.0);
        let ts = pytorch_tensors(&g, &params, &stats).unwrap();
        let mut all: Vec<f32> = ts
            .iter()
            .filter(|t| !t.name.contains(".running_") && t.data.dtype() == Dtype::F32)
            .flat_map(|t| f32s(t).to_vec())
            .collect();
        all.sort_by(f32::total_cmp);
        assert_eq!(all, params, "the parameters, each exactly once");
        let node = g.nodes.iter().find(|n| n.name == "stage2.block1.proj.bn").unwrap();
        let (r, s) = (node.params.clone().unwrap(), node.stats.unwrap());
        let t = find(&ts, "layer2.0.downsample.1.weight");
        assert_eq!((t.shape.as_slice(), f32s(t)), (&[32][..], &params[r.offset..r.offset + 32]));
        let t = find(&ts, "layer2.0.downsample.1.bias");
        assert_eq!(f32s(t), &params[r.offset + 32..r.offset + 64]);
        assert_eq!(f32s(find(&ts, "layer2.0.downsample.1.running_mean")), &stats[s..s + 32]);
        assert_eq!(f32s(find(&ts, "layer2.0.downsample.1.running_var")), &stats[s + 32..s + 64]);
        let t = find(&ts, "layer2.0.downsample.1.num_batches_tracked");
        assert_eq!((t.shape.len(), &t.data), (0, &ExportData::I64(vec![0])));
        let t = find(&ts, "layer3.2.conv2.weight");
        assert_eq!(t.shape, [64, 64, 3, 3]);
        let t = find(&ts, "fc.weight");
        assert_eq!(t.shape, [10, 64]);
        let fc = g.nodes.iter().find(|n| n.name == "fc").unwrap().params.clone().unwrap();
        assert_eq!(f32s(t), &params[fc.offset..fc.offset + 640]);
    }

    #[test]
    fn vgg_names_follow_the_sequential_indices() {
        let g = graph("vgg16", &[3, 32, 32], 100);
        let ts = pytorch_tensors(&g, &vec![0.0; g.param_len], &vec![0.0; g.stats_len]).unwrap();
        // conv, bn, relu per layer; a pool after each stage.
        assert_eq!(find(&ts, "features.0.weight").shape, [64, 3, 3, 3]);
        assert_eq!(find(&ts, "features.1.running_var").shape, [64]);
        assert_eq!(find(&ts, "features.7.weight").shape, [128, 64, 3, 3]);
        assert_eq!(find(&ts, "features.41.weight").shape, [512]);
        assert_eq!(find(&ts, "classifier.1.weight").shape, [512, 512]);
        assert_eq!(find(&ts, "classifier.3.running_mean").shape, [512]);
        assert_eq!(find(&ts, "classifier.5.weight").shape, [100, 512]);
    }

    #[test]
    fn wrong_buffers_and_unknown_models_are_errors() {
        let g = graph("lenet5", &[1, 28, 28], 10);
        let e = pytorch_tensors(&g, &vec![0.0; g.param_len - 1], &[]).unwrap_err().to_string();
        assert!(e.contains("61705") && e.contains("61706"), "{e}");
        let e = pytorch_tensors(&g, &vec![0.0; g.param_len], &[0.0]).unwrap_err().to_string();
        assert!(e.contains("statistics"), "{e}");
        let mut b = GraphBuilder::new("custom", Shape::new(vec![1, 4, 4])).unwrap();
        let x = b.input();
        let x = b.linear("fc", x, 2, true).unwrap();
        let g = b.finish(x).unwrap();
        let e = pytorch_tensors(&g, &vec![0.0; g.param_len], &[]).unwrap_err().to_string();
        assert!(e.contains("custom") && e.contains("lenet5"), "{e}");
        // A zoo name on a graph whose nodes are not the zoo's.
        let mut b = GraphBuilder::new("resnet20", Shape::new(vec![1, 4, 4])).unwrap();
        let x = b.input();
        let x = b.linear("head", x, 2, true).unwrap();
        let g = b.finish(x).unwrap();
        let e = pytorch_tensors(&g, &vec![0.0; g.param_len], &[]).unwrap_err().to_string();
        assert!(e.contains("'head'"), "{e}");
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("crossbow-export-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn safetensors_round_trip() {
        let g = graph("resnet20", &[3, 32, 32], 10);
        let params = initial_params(&g, 7);
        let stats = ramp(g.stats_len, 0.25);
        let ts = pytorch_tensors(&g, &params, &stats).unwrap();
        let dir = tmpdir("roundtrip");
        let path = dir.join("model.safetensors");
        let meta = export_metadata(&g);
        // Twice: the second write replaces the first.
        write_safetensors(&path, &ts[..3], &BTreeMap::new()).unwrap();
        write_safetensors(&path, &ts, &meta).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
        let got_meta = header.metadata().clone().unwrap();
        assert_eq!(got_meta.get("format").map(String::as_str), Some("pt"));
        assert_eq!(got_meta.get("crossbow.model").map(String::as_str), Some("resnet20"));
        assert_eq!(got_meta.get("crossbow.input_shape").map(String::as_str), Some("3,32,32"));
        let st = SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.len(), ts.len());
        for t in &ts {
            let v = st.tensor(&t.name).unwrap();
            assert_eq!(v.shape(), t.shape.as_slice(), "{}", t.name);
            let back = match v.dtype() {
                Dtype::F32 => ExportData::F32(
                    v.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
                ),
                Dtype::I64 => ExportData::I64(
                    v.data().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect(),
                ),
                d => panic!("unexpected dtype {d:?}"),
            };
            assert_eq!(back, t.data, "{}", t.name);
        }
        // Nothing but the file is left in the directory.
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["model.safetensors"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_tensors_and_paths_are_errors_that_leave_nothing_behind() {
        let dir = tmpdir("bad");
        let path = dir.join("m.safetensors");
        let t = ExportTensor { name: "a".into(), shape: vec![2, 2], data: ExportData::F32(vec![0.0; 3]) };
        let e = write_safetensors(&path, std::slice::from_ref(&t), &BTreeMap::new()).unwrap_err().to_string();
        assert!(e.contains("'a'") && e.contains("[2, 2]"), "{e}");
        let ok = ExportTensor { shape: vec![3], ..t };
        let e = write_safetensors(&path, &[ok.clone(), ok.clone()], &BTreeMap::new()).unwrap_err().to_string();
        assert!(e.contains("two tensors"), "{e}");
        let e = write_safetensors(&dir.join("missing/m.safetensors"), &[ok], &BTreeMap::new()).unwrap_err();
        assert!(matches!(e, ReplicaError::Data(_)), "{e}");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
