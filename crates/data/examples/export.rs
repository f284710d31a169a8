//! Writes a dataset (typically a synthetic one) in its standard file format, so another framework
//! (PyTorch, ...) can train on exactly the same images.
//!
//! `cargo run --release -p crossbow-data --example export -- synthetic-shapes out/shapes [seed] [train] [test]`
//!
//! `synthetic-digits` is written as MNIST IDX, `synthetic-shapes` as CIFAR-10 binary; with
//! `--folder` (anywhere), either is written as an image folder of PNG files
//! (`out/train/<class>/*.png`, `out/val/<class>/*.png`) for `--dataset folder` or torchvision's
//! `ImageFolder`.

use std::time::Instant;

use crossbow_data::{DatasetKind, LoadOptions, export, export_folder, load};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let as_folder = all.iter().any(|a| a == "--folder");
    let args: Vec<String> = all.into_iter().filter(|a| a != "--folder").collect();
    if args.len() < 2 {
        return Err("usage: export <dataset> <out-dir> [seed] [train-size] [test-size] [--folder]".into());
    }
    let kind: DatasetKind = args[0].parse()?;
    let number = |i: usize| -> Result<Option<u64>, Box<dyn std::error::Error>> {
        Ok(match args.get(i) {
            Some(s) => Some(s.parse()?),
            None => None,
        })
    };
    let opts = LoadOptions {
        seed: number(2)?.unwrap_or(0),
        train_size: number(3)?.map(|n| n as usize),
        test_size: number(4)?.map(|n| n as usize),
        ..LoadOptions::default()
    };
    let t = Instant::now();
    let (train, test) = load(kind, ".", &opts)?;
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "{kind}: {} train + {} test images in {secs:.2} s ({:.0} images/s)",
        train.len(),
        test.len(),
        (train.len() + test.len()) as f64 / secs
    );
    eprintln!("mean {:?} std {:?}", train.mean(), train.std());
    if as_folder {
        let n = export_folder(&train, &test, std::path::Path::new(&args[1]))?;
        println!("{n} PNG files under {}", args[1]);
        return Ok(());
    }
    let written = export(&train, &test, &args[1])?;
    for p in written {
        println!("{}", p.display());
    }
    Ok(())
}
