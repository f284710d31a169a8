//! `crossbow export`: a checkpoint becomes a safetensors file with PyTorch's names and shapes,
//! and never overwrites the checkpoint it reads.

// Test helpers: a failure to run the binary or read its files should fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use crossbow_replica::checkpoint::CheckpointFile;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_crossbow");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn export_writes_pytorch_names_and_shapes() {
    let d = std::env::temp_dir().join(format!("crossbow-export-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let ckpt = d.join("ckpt").display().to_string();
    let train = [
        "train",
        "--devices",
        "cpu",
        "--threads",
        "1",
        "--learners-per-device",
        "2",
        "--train-size",
        "256",
        "--test-size",
        "64",
        "--batch-size",
        "16",
        "--epochs",
        "0.25",
        "-q",
        "--checkpoint-dir",
        &ckpt,
    ];
    let o = run(&train);
    assert!(o.status.success(), "{}", text(&o));
    let out = d.join("lenet5.safetensors").display().to_string();
    let o = run(&["export", "--checkpoint", &ckpt, "--out", &out]);
    assert!(o.status.success(), "{}", text(&o));
    let bytes = std::fs::read(&out).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../replica/tests/data/pytorch_lenet5_keys.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let want = golden["state_dict"].as_array().expect("a key list");
    assert_eq!(st.len(), want.len());
    for k in want {
        let (name, shape) = match k {
            Value::Array(a) => (a[0].as_str().unwrap().to_string(), a[1].clone()),
            o => (o["name"].as_str().unwrap().to_string(), o["shape"].clone()),
        };
        let t = st.tensor(&name).unwrap_or_else(|_| panic!("no tensor {name}"));
        let shape: Vec<usize> = serde_json::from_value(shape).unwrap();
        assert_eq!(t.shape(), shape.as_slice(), "{name}");
    }
    // Refuses to overwrite the checkpoint it reads.
    let mut names: Vec<_> = std::fs::read_dir(d.join("ckpt"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("ckpt-"))
        .collect();
    names.sort();
    let p = names.pop().expect("a checkpoint").display().to_string();
    let o = run(&["export", "--checkpoint", &p, "--out", &p]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    CheckpointFile::read(std::path::Path::new(&p)).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}
