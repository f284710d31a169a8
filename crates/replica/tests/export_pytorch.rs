//! `crossbow_replica::export` against real PyTorch: the exported names, shapes and dtypes of
//! every zoo model equal the `state_dict()` of its PyTorch module (golden lists in
//! `tests/data`, written by `scripts/pytorch_models.py golden`), and — run by hand, see
//! `write_models_for_the_pytorch_check` — PyTorch's logits on an exported model equal
//! crossbow's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crossbow_kernels::CpuBackend;
use crossbow_replica::exec::Executor;
use crossbow_replica::export::{ExportData, ExportTensor, export_metadata, pytorch_tensors, write_safetensors};
use crossbow_replica::graph::{Graph, Layer};
use crossbow_replica::program::{Instr, Mode};
use crossbow_replica::replica::{Replica, initial_params};
use crossbow_replica::{ModelKind, ReplicaError, Result};
use crossbow_tensor::{Rng, Shape};
use serde::Deserialize;

#[derive(Deserialize)]
struct Golden {
    model: String,
    input: Vec<usize>,
    classes: usize,
    state_dict: Vec<GoldenTensor>,
}

#[derive(Deserialize, Debug, PartialEq)]
struct GoldenTensor {
    name: String,
    shape: Vec<usize>,
    dtype: String,
}

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

#[allow(clippy::unwrap_used)] // Test helper: a zoo model that does not build should fail the test.
fn build(model: &str, input: &[usize], classes: usize) -> Graph {
    model.parse::<ModelKind>().unwrap().build(&Shape::new(input.to_vec()), classes).unwrap()
}

fn describe(ts: &[ExportTensor]) -> Vec<GoldenTensor> {
    ts.iter()
        .map(|t| GoldenTensor {
            name: t.name.clone(),
            shape: t.shape.clone(),
            dtype: match t.data {
                ExportData::F32(_) => "F32".into(),
                ExportData::I64(_) => "I64".into(),
            },
        })
        .collect()
}

#[allow(clippy::unwrap_used)] // Test helper: a missing golden file or a failed export should fail the test.
fn check_golden(model: &str) {
    let path = data_dir().join(format!("pytorch_{model}_keys.json"));
    let golden: Golden = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(golden.model, model);
    let g = build(&golden.model, &golden.input, golden.classes);
    let ts = pytorch_tensors(&g, &vec![0.0; g.param_len], &vec![0.0; g.stats_len]).unwrap();
    let got = describe(&ts);
    for (i, (a, b)) in got.iter().zip(&golden.state_dict).enumerate() {
        assert_eq!(a, b, "{model}: tensor {i} differs from PyTorch's state_dict ({})", path.display());
    }
    assert_eq!(got.len(), golden.state_dict.len(), "{model}: tensor count");
}

#[test]
fn lenet5_matches_pytorch_state_dict() {
    check_golden("lenet5");
}

#[test]
fn resnet20_matches_pytorch_state_dict() {
    check_golden("resnet20");
}

#[test]
fn vgg16_matches_pytorch_state_dict() {
    check_golden("vgg16");
}

#[test]
fn resnet50_matches_pytorch_state_dict() {
    check_golden("resnet50");
}

/// Parameters from the model's initialisers, then batch-norm gammas and betas and running
/// statistics away from their initial 1, 0, 0, 1, so that a swapped or misplaced tensor shows
/// in the logits.
fn perturbed_model(g: &Graph, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut params = initial_params(g, seed);
    let mut stats = vec![0.0f32; g.stats_len];
    let mut rng = Rng::derive(seed, 77);
    for node in &g.nodes {
        if let (Layer::BatchNorm(_), Some(r), Some(s)) = (&node.layer, &node.params, node.stats) {
            let c = r.weight_len;
            for v in &mut params[r.offset..r.offset + c] {
                *v = rng.uniform_range(0.5, 1.5);
            }
            for v in &mut params[r.offset + c..r.offset + 2 * c] {
                *v = rng.uniform_range(-0.3, 0.3);
            }
            for v in &mut stats[s..s + c] {
                *v = rng.uniform_range(-0.3, 0.3);
            }
            for v in &mut stats[s + c..s + 2 * c] {
                *v = rng.uniform_range(0.5, 2.0);
            }
        }
    }
    (params, stats)
}

/// Crossbow's evaluation-mode logits `[batch, classes]` for `images` on the CPU.
fn eval_logits(g: &Graph, params: &[f32], stats: &[f32], images: &[f32], batch: usize) -> Result<Vec<f32>> {
    let be = CpuBackend::new(0);
    let mut rep = Replica::from_host(&be, params, stats)?;
    let mut ex = Executor::new(&be, g, batch, Mode::Eval)?;
    ex.upload_batch(&be, images, &vec![0.0; batch])?;
    ex.run(&be, &rep.params, None, &mut rep.state, 0)?;
    let logits = ex.program().instrs.iter().find_map(|i| match i {
        Instr::Loss(loss) => Some(loss.logits),
        _ => None,
    });
    let logits = logits.ok_or_else(|| ReplicaError::Model("the evaluation program has no loss".into()))?;
    ex.download_tensor(&be, logits)
}

/// Not a CI test (it needs PyTorch): writes, for several zoo models, `<name>.safetensors` (the
/// export) and `<name>.io.safetensors` (an input batch and crossbow's eval-mode logits on it)
/// to `$CROSSBOW_EXPORT_CHECK_DIR` (default: a `crossbow-export-check` temporary folder), for
///
/// ```text
/// cargo test -p crossbow-replica --test export_pytorch -- --ignored
/// python3 scripts/pytorch_models.py check "${CROSSBOW_EXPORT_CHECK_DIR:-/tmp/crossbow-export-check}"
/// ```
#[test]
#[ignore = "writes files for scripts/pytorch_models.py check, which needs PyTorch"]
fn write_models_for_the_pytorch_check() {
    let dir = std::env::var_os("CROSSBOW_EXPORT_CHECK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("crossbow-export-check"));
    std::fs::create_dir_all(&dir).unwrap();
    let cases: [(&str, &[usize], usize); 5] = [
        ("lenet5", &[1, 28, 28], 10),
        ("resnet20", &[3, 32, 32], 10),
        ("resnet32", &[3, 32, 32], 100),
        ("vgg16", &[3, 32, 32], 10),
        ("resnet50", &[3, 64, 64], 10),
    ];
    let batch = 4;
    for (i, (model, input, classes)) in cases.into_iter().enumerate() {
        let g = build(model, input, classes);
        let (params, stats) = perturbed_model(&g, 100 + i as u64);
        let per_sample: usize = input.iter().product();
        let mut rng = Rng::derive(200 + i as u64, 0);
        let images: Vec<f32> = (0..batch * per_sample).map(|_| rng.uniform_range(-1.0, 1.0)).collect();
        let logits = eval_logits(&g, &params, &stats, &images, batch).unwrap();
        let ts = pytorch_tensors(&g, &params, &stats).unwrap();
        write_safetensors(&dir.join(format!("{model}.safetensors")), &ts, &export_metadata(&g)).unwrap();
        let mut shape = vec![batch];
        shape.extend_from_slice(input);
        let io = [
            ExportTensor { name: "input".into(), shape, data: ExportData::F32(images) },
            ExportTensor { name: "logits".into(), shape: vec![batch, classes], data: ExportData::F32(logits) },
        ];
        write_safetensors(&dir.join(format!("{model}.io.safetensors")), &io, &BTreeMap::new()).unwrap();
        eprintln!("wrote {model} to {}", dir.display());
    }
}
