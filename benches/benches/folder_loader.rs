//! The image-folder input path (issue 25) on a folder of real-looking JPEG/PNG files, measured
//! as PyTorch's loader is by `benches/peers/folder_loader.py` on the same files:
//!
//! * `decode`: decoding alone (zune-jpeg / png to RGB), one thread, the first 400 files;
//! * `load`: [`load_folder`] on 1, 2 and all threads (every file decoded and resized once);
//! * `epoch`: one epoch of training batches (batch 64, random-resized crop + flip + normalise)
//!   from the loaded images, with 1, 2 and all pipeline workers;
//! * `first epoch` = load + epoch (what PyTorch's loader does every epoch: decode + augment);
//! * `streaming`: `--decode streaming`, where the workers decode every image of every batch
//!   (as PyTorch's loader does): the load (file list + statistics from a sample) and one epoch.
//!
//! `cargo run --release -p crossbow-data --example make_image_folder -- data/cifar10-4k /tmp/imgfolder`
//! `CROSSBOW_IMAGE_FOLDER=/tmp/imgfolder cargo bench -p crossbow-benches --bench folder_loader`
//!
//! Without `CROSSBOW_IMAGE_FOLDER` it says so and measures nothing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crossbow_data::{Augment, DecodeMode, FolderOptions, Pipeline, PipelineConfig, decode_image, load_folder};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn main() {
    let Some(dir) = std::env::var_os("CROSSBOW_IMAGE_FOLDER").map(PathBuf::from) else {
        println!("folder_loader: set CROSSBOW_IMAGE_FOLDER to a folder made by the make_image_folder example; skipped");
        return;
    };
    let mut all = Vec::new();
    files(&dir.join("train"), &mut all);
    let sample: Vec<Vec<u8>> = all.iter().take(400).filter_map(|p| std::fs::read(p).ok()).collect();
    let t = Instant::now();
    let mut pixels = 0usize;
    for b in &sample {
        match decode_image(b, u64::MAX) {
            Ok((w, h, _)) => pixels += w * h,
            Err(e) => panic!("decode: {e}"),
        }
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "decode         1 thread : {:7.1} images/s ({:.1} Mpixel/s, {} files, from memory)",
        sample.len() as f64 / secs,
        pixels as f64 / secs / 1e6,
        sample.len()
    );
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut counts = vec![1, 2, cores];
    counts.sort();
    counts.dedup();
    let opts = FolderOptions { decode: DecodeMode::Upfront, ..FolderOptions::default() };
    for &threads in &counts {
        let pool = match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        let t = Instant::now();
        let ((train, _), (test, _)) = match pool.install(|| load_folder(&dir, &opts, None, None)) {
            Ok(d) => d,
            Err(e) => panic!("{e}"),
        };
        let load_secs = t.elapsed().as_secs_f64();
        let n = train.len() + test.len();
        let train = Arc::new(train);
        let config = PipelineConfig {
            workers: threads,
            prefetch: 4 * threads,
            augment: Some(Augment::imagenet()),
            ..PipelineConfig::new(64, 7)
        };
        let mut p = match Pipeline::new(Arc::clone(&train), config) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        let batches = p.batches_per_epoch();
        let t = Instant::now();
        let mut images = 0;
        for _ in 0..batches {
            match p.next_batch() {
                Ok(b) => images += b.len(),
                Err(e) => panic!("{e}"),
            }
        }
        let epoch_secs = t.elapsed().as_secs_f64();
        println!(
            "threads {threads:2}: load (decode+resize to 224) {:7.1} images/s | epoch (crop+flip+normalise, b64) {:7.1} images/s | first epoch (load + epoch) {:7.1} images/s",
            n as f64 / load_secs,
            images as f64 / epoch_secs,
            train.len() as f64 / (load_secs * train.len() as f64 / n as f64 + epoch_secs)
        );
    }
    let opts = FolderOptions { decode: DecodeMode::Streaming, ..FolderOptions::default() };
    for &threads in &counts {
        let pool = match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        let t = Instant::now();
        let ((train, _), _) = match pool.install(|| load_folder(&dir, &opts, None, None)) {
            Ok(d) => d,
            Err(e) => panic!("{e}"),
        };
        let load_secs = t.elapsed().as_secs_f64();
        let config = PipelineConfig {
            workers: threads,
            prefetch: 4 * threads,
            augment: Some(Augment::imagenet()),
            ..PipelineConfig::new(64, 7)
        };
        let mut p = match Pipeline::new(Arc::new(train), config) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        let t = Instant::now();
        let mut images = 0;
        for _ in 0..p.batches_per_epoch() {
            match p.next_batch() {
                Ok(b) => images += b.len(),
                Err(e) => panic!("{e}"),
            }
        }
        println!(
            "streaming {threads:2}: load (file list + statistics) {load_secs:5.2} s | epoch (decode+resize+crop+flip+normalise, b64) {:7.1} images/s",
            images as f64 / t.elapsed().as_secs_f64()
        );
    }
}
