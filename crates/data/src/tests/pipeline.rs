use std::collections::HashSet;
use std::sync::Arc;

use crate::transform::{Placement, Transform};
use crate::{
    Augment, Batch, Cursor, DataError, Dataset, EvalBatches, Normalize, PadFill, Pipeline, PipelineConfig, Share, Split,
};

/// A small 3x8x8 dataset with distinct, recognisable images (pixel values encode the index).
fn dataset(n: usize) -> Arc<Dataset> {
    let len = 3 * 8 * 8;
    let pixels: Vec<u8> = (0..n * len).map(|i| ((i / len) * 13 + (i % len) * 7) as u8).collect();
    let labels = (0..n as u32).map(|i| i % 7).collect();
    Arc::new(Dataset::new("toy", Split::Train, [3, 8, 8], 7, pixels, labels).unwrap())
}

fn config(batch: usize, workers: usize, prefetch: usize) -> PipelineConfig {
    PipelineConfig {
        workers,
        prefetch,
        augment: Some(Augment { pad: 2, flip: true, fill: PadFill::Zero, resized_crop: false }),
        ..PipelineConfig::new(batch, 11)
    }
}

/// A batch as owned data: cursor, sample indices, labels, images.
type Owned = (Cursor, Vec<u32>, Vec<f32>, Vec<f32>);

/// The first `count` batches as owned data.
fn take(p: &mut Pipeline, count: usize) -> Vec<Owned> {
    (0..count)
        .map(|_| {
            let b = p.next_batch().unwrap();
            (b.cursor(), b.sample_indices().to_vec(), b.labels().to_vec(), b.images().to_vec())
        })
        .collect()
}

#[test]
fn same_seed_same_stream_different_seed_different() {
    let ds = dataset(50);
    let a = take(&mut Pipeline::new(ds.clone(), config(8, 2, 4)).unwrap(), 20);
    let b = take(&mut Pipeline::new(ds.clone(), config(8, 2, 4)).unwrap(), 20);
    assert_eq!(a, b);
    let other = PipelineConfig { seed: 12, ..config(8, 2, 4) };
    let c = take(&mut Pipeline::new(ds, other).unwrap(), 20);
    assert_ne!(a[0].1, c[0].1, "different seeds shuffle differently");
}

#[test]
fn worker_count_and_prefetch_do_not_change_the_stream() {
    let ds = dataset(61);
    let reference = take(&mut Pipeline::new(ds.clone(), config(5, 1, 1)).unwrap(), 40);
    for (workers, prefetch) in [(2, 2), (3, 7), (4, 32)] {
        let got = take(&mut Pipeline::new(ds.clone(), config(5, workers, prefetch)).unwrap(), 40);
        assert_eq!(got, reference, "workers {workers} prefetch {prefetch}");
    }
}

#[test]
fn resume_from_cursor_gives_the_same_stream() {
    let ds = dataset(37);
    let mut p = Pipeline::new(ds.clone(), config(4, 2, 3)).unwrap();
    assert_eq!(p.batches_per_epoch(), 9);
    let all = take(&mut p, 30);
    for k in [0usize, 1, 8, 9, 17, 29] {
        let mut p = Pipeline::new(ds.clone(), config(4, 2, 3)).unwrap();
        take(&mut p, k);
        let cursor = p.cursor();
        assert_eq!(cursor, all[k].0);
        let json = serde_json::to_string(&cursor).unwrap();
        let cursor: Cursor = serde_json::from_str(&json).unwrap();
        let resumed = PipelineConfig { start: cursor, ..config(4, 3, 5) };
        let mut q = Pipeline::new(ds.clone(), resumed).unwrap();
        assert_eq!(q.cursor(), cursor);
        assert_eq!(take(&mut q, 30 - k), all[k..], "resumed at {k}");
    }
}

#[test]
fn every_sample_once_per_epoch() {
    let ds = dataset(23);
    // Keep the last partial batch: every sample exactly once.
    let keep = PipelineConfig { drop_last: false, ..config(5, 2, 4) };
    let mut p = Pipeline::new(ds.clone(), keep).unwrap();
    assert_eq!(p.batches_per_epoch(), 5);
    let mut orders = Vec::new();
    for epoch in 0..3u64 {
        let mut seen = Vec::new();
        for i in 0..5u64 {
            let b = p.next_batch().unwrap();
            assert_eq!((b.epoch(), b.index()), (epoch, i));
            assert_eq!(b.len(), if i == 4 { 3 } else { 5 });
            assert_eq!(b.images().len(), b.len() * 192);
            assert_eq!(b.shape().dims(), &[b.len(), 3, 8, 8]);
            for (&s, &l) in b.sample_indices().iter().zip(b.labels()) {
                assert_eq!(l, ds.label(s as usize).unwrap() as f32);
            }
            seen.extend_from_slice(b.sample_indices());
        }
        orders.push(seen.clone());
        seen.sort_unstable();
        assert_eq!(seen, (0..23).collect::<Vec<u32>>(), "epoch {epoch}");
    }
    assert_ne!(orders[0], orders[1], "each epoch has its own order");
    // Drop the last partial batch: 4 full batches, no sample twice.
    let mut p = Pipeline::new(ds, config(5, 2, 4)).unwrap();
    assert_eq!(p.batches_per_epoch(), 4);
    for epoch in 0..3u64 {
        let mut seen = HashSet::new();
        for _ in 0..4 {
            let b = p.next_batch().unwrap();
            assert_eq!((b.epoch(), b.len()), (epoch, 5));
            for &s in b.sample_indices() {
                assert!(seen.insert(s), "sample {s} twice in epoch {epoch}");
            }
        }
        assert_eq!(seen.len(), 20);
    }
}

/// Every pipeline image is a padded crop (a translation by at most `pad`, zero filled) of its
/// source image, possibly mirrored, normalised; without augmentation it is the source exactly.
#[test]
fn batches_hold_augmented_normalised_sources() {
    let ds = dataset(16);
    let norm = Normalize::new(vec![0.4, 0.5, 0.6], vec![0.2, 0.25, 0.3]).unwrap();
    let aug = Augment { pad: 2, flip: true, fill: PadFill::Zero, resized_crop: false };
    let t = Transform::new([3, 8, 8], aug, &norm).unwrap();
    let cfg = PipelineConfig { normalize: Some(norm.clone()), ..config(4, 2, 2) };
    let mut p = Pipeline::new(ds.clone(), cfg).unwrap();
    let mut flips = 0;
    let mut shifted = 0;
    for _ in 0..12 {
        let b = p.next_batch().unwrap();
        for (j, &s) in b.sample_indices().iter().enumerate() {
            let src = ds.image(s as usize).unwrap();
            let got = &b.images()[j * 192..(j + 1) * 192];
            let mut matches = Vec::new();
            for dx in -2..=2 {
                for dy in -2..=2 {
                    for flip in [false, true] {
                        let mut want = vec![0.0; 192];
                        t.apply(src, &mut want, Placement { dx, dy, flip, window: None });
                        if want == got {
                            matches.push((dx, dy, flip));
                        }
                    }
                }
            }
            assert_eq!(matches.len(), 1, "sample {s}: {matches:?}");
            let (dx, dy, flip) = matches[0];
            flips += flip as usize;
            shifted += (dx != 0 || dy != 0) as usize;
        }
    }
    assert!(flips > 8 && flips < 40, "{flips} of 48 flipped");
    assert!(shifted > 30, "{shifted} of 48 shifted");

    let plain = PipelineConfig { augment: Some(Augment::none()), normalize: Some(norm.clone()), ..config(4, 1, 2) };
    let b = Pipeline::new(ds.clone(), plain).unwrap().next_batch().unwrap();
    for (j, &s) in b.sample_indices().iter().enumerate() {
        let src = ds.image(s as usize).unwrap();
        for (k, &v) in b.images()[j * 192..(j + 1) * 192].iter().enumerate() {
            assert_eq!(v, norm.apply(k / 64, src[k]).unwrap());
        }
    }
}

#[test]
fn default_normalisation_gives_zero_mean_unit_std() {
    let ds = dataset(40);
    let cfg = PipelineConfig { augment: Some(Augment::none()), drop_last: false, ..config(8, 2, 2) };
    let mut p = Pipeline::new(ds.clone(), cfg).unwrap();
    assert_eq!(p.normalize().mean(), ds.mean());
    let mut sums = [(0.0f64, 0.0f64, 0usize); 3];
    for _ in 0..p.batches_per_epoch() {
        let b = p.next_batch().unwrap();
        for image in b.images().chunks_exact(192) {
            for (c, plane) in image.chunks_exact(64).enumerate() {
                for &v in plane {
                    sums[c].0 += v as f64;
                    sums[c].1 += (v as f64).powi(2);
                    sums[c].2 += 1;
                }
            }
        }
    }
    for (s, s2, n) in sums {
        let mean = s / n as f64;
        let var = s2 / n as f64 - mean * mean;
        assert!(mean.abs() < 1e-4, "{mean}");
        assert!((var.sqrt() - 1.0).abs() < 1e-3, "{var}");
    }
}

#[test]
fn invalid_configurations_are_errors() {
    let ds = dataset(10);
    let bad = [
        config(0, 1, 1),
        config(11, 1, 1),
        config(4, 0, 1),
        config(4, 1, 0),
        PipelineConfig { start: Cursor { epoch: 0, batch: 2 }, ..config(4, 1, 1) },
        PipelineConfig { start: Cursor { epoch: u64::MAX, batch: 1 }, ..config(4, 1, 1) },
        PipelineConfig { normalize: Some(Normalize::unit(1)), ..config(4, 1, 1) },
        PipelineConfig { augment: Some(Augment { pad: 9, ..Augment::cifar() }), ..config(4, 1, 1) },
    ];
    for cfg in bad {
        let e = Pipeline::new(ds.clone(), cfg.clone()).err();
        assert!(matches!(e, Some(DataError::InvalidConfig(_))), "{cfg:?}: {e:?}");
    }
    let e = Pipeline::new(ds.clone(), config(11, 1, 1)).err().unwrap();
    assert!(e.to_string().contains("batch size 11 is larger"), "{e}");
    assert!(EvalBatches::new(&ds, 0, &Normalize::unit(3)).is_err());
    assert!(EvalBatches::new(&ds, 4, &Normalize::unit(1)).is_err());
    // The whole dataset as one batch is fine.
    assert_eq!(Pipeline::new(ds, config(10, 1, 1)).unwrap().next_batch().unwrap().len(), 10);
}

#[test]
fn buffers_are_recycled() {
    let ds = dataset(64);
    let mut p = Pipeline::new(ds, config(4, 2, 3)).unwrap();
    let mut addresses = HashSet::new();
    for _ in 0..200 {
        let b = p.next_batch().unwrap();
        addresses.insert(b.images().as_ptr() as usize);
    }
    // prefetch + one held by the consumer + one per worker at most.
    assert!(addresses.len() <= 6, "{} distinct buffers", addresses.len());
}

#[test]
fn holding_more_batches_than_prefetch_does_not_deadlock() {
    let ds = dataset(64);
    let mut p = Pipeline::new(ds, config(2, 2, 2)).unwrap();
    let held: Vec<Batch> = (0..40).map(|_| p.next_batch().unwrap()).collect();
    let indices: Vec<u64> = held.iter().map(|b| b.index()).collect();
    assert_eq!(indices, (0..32).chain(0..8).collect::<Vec<u64>>());
    drop(p); // batches outlive their pipeline
    assert_eq!(held[39].len(), 2);
}

#[test]
fn dropping_the_pipeline_stops_its_workers() {
    let ds = dataset(64);
    for workers in [1, 4] {
        // Never consumed: workers are waiting for tickets.
        drop(Pipeline::new(ds.clone(), config(4, workers, 8)).unwrap());
        // Consumed a little, with a batch still held.
        let mut p = Pipeline::new(ds.clone(), config(4, workers, 2)).unwrap();
        let b = p.next_batch().unwrap();
        drop(p);
        drop(b);
    }
    let p = Pipeline::new(ds, config(4, 2, 2)).unwrap();
    let batches: Vec<_> = p.take(5).collect::<Result<_, _>>().unwrap();
    assert_eq!(batches.len(), 5);
}

#[test]
fn eval_batches_in_order_unaugmented() {
    let ds = dataset(10);
    let norm = Normalize::new(vec![0.1, 0.2, 0.3], vec![0.5, 0.5, 0.5]).unwrap();
    let it = EvalBatches::new(&ds, 4, &norm).unwrap();
    assert_eq!(it.len(), 3);
    let batches: Vec<Batch> = it.collect();
    assert_eq!(batches.iter().map(|b| b.len()).collect::<Vec<_>>(), [4, 4, 2]);
    let mut next = 0;
    for (i, b) in batches.iter().enumerate() {
        assert_eq!(b.cursor(), Cursor { epoch: 0, batch: i as u64 });
        for (j, &s) in b.sample_indices().iter().enumerate() {
            assert_eq!(s, next);
            assert_eq!(b.labels()[j], ds.label(next as usize).unwrap() as f32);
            let src = ds.image(next as usize).unwrap();
            for (k, &v) in b.images()[j * 192..(j + 1) * 192].iter().enumerate() {
                assert_eq!(v, norm.apply(k / 64, src[k]).unwrap());
            }
            next += 1;
        }
    }
    let (images, labels) = batches[2].to_tensors().unwrap();
    assert_eq!(images.shape().dims(), &[2, 3, 8, 8]);
    assert_eq!(labels.shape().dims(), &[2]);
    // A batch larger than the dataset: one short batch. Buffers are reused when dropped.
    let mut it = EvalBatches::new(&ds, 64, &norm).unwrap();
    assert_eq!(it.next().map(|b| b.len()), Some(10));
    assert!(it.next().is_none());
    let mut it = EvalBatches::new(&ds, 2, &norm).unwrap();
    let first = it.next().unwrap().images().as_ptr() as usize;
    assert!(it.all(|b| b.images().as_ptr() as usize == first));
}

#[test]
fn public_types_can_cross_threads() {
    fn send<T: Send>() {}
    fn sync<T: Sync>() {}
    send::<Pipeline>();
    send::<Batch>();
    sync::<Batch>();
    send::<Dataset>();
    sync::<Dataset>();
    send::<DataError>();
    sync::<DataError>();
}

/// A pipeline with a share of the stream (one rank's learners of every iteration) yields bit
/// for bit the batches of the whole stream at those positions, across epoch boundaries and
/// from a start cursor; its cursor is the start of the period of the next batch (an iteration
/// boundary, resumable); a bad share is refused.
#[test]
fn a_share_of_the_stream_is_the_stream_at_those_positions() {
    let ds = dataset(37);
    let all = take(&mut Pipeline::new(ds.clone(), config(4, 2, 3)).unwrap(), 60);
    for (period, from, to) in [(5u64, 1u64, 3u64), (5, 0, 2), (5, 4, 5), (3, 0, 3), (7, 2, 6)] {
        for start in [0usize, 7] {
            let share = Share { period, from, to };
            let cfg = PipelineConfig { start: all[start].0, share: Some(share), ..config(4, 3, 4) };
            let mut p = Pipeline::new(ds.clone(), cfg).unwrap();
            let width = (to - from) as usize;
            let periods = (60 - start) / period as usize;
            for i in 0..periods {
                assert_eq!(p.cursor(), all[start + i * period as usize].0, "{share:?} period {i}");
                let got = take(&mut p, width);
                let at = start + i * period as usize + from as usize;
                assert_eq!(got, all[at..at + width], "{share:?} from {start}, period {i}");
            }
        }
    }
    for (period, from, to) in [(0, 0, 0), (4, 2, 2), (4, 3, 5)] {
        let cfg = PipelineConfig { share: Some(Share { period, from, to }), ..config(4, 1, 1) };
        let e = Pipeline::new(ds.clone(), cfg).unwrap_err().to_string();
        assert!(e.contains("share"), "{e}");
    }
}
