//! Crop-and-flip on every backend: the naive definition, identities, shifts, agreement with
//! the CPU (bit for bit: copies and zeros only), argument errors.

// Test bodies run by `test_backends!` (not `cfg(test)`): a failed call must panic the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::*;
use crate::prelude::*;
use crate::testing::{download, nan_buffer, random_vec, upload};

/// The definition, literally: build the zero-padded image, crop it, mirror the crop.
pub fn naive(g: &CropFlipGeom, x: &[f32], items: &[CropFlip]) -> Vec<f32> {
    let (h, w, p) = (g.height, g.width, g.pad);
    let (ph, pw) = (h + 2 * p, w + 2 * p);
    let mut out = Vec::with_capacity(g.len());
    for (n, it) in items.iter().enumerate() {
        for c in 0..g.channels {
            let img = &x[(n * g.channels + c) * h * w..][..h * w];
            let mut padded = vec![0.0f32; ph * pw];
            for i in 0..h {
                for j in 0..w {
                    padded[(i + p) * pw + j + p] = img[i * w + j];
                }
            }
            let mut crop = vec![0.0f32; h * w];
            for i in 0..h {
                for j in 0..w {
                    crop[i * w + j] = padded[(i + it.dy) * pw + j + it.dx];
                }
            }
            if it.flip {
                for row in crop.chunks_mut(w) {
                    row.reverse();
                }
            }
            out.extend_from_slice(&crop);
        }
    }
    out
}

fn run<B: Backend>(be: &B, g: &CropFlipGeom, x: &[f32], params: &[f32]) -> crate::Result<Vec<f32>> {
    let mut y = nan_buffer(be, g.len());
    be.crop_flip(g, View::whole(&upload(be, x)), View::whole(&upload(be, params)), ViewMut::whole(&mut y))?;
    Ok(download(be, &y))
}

fn items_strategy(batch: usize, pad: usize) -> impl Strategy<Value = Vec<CropFlip>> {
    proptest::collection::vec(
        (0..=2 * pad, 0..=2 * pad, any::<bool>()).prop_map(|(dy, dx, flip)| CropFlip { dy, dx, flip }),
        batch,
    )
}

fn geom_and_items(
    n: std::ops::Range<usize>,
    c: std::ops::Range<usize>,
    hw: std::ops::Range<usize>,
    pad: std::ops::Range<usize>,
) -> impl Strategy<Value = (CropFlipGeom, Vec<CropFlip>)> {
    (n, c, hw.clone(), hw, pad).prop_flat_map(|(n, c, h, w, pad)| {
        let g = CropFlipGeom { batch: n, channels: c, height: h, width: w, pad };
        (Just(g), items_strategy(n, pad))
    })
}

/// Random geometries and crops/flips: equal, bit for bit, to the naive per-pixel definition.
pub fn matches_the_naive_definition<B: Backend>(be: &B) {
    let cfg = ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() };
    proptest!(cfg, |((g, items) in geom_and_items(1..5, 1..4, 1..12, 0..6), seed in any::<u64>())| {
        let x = random_vec(seed, g.len(), 1.0);
        let y = run(be, &g, &x, &CropFlip::pack(&items)).unwrap();
        prop_assert_eq!(y, naive(&g, &x, &items));
    });
}

/// The centred crop without flip returns the input; flipping twice restores it.
pub fn identity_and_double_flip<B: Backend>(be: &B) {
    let g = CropFlipGeom { batch: 2, channels: 3, height: 5, width: 7, pad: 2 };
    let x = random_vec(3, g.len(), 1.0);
    let id = CropFlip::pack(&[CropFlip::identity(2); 2]);
    assert_eq!(run(be, &g, &x, &id).unwrap(), x);
    let flip = CropFlip::pack(&[CropFlip { dy: 2, dx: 2, flip: true }; 2]);
    let once = run(be, &g, &x, &flip).unwrap();
    assert_ne!(once, x);
    assert_eq!(run(be, &g, &once, &flip).unwrap(), x);
}

/// On a CIFAR image, a crop 4 rows up moves row 0 to row 4 and fills rows 0..4 with zeros.
pub fn cifar_shift_moves_pixels_and_fills_zeros<B: Backend>(be: &B) {
    let g = CropFlipGeom::cifar(1);
    let x: Vec<f32> = (0..g.len()).map(|i| i as f32 + 1.0).collect();
    // dy = 0: the crop starts 4 rows above the image: rows 0..4 are zero, row 4 is row 0.
    let y = run(be, &g, &x, &CropFlip::pack(&[CropFlip { dy: 0, dx: 4, flip: false }])).unwrap();
    assert!(y[..4 * 32].iter().all(|&v| v == 0.0));
    assert_eq!(&y[4 * 32..5 * 32], &x[..32]);
}

/// Up to 8 images of 3 × 19 × 19 with padding up to 4: identical to the CPU (copies and
/// zeros only).
pub fn crop_flip_matches_cpu<B: Backend>(be: &B) {
    let cpu = CpuBackend::new(0);
    proptest!(ProptestConfig::with_cases(24), |((g, items) in geom_and_items(1..9, 1..4, 1..20, 0..5), seed in any::<u64>())| {
        let x = random_vec(seed, g.len(), 1.0);
        let params = CropFlip::pack(&items);
        prop_assert_eq!(run(be, &g, &x, &params).unwrap(), run(&cpu, &g, &x, &params).unwrap(), "{:?} {:?}", g, items);
    });
}

/// Wrong lengths and geometries are the same errors on every backend.
pub fn bad_lengths_are_errors<B: Backend>(be: &B) {
    let g = CropFlipGeom { batch: 1, channels: 1, height: 4, width: 4, pad: 1 };
    let x = upload(be, &[1.0; 16]);
    let mut y = nan_buffer(be, 15);
    let e = be
        .crop_flip(&g, View::whole(&x), View::whole(&upload(be, &[1.0, 1.0, 0.0])), ViewMut::whole(&mut y))
        .unwrap_err();
    assert!(matches!(e, crate::KernelError::Length { arg: "output", .. }), "{e}");
    let zero = CropFlipGeom { batch: 0, ..g };
    assert!(zero.validate().is_err());
}

/// [`crop_flip_via_host`] (for backends without a device kernel) gives the backend's own
/// result.
pub fn via_host_matches<B: Backend>(be: &B) {
    let g = CropFlipGeom { batch: 3, channels: 2, height: 6, width: 5, pad: 2 };
    let x = random_vec(9, g.len(), 1.0);
    let items = [CropFlip { dy: 0, dx: 3, flip: true }, CropFlip { dy: 4, dx: 1, flip: false }, CropFlip::identity(2)];
    let params = CropFlip::pack(&items);
    let mut y = nan_buffer(be, g.len());
    crop_flip_via_host(be, &g, View::whole(&upload(be, &x)), View::whole(&upload(be, &params)), ViewMut::whole(&mut y))
        .unwrap();
    assert_eq!(download(be, &y), naive(&g, &x, &items));
}

crate::test_backends! {
    matches_the_naive_definition,
    identity_and_double_flip,
    cifar_shift_moves_pixels_and_fills_zeros,
    crop_flip_matches_cpu: [cpu_threads, emu, cuda],
    bad_lengths_are_errors,
    via_host_matches,
}

/// The CPU validates the parameters (a GPU turns such an image into NaNs instead).
#[test]
fn invalid_parameters_are_errors_on_the_cpu() {
    let be = CpuBackend::new(0);
    let g = CropFlipGeom { batch: 1, channels: 1, height: 4, width: 4, pad: 1 };
    let x = vec![1.0; 16];
    for bad in [[3.0, 0.0, 0.0], [0.5, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, 0.5], [f32::NAN, 0.0, 0.0]] {
        let err = run(&be, &g, &x, &bad).unwrap_err().to_string();
        assert!(err.contains("crop_flip"), "{err}");
    }
}
