//! `crossbow export`: a checkpoint's central model `z` (with the batch-norm statistics it was
//! evaluated with) as a safetensors file whose names and shapes are those of the same
//! architecture's PyTorch `state_dict` (see `docs/export.md` for the mapping).

use std::path::{Path, PathBuf};

use clap::Args;
use crossbow_replica::ModelKind;
use crossbow_replica::checkpoint::CheckpointFile;
use crossbow_replica::export::{export_metadata, pytorch_tensors, write_safetensors};
use crossbow_tensor::Shape;

use crate::checkpoint;
use crate::error::SessionError;

/// The flags of `crossbow export`.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// A checkpoint file, or a folder (its newest good checkpoint)
    #[arg(long, value_name = "FILE|DIR")]
    pub checkpoint: PathBuf,
    /// The safetensors file to write
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

/// Refuses an `--out` that would destroy something (exit 2, before anything is written): a
/// folder, a device or any other non-regular file (the atomic rename would replace it), the
/// checkpoint read or any other crossbow checkpoint, a missing or unwritable folder.
fn check_out(out: &Path, checkpoint: &Path) -> Result<(), SessionError> {
    let bad = |what: String| SessionError::usage(format!("--out {}: {what}", out.display()));
    if out.canonicalize().ok().is_some_and(|o| checkpoint.canonicalize().ok() == Some(o)) {
        return Err(bad("is the checkpoint itself; choose another file".into()));
    }
    if let Ok(m) = std::fs::symlink_metadata(out) {
        if m.is_dir() {
            return Err(bad("is a folder; give a file name".into()));
        }
        if m.file_type().is_symlink() {
            return Err(bad("is a symbolic link; the export would replace the link, not its target".into()));
        }
        if !m.is_file() {
            return Err(bad("is not a regular file (a device, FIFO or socket); it would be replaced".into()));
        }
        if CheckpointFile::read_state(out).is_ok() {
            return Err(bad("is a crossbow checkpoint; export to another file".into()));
        }
    }
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(bad(format!("its folder {} does not exist", dir.display())));
    }
    let probe = dir.join(format!(".crossbow-export-probe-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .and_then(|_| std::fs::remove_file(&probe))
        .map_err(|e| bad(format!("cannot write in {}: {e}", dir.display())))?;
    Ok(())
}

/// Runs `crossbow export`.
pub fn run(a: &ExportArgs) -> Result<(), SessionError> {
    let (path, file) = checkpoint::load(&a.checkpoint, &mut |w| eprintln!("warning: {w}"))
        .map_err(|e| SessionError::usage(e.to_string().replace("--resume", "--checkpoint")))?;
    check_out(&a.out, &path)?;
    let bad = |what: &str| SessionError::usage(format!("--checkpoint {}: {what}", path.display()));
    let st = &file.state;
    let model: ModelKind = st
        .get("model")
        .and_then(|m| m.as_str())
        .ok_or_else(|| bad("has no model name"))?
        .parse()
        .map_err(|e: String| bad(&e))?;
    let input: Vec<usize> = serde_json::from_value(st.get("input_shape").cloned().unwrap_or_default())
        .map_err(|_| bad("has no input shape"))?;
    let classes = st.get("classes").and_then(|c| c.as_u64()).ok_or_else(|| bad("has no class count"))? as usize;
    let graph = model.build(&Shape::new(input), classes).map_err(|e| bad(&e.to_string()))?;
    let z = file.tensor(&path, "engine/dev0/z").map_err(|e| SessionError::usage(e.to_string()))?;
    let stats = file.tensor(&path, "central/stats").map_err(|e| SessionError::usage(e.to_string()))?;
    let tensors = pytorch_tensors(&graph, &z.data, &stats.data).map_err(|e| bad(&e.to_string()))?;
    let mut meta = export_metadata(&graph);
    if let Some(n) = st.get("normalize") {
        for key in ["mean", "std"] {
            if let Some(v) = n.get(key) {
                meta.insert(format!("crossbow.normalize.{key}"), v.to_string());
            }
        }
    }
    if let Some(i) = st.get("iteration") {
        meta.insert("crossbow.iteration".into(), i.to_string());
    }
    // The label -> class name map (folder data: the class folder names), as a JSON array.
    if let Some(names) = st.get("class_names").filter(|n| n.is_array()) {
        meta.insert("crossbow.class_names".into(), names.to_string());
    }
    write_safetensors(&a.out, &tensors, &meta)
        .map_err(|e| SessionError::run(format!("--out {}: {e}", a.out.display())))?;
    println!(
        "wrote {} ({} tensors, {} from {} at iteration {})",
        a.out.display(),
        tensors.len(),
        model,
        path.display(),
        st.get("iteration").map(|v| v.to_string()).unwrap_or_else(|| "?".into())
    );
    Ok(())
}
