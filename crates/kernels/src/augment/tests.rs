use proptest::prelude::*;

use super::*;
use crate::testing::random_vec;
use crate::{Backend, CpuBackend, View, ViewMut};

/// The definition, literally: build the zero-padded image, crop it, mirror the crop.
fn naive(g: &CropFlipGeom, x: &[f32], items: &[CropFlip]) -> Vec<f32> {
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

fn run(g: &CropFlipGeom, x: &[f32], params: &[f32]) -> crate::Result<Vec<f32>> {
    let be = CpuBackend::new(0);
    let mut y = vec![f32::NAN; g.len()];
    be.crop_flip(g, View::whole(&x.to_vec()), View::whole(&params.to_vec()), ViewMut::whole(&mut y))?;
    Ok(y)
}

fn items_strategy(batch: usize, pad: usize) -> impl Strategy<Value = Vec<CropFlip>> {
    proptest::collection::vec(
        (0..=2 * pad, 0..=2 * pad, any::<bool>()).prop_map(|(dy, dx, flip)| CropFlip { dy, dx, flip }),
        batch,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn matches_the_naive_definition(
        (g, items) in (1usize..5, 1usize..4, 1usize..12, 1usize..12, 0usize..6)
            .prop_flat_map(|(n, c, h, w, pad)| {
                let g = CropFlipGeom { batch: n, channels: c, height: h, width: w, pad };
                (Just(g), items_strategy(n, pad))
            }),
        seed in any::<u64>(),
    ) {
        let x = random_vec(seed, g.len(), 1.0);
        let y = run(&g, &x, &CropFlip::pack(&items)).unwrap();
        prop_assert_eq!(y, naive(&g, &x, &items));
    }
}

#[test]
fn identity_and_double_flip() {
    let g = CropFlipGeom { batch: 2, channels: 3, height: 5, width: 7, pad: 2 };
    let x = random_vec(3, g.len(), 1.0);
    let id = CropFlip::pack(&[CropFlip::identity(2); 2]);
    assert_eq!(run(&g, &x, &id).unwrap(), x);
    let flip = CropFlip::pack(&[CropFlip { dy: 2, dx: 2, flip: true }; 2]);
    let once = run(&g, &x, &flip).unwrap();
    assert_ne!(once, x);
    assert_eq!(run(&g, &once, &flip).unwrap(), x);
}

#[test]
fn cifar_shift_moves_pixels_and_fills_zeros() {
    let g = CropFlipGeom::cifar(1);
    let x: Vec<f32> = (0..g.len()).map(|i| i as f32 + 1.0).collect();
    // dy = 0: the crop starts 4 rows above the image: rows 0..4 are zero, row 4 is row 0.
    let y = run(&g, &x, &CropFlip::pack(&[CropFlip { dy: 0, dx: 4, flip: false }])).unwrap();
    assert!(y[..4 * 32].iter().all(|&v| v == 0.0));
    assert_eq!(&y[4 * 32..5 * 32], &x[..32]);
}

#[test]
fn invalid_parameters_and_lengths_are_errors() {
    let g = CropFlipGeom { batch: 1, channels: 1, height: 4, width: 4, pad: 1 };
    let x = vec![1.0; 16];
    for bad in [[3.0, 0.0, 0.0], [0.5, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, 0.5], [f32::NAN, 0.0, 0.0]] {
        let err = run(&g, &x, &bad).unwrap_err().to_string();
        assert!(err.contains("crop_flip"), "{err}");
    }
    let be = CpuBackend::new(0);
    let mut y = vec![0.0; 15];
    let e = be.crop_flip(&g, View::whole(&x), View::whole(&vec![1.0, 1.0, 0.0]), ViewMut::whole(&mut y)).unwrap_err();
    assert!(matches!(e, crate::KernelError::Length { arg: "output", .. }), "{e}");
    let zero = CropFlipGeom { batch: 0, ..g };
    assert!(zero.validate().is_err());
}

/// The trait's default (host round trip) gives the same result as the CPU override.
#[test]
fn default_implementation_matches() {
    struct Plain(CpuBackend);
    let g = CropFlipGeom { batch: 3, channels: 2, height: 6, width: 5, pad: 2 };
    let x = random_vec(9, g.len(), 1.0);
    let items = [CropFlip { dy: 0, dx: 3, flip: true }, CropFlip { dy: 4, dx: 1, flip: false }, CropFlip::identity(2)];
    let params = CropFlip::pack(&items);
    let mut y = vec![0.0; g.len()];
    let be = Plain(CpuBackend::new(0));
    crate::backend::default_crop_flip(&be.0, &g, View::whole(&x), View::whole(&params), ViewMut::whole(&mut y))
        .unwrap();
    assert_eq!(y, naive(&g, &x, &items));
}
