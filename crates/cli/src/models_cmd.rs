//! `crossbow models`: what each model costs.

use crossbow_kernels::CpuBackend;
use crossbow_replica::exec::workspace_len;
use crossbow_replica::plan::plan;
use crossbow_replica::program::Mode;
use crossbow_replica::{ModelKind, Replica};
use serde::Serialize;

use crate::error::SessionError;

/// One row of the model table.
#[derive(Clone, Debug, Serialize)]
pub struct ModelRow {
    /// Model name (`resnet32`, ...).
    pub model: String,
    /// Per-sample input shape the model is built for, as text (`[3, 32, 32]`).
    pub input: String,
    /// Number of output classes.
    pub classes: usize,
    /// Number of trainable parameters.
    pub parameters: usize,
    /// Forward FLOPs per image (convolutions and linear layers, multiply-add = 2).
    pub mflops_per_image: f64,
    /// Batch size per learner the memory figures are for.
    pub batch: usize,
    /// Training activations + gradients per learner with the memory plan, in bytes.
    pub planned_activation_bytes: usize,
    /// Training activations + gradients per learner without the memory plan, in bytes.
    pub unplanned_activation_bytes: usize,
    /// Parameters, gradients, momentum and statistics, in bytes.
    pub replica_bytes: usize,
    /// Conv workspace of a single-threaded CPU learner, in bytes.
    pub workspace_bytes: usize,
}

/// A row of the table, or why the model cannot be built for the input asked for.
pub type Row = Result<ModelRow, (String, String)>;

/// Builds the table for `models` at `batch`: on each model's default input, on `image_size`
/// squares of colour images (what folder data gives), or on a dataset's own images and
/// classes (`data`: channels, height, width and classes, as `crossbow train --dry-run` has
/// them). A model that cannot take the input is a row saying why; an impossible batch is an
/// error.
pub fn table(
    models: &[ModelKind],
    batch: usize,
    image_size: Option<usize>,
    data: Option<([usize; 3], usize)>,
) -> Result<Vec<Row>, SessionError> {
    let mut rows = vec![];
    for &m in models {
        let (default, default_classes) = m.default_input();
        let (input, classes) = match (data, image_size) {
            (Some(([c, h, w], k)), _) => (crossbow_tensor::Shape::new(vec![c, h, w]), k),
            // Folder data: colour images of `s` pixels a side.
            (None, Some(s)) => (crossbow_tensor::Shape::new(vec![3, s, s]), default_classes),
            (None, None) => (default, default_classes),
        };
        let g = match m.build(&input, classes) {
            Ok(g) => g,
            Err(e) => {
                rows.push(Err((
                    m.to_string(),
                    format!("cannot take {input}: {}", e.to_string().trim_start_matches("model: ")),
                )));
                continue;
            }
        };
        // Checked sizes: an absurd batch is an error naming the flag, not an overflow.
        let p = crate::preflight::lower_checked(&g, batch, Mode::Train)
            .map_err(|e| SessionError::usage(format!("--batch-size {batch}: {e}")))?;
        let pl = plan(&p);
        let ws = workspace_len(&CpuBackend::new(0), &p);
        rows.push(Ok(ModelRow {
            model: m.to_string(),
            input: input.to_string(),
            classes,
            parameters: g.num_params(),
            mflops_per_image: g.forward_flops() / 1e6,
            batch,
            planned_activation_bytes: pl.planned_bytes(),
            unplanned_activation_bytes: pl.unplanned_bytes(),
            replica_bytes: Replica::<CpuBackend>::bytes(&g),
            workspace_bytes: ws * 4,
        }));
    }
    Ok(rows)
}

fn mib(b: usize) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// Prints the table as markdown (a model that cannot take the input: its row says why).
pub fn print(rows: &[Row]) {
    println!(
        "| model | input | classes | params | MFLOP/image (fwd) | batch | activations planned | unplanned | saved | replica | workspace |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let r = match r {
            Ok(r) => r,
            Err((model, why)) => {
                println!("| {model} | {why} | | | | | | | | | |");
                continue;
            }
        };
        println!(
            "| {} | {} | {} | {} ({:.3} M) | {:.1} | {} | {:.1} MiB | {:.1} MiB | {:.0}% | {:.1} MiB | {:.1} MiB |",
            r.model,
            r.input,
            r.classes,
            r.parameters,
            r.parameters as f64 / 1e6,
            r.mflops_per_image,
            r.batch,
            mib(r.planned_activation_bytes),
            mib(r.unplanned_activation_bytes),
            100.0 * (1.0 - r.planned_activation_bytes as f64 / r.unplanned_activation_bytes.max(1) as f64),
            mib(r.replica_bytes),
            mib(r.workspace_bytes)
        );
    }
}
