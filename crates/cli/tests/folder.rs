//! `--dataset folder` end to end: a tiny image folder (PNG files written from the built-in
//! digits) trains far beyond chance through the binary; folder settings are checked, bad
//! images are reported, and a resumed run on folder data is bit-identical to an uninterrupted
//! one, with images decoded up front or on the pipeline's workers (`--decode streaming`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use crossbow_data::{DatasetKind, LoadOptions, export_folder, load};

mod common;
use common::evaluations;

fn crossbow(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_crossbow")).args(args).output().expect("run crossbow");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("crossbow-folder-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `dir/train/<0..9>/*.png` and `dir/val/<0..9>/*.png` from a built-in dataset.
fn export_to_folder(kind: DatasetKind, dir: &Path, train: usize, test: usize) {
    let opts = LoadOptions { seed: 11, train_size: Some(train), test_size: Some(test), ..LoadOptions::default() };
    let (tr, te) = load(kind, ".", &opts).unwrap();
    assert_eq!(export_folder(&tr, &te, dir).unwrap(), train + test);
}

/// The built-in shapes as a folder whose classes are named `shape-0` .. `shape-9`.
fn shapes_folder(dir: &Path, train: usize, test: usize) {
    let opts = LoadOptions { seed: 11, train_size: Some(train), test_size: Some(test), ..LoadOptions::default() };
    let (tr, te) = load(DatasetKind::SyntheticShapes, ".", &opts).unwrap();
    let names: Vec<String> = (0..10).map(|c| format!("shape-{c}")).collect();
    let tr = tr.with_class_names(names.clone()).unwrap();
    let te = te.with_class_names(names).unwrap();
    assert_eq!(export_folder(&tr, &te, dir).unwrap(), train + test);
}

fn train_on(data: &Path, metrics: &Path, extra: &[&str]) -> (i32, String) {
    let mut args = vec![
        "train",
        "--dataset",
        "folder",
        "--data-dir",
        data.to_str().unwrap(),
        "--image-size",
        "28",
        "--model",
        "lenet5",
        "--devices",
        "cpu",
        "--threads",
        "2",
        "--learners-per-device",
        "2",
        "--batch-size",
        "32",
        "--metrics",
        metrics.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = crossbow(&args);
    (code, format!("{out}{err}"))
}

/// Exports the checkpoint `ck` to `model` and returns the exported file's metadata.
fn exported_metadata(ck: &Path, model: &Path) -> std::collections::HashMap<String, String> {
    let (code, out, err) =
        crossbow(&["export", "--checkpoint", ck.to_str().unwrap(), "--out", model.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let bytes = std::fs::read(model).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    header.metadata().clone().expect("an exported model carries metadata")
}

/// The normalisation `(mean, std)` an exported model's metadata records.
fn normalization(meta: &std::collections::HashMap<String, String>) -> (Vec<f32>, Vec<f32>) {
    let floats = |key: &str| -> Vec<f32> { serde_json::from_str(&meta[key]).unwrap() };
    (floats("crossbow.normalize.mean"), floats("crossbow.normalize.std"))
}

#[test]
fn a_small_model_learns_a_generated_image_folder() {
    let dir = temp_dir("learn");
    let data = dir.join("digits");
    export_to_folder(DatasetKind::SyntheticDigits, &data, 4000, 500);
    // A file that is not an image and a corrupt image: reported, not fatal.
    std::fs::write(data.join("train/3/README.txt"), "not an image").unwrap();
    std::fs::write(data.join("train/4/broken.png"), b"\x89PNG\r\n\x1a\nbroken").unwrap();
    // The default augmentation of folder data (random-resized crop + flip) is hard on 28x28
    // digits, yet the model learns far beyond chance (0.1).
    let m = dir.join("default.jsonl");
    let (code, all) = train_on(&data, &m, &["--lr", "0.05", "--epochs", "6", "--eval-every", "3"]);
    assert_eq!(code, 0, "{all}");
    assert!(all.contains("skipped 1 bad image") && all.contains("broken.png"), "{all}");
    assert!(all.contains("ignored 1 file"), "{all}");
    // And in the metrics file's start record.
    let start = std::fs::read_to_string(&m).unwrap();
    let start: serde_json::Value = serde_json::from_str(start.lines().next().unwrap()).unwrap();
    assert_eq!(start["event"], "start");
    let notes = start["data_notes"].to_string();
    assert!(notes.contains("skipped 1 bad image") && notes.contains("broken.png"), "{notes}");
    let acc = evaluations(&m).last().unwrap()["test_accuracy"].as_f64().unwrap();
    assert!(acc > 0.35, "test accuracy {acc} after 6 epochs with resized-crop-flip");
    // Without augmentation (as digits want), as the built-in digits.
    let m = dir.join("none.jsonl");
    let (code, all) = train_on(&data, &m, &["--augment", "none", "--lr", "0.05", "--epochs", "4", "--eval-every", "2"]);
    assert_eq!(code, 0, "{all}");
    let acc = evaluations(&m).last().unwrap()["test_accuracy"].as_f64().unwrap();
    assert!(acc > 0.7, "test accuracy {acc} after 4 epochs without augmentation");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_interrupted_folder_run_resumes_bit_identically() {
    let dir = temp_dir("resume");
    let data = dir.join("shapes");
    shapes_folder(&data, 1000, 200);
    let common = ["--epochs", "0.5", "--eval-every", "0.1", "-q"];
    let full = dir.join("full.jsonl");
    let ck_full = dir.join("ck-full");
    let mut args: Vec<&str> = common.to_vec();
    args.extend(["--checkpoint-dir", ck_full.to_str().unwrap()]);
    let (code, all) = train_on(&data, &full, &args);
    assert_eq!(code, 0, "{all}");
    let want = evaluations(&full);
    assert!(want.len() >= 4, "{want:?}");
    // Decoded on the pipeline's workers for every batch instead of once: the same run.
    let streamed = dir.join("streamed.jsonl");
    let mut args: Vec<&str> = common.to_vec();
    args.extend(["--decode", "streaming"]);
    let (code, all) = train_on(&data, &streamed, &args);
    assert_eq!(code, 0, "{all}");
    assert_eq!(evaluations(&streamed), want, "a streamed folder run differs from one decoded up front");
    let ck = dir.join("ck");
    for decode in ["upfront", "streaming"] {
        let part = dir.join(format!("part-{decode}.jsonl"));
        let _ = std::fs::remove_dir_all(&ck);
        let mut args: Vec<&str> = common.to_vec();
        args.extend(["--checkpoint-dir", ck.to_str().unwrap(), "--decode", decode]);
        let mut c = Command::new(env!("CARGO_BIN_EXE_crossbow"));
        c.args([
            "train",
            "--dataset",
            "folder",
            "--data-dir",
            data.to_str().unwrap(),
            "--model",
            "lenet5",
            "--image-size",
            "28",
        ]);
        c.args(["--devices", "cpu", "--threads", "2", "--learners-per-device", "2", "--batch-size", "32"]);
        c.args(["--metrics", part.to_str().unwrap()]).args(&args).env("CROSSBOW_TEST_INTERRUPT_AT_ITERATION", "3");
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(130), "{decode}: {}", String::from_utf8_lossy(&o.stderr));
        let (code, out, err) = crossbow(&["train", "--resume", ck.to_str().unwrap(), "-q"]);
        assert_eq!(code, 0, "{decode}: {out}{err}");
        assert_eq!(evaluations(&part), want, "a resumed folder run ({decode}) differs from an uninterrupted one");
    }
    // The class folder names travel with the checkpoint into the exported model.
    let meta = exported_metadata(&ck, &dir.join("model.safetensors"));
    let names: Vec<String> = serde_json::from_str(&meta["crossbow.class_names"]).unwrap();
    assert_eq!(names, (0..10).map(|c| format!("shape-{c}")).collect::<Vec<_>>());
    // Folder data is normalised with ImageNet's constants unless told otherwise, and the
    // normalisation defines the run: a resume may not change it.
    let (mean, std) = normalization(&meta);
    assert_eq!((&mean[..], &std[..]), (&crossbow_data::IMAGENET_MEAN[..], &crossbow_data::IMAGENET_STD[..]));
    let (code, _, err) = crossbow(&["train", "--resume", ck.to_str().unwrap(), "--normalize", "auto", "-q"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--normalize cannot change when resuming"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn folder_settings_are_checked() {
    let dir = temp_dir("settings");
    let data = dir.join("shapes");
    shapes_folder(&data, 40, 20);
    let d = data.to_str().unwrap();
    let base =
        ["train", "--dataset", "folder", "--data-dir", d, "--devices", "cpu", "--epochs", "0.1", "--model", "lenet5"];
    let run = |extra: &[&str]| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        crossbow(&args)
    };
    for (extra, needle) in [
        (&["--image-size", "4"][..], "--image-size must be in 8..=4096, got 4"),
        (&["--max-image-pixels", "0"][..], "--max-image-pixels must be at least 1"),
        (&["--on-bad-image", "maybe"][..], "`maybe` is not a bad-image policy"),
        (&["--decode", "lazy"][..], "`lazy` is not a decode mode"),
        (&["--image-size", "16", "--max-image-pixels", "100", "--on-bad-image", "fail"][..], "refused before decoding"),
    ] {
        let (code, out, err) = run(extra);
        assert_eq!(code, 2, "{extra:?}: {out}\n{err}");
        assert!(err.contains(needle), "{extra:?}: {err}");
    }
    // --normalize auto: the training images' own statistics, as the checkpoint and the
    // exported model record them; a given MEAN/STD, as given.
    let train_data = load(
        DatasetKind::Folder,
        &data,
        &LoadOptions {
            folder: crossbow_data::FolderOptions { image_size: 28, ..crossbow_data::FolderOptions::default() },
            ..LoadOptions::default()
        },
    )
    .unwrap()
    .0;
    for (choice, want_mean, want_std) in
        [("auto", train_data.mean().to_vec(), train_data.std().to_vec()), ("0.5/0.25", vec![0.5; 3], vec![0.25; 3])]
    {
        let ck = dir.join(format!("ck-{}", choice.replace('/', "-")));
        let (code, out, err) = run(&[
            "--image-size",
            "28",
            "--normalize",
            choice,
            "--batch-size",
            "8",
            "--checkpoint-dir",
            ck.to_str().unwrap(),
            "-q",
        ]);
        assert_eq!(code, 0, "{choice}: {out}{err}");
        let meta = exported_metadata(&ck, &ck.join("model.safetensors"));
        assert_eq!(normalization(&meta), (want_mean, want_std), "{choice}");
    }
    // --image-size is for folder data only.
    let (code, _, err) = crossbow(&["train", "--dataset", "synthetic-shapes", "--image-size", "64", "--epochs", "0.1"]);
    assert_eq!(code, 2);
    assert!(err.contains("--image-size applies to --dataset folder only"), "{err}");
    // A missing folder names what it looked for.
    let (code, _, err) =
        crossbow(&["train", "--dataset", "folder", "--data-dir", "/nonexistent/imgs", "--epochs", "0.1"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/imgs") && err.contains("no such directory"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_on_a_folder_says_whether_the_input_or_the_model_bounds_an_iteration() {
    let dir = temp_dir("bench");
    let data = dir.join("shapes");
    shapes_folder(&data, 64, 20);
    let json = dir.join("bench.json");
    let (code, out, err) = crossbow(&[
        "bench",
        "--folder",
        data.to_str().unwrap(),
        "--image-size",
        "24",
        "--model",
        "lenet5",
        "--batch-size",
        "8,16",
        "--learners",
        "1",
        "--iterations",
        "3",
        "--warmup",
        "1",
        "--devices",
        "cpu",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    // The folder's images and classes, and what loading them took.
    assert!(err.contains("64 training images of 10 classes at 24x24") && err.contains("20 evaluation images"), "{err}");
    assert!(out.contains("| input images/s | bound |"), "{out}");
    let body: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = body["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        let (model, input) = (row["images_per_sec"].as_f64().unwrap(), row["input_images_per_sec"].as_f64().unwrap());
        assert!(model > 0.0 && input > 0.0, "{row}");
        let want = if input < model { "input" } else { "model" };
        assert_eq!(row["bound"], want, "{row}");
    }
    // Without --folder the rows carry no input figures.
    let plain = dir.join("plain.json");
    let (code, _, err) = crossbow(&[
        "bench",
        "--model",
        "lenet5",
        "--batch-size",
        "8",
        "--iterations",
        "1",
        "--warmup",
        "0",
        "--devices",
        "cpu",
        "--json",
        plain.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let body: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&plain).unwrap()).unwrap();
    assert!(body["rows"][0].get("bound").is_none(), "{body}");
    // Bad input: exit 2, one line naming the flag or the path.
    let missing = dir.join("nowhere");
    for (args, needle) in [
        (vec!["bench", "--image-size", "32"], "--folder".to_string()),
        (vec!["bench", "--workers", "2"], "--folder".to_string()),
        (vec!["bench", "--folder", missing.to_str().unwrap()], missing.display().to_string()),
        (vec!["bench", "--folder", data.to_str().unwrap(), "--workers", "0"], "--workers".to_string()),
        (vec!["bench", "--folder", data.to_str().unwrap(), "--image-size", "3"], "--image-size 3".to_string()),
        (
            vec![
                "bench",
                "--folder",
                data.to_str().unwrap(),
                "--image-size",
                "24",
                "--model",
                "lenet5",
                "--batch-size",
                "65",
            ],
            "--batch-size 65".to_string(),
        ),
    ] {
        let (code, _, err) = crossbow(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(&needle) && !err.contains("panicked"), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
