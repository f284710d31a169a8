//! Image-folder datasets: layouts, every PNG and JPEG flavour, resize semantics and hostile
//! folders (corrupt, truncated and bomb images, empty classes, links, odd names, many files).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::TempDir;
use crate::folder::{decode_rgb, resize_center_square};
use crate::{
    Augment, BadImagePolicy, Cursor, DataError, DatasetKind, DecodeMode, EvalBatches, FolderOptions, IMAGENET_MEAN,
    IMAGENET_STD, LoadOptions, Normalize, NormalizeChoice, Pipeline, PipelineConfig, Split, export_folder, load,
    load_folder,
};

/// A solid-colour RGB image of `w x h` with a little texture (so JPEG has something to code).
fn rgb_image(w: usize, h: usize, colour: [u8; 3]) -> Vec<u8> {
    let mut v = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            for (c, &base) in colour.iter().enumerate() {
                v.push(base.saturating_add((((x + 2 * y + c) % 5) as u8) * 2));
            }
        }
    }
    v
}

fn png_bytes(
    w: u32,
    h: u32,
    colour: png::ColorType,
    depth: png::BitDepth,
    data: &[u8],
    palette: Option<&[u8]>,
) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(colour);
        enc.set_depth(depth);
        if let Some(p) = palette {
            enc.set_palette(p.to_vec());
        }
        let mut writer = enc.write_header().unwrap();
        writer.write_image_data(data).unwrap();
    }
    out
}

fn jpeg_bytes(w: u16, h: u16, rgb: &[u8], progressive: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = jpeg_encoder::Encoder::new(&mut out, 92);
    enc.set_progressive(progressive);
    enc.encode(rgb, w, h, jpeg_encoder::ColorType::Rgb).unwrap();
    out
}

fn write(path: &Path, bytes: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, bytes).unwrap();
}

/// `root/{train,val}/{red,blue}/`: a few JPEGs and PNGs of random sizes per class.
fn two_class_folder(root: &Path, per_class: usize) {
    for split in ["train", "val"] {
        for (class, colour) in [("red", [200u8, 30, 30]), ("blue", [20u8, 40, 210])] {
            for i in 0..per_class {
                let (w, h) = (40 + 7 * i, 30 + 11 * (i % 4));
                let rgb = rgb_image(w, h, colour);
                let dir = root.join(split).join(class);
                if i % 2 == 0 {
                    write(&dir.join(format!("{i}.jpg")), &jpeg_bytes(w as u16, h as u16, &rgb, i % 4 == 0));
                } else {
                    let png = png_bytes(w as u32, h as u32, png::ColorType::Rgb, png::BitDepth::Eight, &rgb, None);
                    write(&dir.join(format!("{i}.PNG")), &png);
                }
            }
        }
    }
}

fn opts(size: usize) -> FolderOptions {
    FolderOptions { image_size: size, ..FolderOptions::default() }
}

fn mean_rgb(img: &[u8]) -> [f64; 3] {
    let plane = img.len() / 3;
    let mut m = [0.0; 3];
    for (c, v) in m.iter_mut().enumerate() {
        *v = img[c * plane..(c + 1) * plane].iter().map(|&p| p as f64).sum::<f64>() / plane as f64;
    }
    m
}

#[test]
fn loads_classes_in_sorted_order_with_their_images() {
    let dir = TempDir::new("folder-basic");
    two_class_folder(dir.path(), 6);
    let ((train, tr), (test, te)) = load_folder(dir.path(), &opts(16), None, None).unwrap();
    assert_eq!(train.class_names(), ["blue", "red"]);
    assert_eq!((train.len(), test.len(), train.num_classes()), (12, 12, 2));
    assert_eq!(train.image_shape(), [3, 16, 16]);
    assert_eq!(train.split(), Split::Train);
    assert_eq!(train.default_augment(), Augment::imagenet());
    assert_eq!((tr.bad_images, tr.ignored_files, te.bad_images), (0, 0, 0));
    assert!(tr.summary(Split::Train).is_none());
    // Sorted classes: blue = 0 comes first; the colours survive decoding and resizing.
    for i in 0..train.len() {
        let m = mean_rgb(train.image(i).unwrap());
        let label = train.label(i).unwrap();
        assert_eq!(label, if i < 6 { 0 } else { 1 });
        if label == 0 {
            assert!(m[2] > 180.0 && m[0] < 60.0, "blue image {i}: {m:?}");
        } else {
            assert!(m[0] > 170.0 && m[2] < 70.0, "red image {i}: {m:?}");
        }
    }
    // Through `load`, with sizes: a round-robin over the classes, kept in scan order.
    let lo = LoadOptions { train_size: Some(3), test_size: Some(5), folder: opts(16), ..LoadOptions::default() };
    let (train, test) = load(DatasetKind::Folder, dir.path(), &lo).unwrap();
    assert_eq!((train.len(), test.len()), (3, 5));
    assert_eq!(train.labels(), [0, 0, 1]);
    assert_eq!(test.labels(), [0, 0, 0, 1, 1]);
    let (full, _) =
        load(DatasetKind::Folder, dir.path(), &LoadOptions { folder: opts(16), ..LoadOptions::default() }).unwrap();
    // blue's first two files and red's first: images 0, 1 and 6 of the whole set.
    for (j, i) in [0, 1, 6].into_iter().enumerate() {
        assert_eq!(train.image(j), full.image(i));
    }
    assert!(train.notes().is_empty());
    let lo = LoadOptions { train_size: Some(13), folder: opts(16), ..LoadOptions::default() };
    let e = load(DatasetKind::Folder, dir.path(), &lo).unwrap_err().to_string();
    assert!(e.contains("asked for 13") && e.contains("holds 12"), "{e}");
}

#[test]
fn test_folder_is_accepted_instead_of_val() {
    let dir = TempDir::new("folder-test");
    two_class_folder(dir.path(), 2);
    fs::rename(dir.path().join("val"), dir.path().join("test")).unwrap();
    let ((_, _), (test, _)) = load_folder(dir.path(), &opts(8), None, None).unwrap();
    assert_eq!(test.len(), 4);
}

#[test]
fn every_png_flavour_decodes_to_rgb() {
    let (w, h) = (6u32, 4u32);
    let n = (w * h) as usize;
    // Grey 8-bit: replicated.
    let grey: Vec<u8> = (0..n).map(|i| (i * 10) as u8).collect();
    let (_, _, rgb) =
        decode_rgb(&png_bytes(w, h, png::ColorType::Grayscale, png::BitDepth::Eight, &grey, None), u64::MAX).unwrap();
    assert_eq!(rgb, grey.iter().flat_map(|&g| [g, g, g]).collect::<Vec<_>>());
    // RGBA: alpha dropped.
    let rgba: Vec<u8> = (0..n * 4).map(|i| (i * 3) as u8).collect();
    let (_, _, rgb) =
        decode_rgb(&png_bytes(w, h, png::ColorType::Rgba, png::BitDepth::Eight, &rgba, None), u64::MAX).unwrap();
    assert_eq!(rgb, rgba.chunks(4).flat_map(|p| [p[0], p[1], p[2]]).collect::<Vec<_>>());
    // 16-bit RGB (big endian): the high byte.
    let wide: Vec<u8> = (0..n * 3).flat_map(|i| [(i * 7) as u8, 0x55]).collect();
    let (_, _, rgb) =
        decode_rgb(&png_bytes(w, h, png::ColorType::Rgb, png::BitDepth::Sixteen, &wide, None), u64::MAX).unwrap();
    assert_eq!(rgb, (0..n * 3).map(|i| (i * 7) as u8).collect::<Vec<_>>());
    // Grey + alpha: the grey.
    let ga: Vec<u8> = (0..n).flat_map(|i| [(i * 9) as u8, 7]).collect();
    let (_, _, rgb) =
        decode_rgb(&png_bytes(w, h, png::ColorType::GrayscaleAlpha, png::BitDepth::Eight, &ga, None), u64::MAX)
            .unwrap();
    assert_eq!(rgb, (0..n).flat_map(|i| [(i * 9) as u8; 3]).collect::<Vec<_>>());
    // 1-bit grey (rows padded to whole bytes): 0 and 255.
    let bits: Vec<u8> = (0..h).map(|_| 0b1010_0000).collect();
    let (_, _, rgb) =
        decode_rgb(&png_bytes(w, h, png::ColorType::Grayscale, png::BitDepth::One, &bits, None), u64::MAX).unwrap();
    let row: Vec<u8> = [255u8, 0, 255, 0, 0, 0].iter().flat_map(|&g| [g, g, g]).collect();
    assert_eq!(rgb, row.repeat(h as usize));
    // 4-bit palette.
    let palette4 = [1u8, 2, 3, 250, 251, 252];
    let nibbles: Vec<u8> = (0..h).flat_map(|_| [0x01u8, 0x10, 0x00]).collect();
    let (_, _, rgb) =
        decode_rgb(&png_bytes(w, h, png::ColorType::Indexed, png::BitDepth::Four, &nibbles, Some(&palette4)), u64::MAX)
            .unwrap();
    let row: Vec<u8> = [0usize, 1, 1, 0, 0, 0].iter().flat_map(|&i| palette4[i * 3..i * 3 + 3].to_vec()).collect();
    assert_eq!(rgb, row.repeat(h as usize));
    // Palette: looked up.
    let palette = [10u8, 20, 30, 200, 100, 50];
    let idx: Vec<u8> = (0..n).map(|i| (i % 2) as u8).collect();
    let (_, _, rgb) =
        decode_rgb(&png_bytes(w, h, png::ColorType::Indexed, png::BitDepth::Eight, &idx, Some(&palette)), u64::MAX)
            .unwrap();
    let want: Vec<u8> = idx.iter().flat_map(|&i| palette[i as usize * 3..i as usize * 3 + 3].to_vec()).collect();
    assert_eq!(rgb, want);
}

#[test]
fn baseline_and_progressive_jpeg_decode_close_to_the_source() {
    let (w, h) = (33usize, 17usize);
    let rgb = rgb_image(w, h, [120, 60, 200]);
    for progressive in [false, true] {
        let (dw, dh, got) = decode_rgb(&jpeg_bytes(w as u16, h as u16, &rgb, progressive), u64::MAX).unwrap();
        assert_eq!((dw, dh), (w, h));
        let err = got.iter().zip(&rgb).map(|(&a, &b)| (a as i32 - b as i32).abs()).max().unwrap();
        assert!(err <= 12, "progressive={progressive}: max error {err}");
    }
}

#[test]
fn resize_is_short_side_then_centre_crop() {
    // 64x32 with a distinct value per column: at side 32 the result is columns 16..48, exactly.
    let (w, h) = (64usize, 32usize);
    let rgb: Vec<u8> = (0..w * h).flat_map(|i| [(i % w) as u8 * 3, (i / w) as u8, 9]).collect();
    let chw = resize_center_square(w, h, rgb.clone(), 32).unwrap();
    for y in 0..32 {
        for x in 0..32 {
            assert_eq!(chw[y * 32 + x], ((x + 16) * 3) as u8, "r at {x},{y}");
            assert_eq!(chw[1024 + y * 32 + x], y as u8, "g at {x},{y}");
            assert_eq!(chw[2048 + y * 32 + x], 9);
        }
    }
    // Halving a constant image keeps it constant (antialiased filter, no ringing on flat input).
    let flat = vec![77u8; 40 * 80 * 3];
    assert!(resize_center_square(40, 80, flat, 20).unwrap().iter().all(|&p| p == 77));
}

#[test]
fn bad_images_are_skipped_and_named_or_fail_the_load() {
    let dir = TempDir::new("folder-bad");
    two_class_folder(dir.path(), 4);
    let ((clean, _), _) = load_folder(dir.path(), &opts(8), None, None).unwrap();
    let red = dir.path().join("train/red");
    let good = fs::read(red.join("0.jpg")).unwrap();
    write(&red.join("truncated.jpg"), &good[..good.len() / 3]);
    write(&red.join("garbage.png"), b"this is not a png at all");
    let png = fs::read(red.join("1.PNG")).unwrap();
    write(&red.join("cut.png"), &png[..png.len() - 20]);
    // A dangling link named like an image: unreadable.
    std::os::unix::fs::symlink(dir.path().join("nowhere.jpg"), red.join("dangling.jpg")).unwrap();
    // Blue comes first in scan order, and `1a.jpg` between its `1.PNG` and `2.jpg`.
    write(&dir.path().join("train/blue/1a.jpg"), &good[..good.len() / 2]);
    let ((train, report), _) = load_folder(dir.path(), &opts(8), None, None).unwrap();
    assert_eq!(train.len(), 8, "the good images all load");
    assert_eq!(report.bad_images, 5, "{report:?}");
    // The bad files sit between good ones in scan order: the good images close up around
    // them, each with its own pixels and label.
    for i in 0..clean.len() {
        assert_eq!(train.image(i), clean.image(i), "image {i}");
        assert_eq!(train.label(i), clean.label(i), "label {i}");
    }
    let named: Vec<&str> = report.first_bad.iter().map(|(p, _)| p.as_str()).collect();
    for name in ["1a.jpg", "truncated.jpg", "garbage.png", "cut.png", "dangling.jpg"] {
        assert!(named.iter().any(|p| p.ends_with(name)), "{name} not named in {named:?}");
    }
    let summary = report.summary(Split::Train).unwrap();
    assert!(summary.contains("skipped 5 bad image") && summary.contains("garbage.png"), "{summary}");
    // `load` carries the summary as a note.
    let lo = LoadOptions { folder: opts(8), ..LoadOptions::default() };
    let (train, _) = load(DatasetKind::Folder, dir.path(), &lo).unwrap();
    assert_eq!(train.notes().len(), 1);
    // Fail: the first bad file in scan order is named.
    let fail = FolderOptions { on_bad_image: BadImagePolicy::Fail, ..opts(8) };
    let e = load_folder(dir.path(), &fail, None, None).unwrap_err().to_string();
    assert!(e.contains("train/blue/1a.jpg") && e.contains("--on-bad-image fail"), "{e}");
    assert_eq!("FAIL".parse::<BadImagePolicy>().unwrap(), BadImagePolicy::Fail);
    assert!("sometimes".parse::<BadImagePolicy>().unwrap_err().contains("sometimes"));
}

/// Sets the width and height in a PNG's IHDR (and its CRC).
fn png_claiming(w: u32, h: u32) -> Vec<u8> {
    let mut bytes = png_bytes(4, 4, png::ColorType::Rgb, png::BitDepth::Eight, &[0; 48], None);
    bytes[16..20].copy_from_slice(&w.to_be_bytes());
    bytes[20..24].copy_from_slice(&h.to_be_bytes());
    let crc = crc32(&bytes[12..29]);
    bytes[29..33].copy_from_slice(&crc.to_be_bytes());
    bytes
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// Sets the height and width in a JPEG's SOF marker.
fn jpeg_claiming(w: u16, h: u16) -> Vec<u8> {
    let mut bytes = jpeg_bytes(8, 8, &[128; 192], false);
    let sof = bytes.windows(2).position(|m| m == [0xFF, 0xC0]).expect("baseline SOF0");
    bytes[sof + 5..sof + 7].copy_from_slice(&h.to_be_bytes());
    bytes[sof + 7..sof + 9].copy_from_slice(&w.to_be_bytes());
    bytes
}

#[test]
fn decompression_bombs_are_refused_before_allocating() {
    for (name, bytes) in [("PNG", png_claiming(100_000, 100_000)), ("JPEG", jpeg_claiming(65_000, 65_000))] {
        let e = decode_rgb(&bytes, crate::DEFAULT_MAX_IMAGE_PIXELS).unwrap_err();
        assert!(e.contains("more than the limit") && e.contains("refused before decoding"), "{name}: {e}");
    }
    // The limit is a setting: a 33x17 image is refused under a limit of 500 pixels.
    let small = jpeg_bytes(33, 17, &rgb_image(33, 17, [1, 2, 3]), false);
    assert!(decode_rgb(&small, 500).unwrap_err().contains("33x17"));
    assert!(decode_rgb(&small, 561).is_ok());
    // In a folder, a bomb is one bad image among good ones.
    let dir = TempDir::new("folder-bomb");
    two_class_folder(dir.path(), 2);
    write(&dir.path().join("train/red/bomb.png"), &png_claiming(100_000, 100_000));
    let ((train, report), _) = load_folder(dir.path(), &opts(8), None, None).unwrap();
    assert_eq!((train.len(), report.bad_images), (4, 1));
}

#[test]
fn hostile_layouts_have_clear_errors() {
    // No folder at all, no train/, no val/.
    let dir = TempDir::new("folder-layout");
    let missing = dir.path().join("absent");
    assert!(matches!(load_folder(&missing, &opts(8), None, None), Err(DataError::MissingDirectory { .. })));
    let e = load_folder(dir.path(), &opts(8), None, None).unwrap_err().to_string();
    assert!(e.contains("no train/ folder"), "{e}");
    two_class_folder(dir.path(), 2);
    fs::remove_dir_all(dir.path().join("val")).unwrap();
    let e = load_folder(dir.path(), &opts(8), None, None).unwrap_err().to_string();
    assert!(e.contains("no val/ or test/"), "{e}");
    // A validation class that is not a training class.
    two_class_folder(dir.path(), 2);
    fs::create_dir_all(dir.path().join("val/green")).unwrap();
    let e = load_folder(dir.path(), &opts(8), None, None).unwrap_err().to_string();
    assert!(e.contains("val/green") && e.contains("not among the training classes"), "{e}");
    fs::remove_dir_all(dir.path().join("val/green")).unwrap();
    // An empty training class.
    fs::create_dir_all(dir.path().join("train/green")).unwrap();
    let e = load_folder(dir.path(), &opts(8), None, None).unwrap_err().to_string();
    assert!(e.contains("train/green") && e.contains("no .jpg/.jpeg/.png"), "{e}");
    fs::remove_dir_all(dir.path().join("train/green")).unwrap();
    // Sizes out of range.
    for size in [0, 7, 5000] {
        let e = load_folder(dir.path(), &opts(size), None, None).unwrap_err().to_string();
        assert!(e.contains("--image-size"), "{e}");
    }
}

#[test]
fn links_odd_names_other_files_and_missing_classes() {
    use std::os::unix::ffi::OsStrExt;
    let dir = TempDir::new("folder-odd");
    two_class_folder(dir.path(), 2);
    let red = dir.path().join("train/red");
    // A link loop inside a class folder, and a link to the sibling class.
    std::os::unix::fs::symlink(&red, red.join("loop")).unwrap();
    // Non-image files, a hidden folder that is not a class.
    write(&red.join("notes.txt"), b"hello");
    write(&dir.path().join("train/.ipynb_checkpoints/x.txt"), b"");
    // Non-UTF-8 names: a class and a file.
    let odd_class = std::ffi::OsStr::from_bytes(b"gr\xffen");
    let img = jpeg_bytes(12, 12, &rgb_image(12, 12, [10, 200, 10]), false);
    write(&dir.path().join("train").join(odd_class).join(std::ffi::OsStr::from_bytes(b"im\xfeg.jpg")), &img);
    let ((train, tr), (test, te)) = load_folder(dir.path(), &opts(8), None, None).unwrap();
    assert_eq!(train.class_names(), ["blue", "gr\u{fffd}en", "red"]);
    // The loop is walked once: 2 + 1 + 2 images, one text file ignored.
    assert_eq!((train.len(), tr.ignored_files), (5, 1));
    // The odd class has no validation folder: noted, not an error.
    assert_eq!(te.missing_classes, ["gr\u{fffd}en"]);
    assert!(te.summary(Split::Test).unwrap().contains("no images of class"));
    assert_eq!(test.len(), 4);
}

#[test]
fn a_hundred_thousand_files_in_one_folder() {
    let dir = TempDir::new("folder-many");
    two_class_folder(dir.path(), 2);
    let red = dir.path().join("train/red");
    for i in 0..100_000 {
        fs::write(red.join(format!("{i}.txt")), b"").unwrap();
    }
    let ((train, report), _) = load_folder(dir.path(), &opts(8), None, None).unwrap();
    assert_eq!((train.len(), report.ignored_files), (4, 100_000));
}

#[test]
fn export_then_load_gives_back_the_pixels_and_training_batches_are_deterministic() {
    let lo = LoadOptions { seed: 5, train_size: Some(40), test_size: Some(20), ..LoadOptions::default() };
    let (train, test) = load(DatasetKind::SyntheticShapes, ".", &lo).unwrap();
    let dir = TempDir::new("folder-export");
    assert_eq!(export_folder(&train, &test, dir.path()).unwrap(), 60);
    let lo = LoadOptions { folder: opts(32), ..LoadOptions::default() };
    let (back, back_test) = load(DatasetKind::Folder, dir.path(), &lo).unwrap();
    assert_eq!(back.class_names(), (0..10).map(|c| c.to_string()).collect::<Vec<_>>());
    // Class folders are read in label order and files in index order within a class.
    let mut order: Vec<usize> = (0..train.len()).collect();
    order.sort_by_key(|&i| train.label(i).unwrap());
    for (j, &i) in order.iter().enumerate() {
        assert_eq!(back.image(j).unwrap(), train.image(i).unwrap(), "image {i}");
        assert_eq!(back.label(j), train.label(i));
    }
    assert_eq!(back_test.len(), 20);
    // The random-resized-crop stream does not depend on the worker count.
    let back = Arc::new(back);
    let batches = |workers: usize| -> Vec<Vec<f32>> {
        let mut cfg = PipelineConfig::new(8, 3);
        cfg.workers = workers;
        let mut p = Pipeline::new(back.clone(), cfg).unwrap();
        (0..6).map(|_| p.next_batch().unwrap().images().to_vec()).collect()
    };
    let one = batches(1);
    assert_eq!(one, batches(3));
    assert!(one.iter().flatten().all(|v| v.is_finite()));
}

#[test]
fn exported_names_must_be_folder_names() {
    let lo = LoadOptions { seed: 5, train_size: Some(4), test_size: Some(2), ..LoadOptions::default() };
    let (train, test) = load(DatasetKind::SyntheticDigits, ".", &lo).unwrap();
    let mut names: Vec<String> = (0..10).map(|c| c.to_string()).collect();
    names[3] = "../escape".into();
    let train = train.with_class_names(names).unwrap();
    let dir = TempDir::new("folder-export-names");
    let e = export_folder(&train, &test, dir.path()).unwrap_err().to_string();
    assert!(e.contains("../escape"), "{e}");
    let _: PathBuf = dir.path().to_path_buf();
}

fn streaming(size: usize) -> FolderOptions {
    FolderOptions { decode: DecodeMode::Streaming, ..opts(size) }
}

/// Every batch of `epochs` epochs: images (as bits), labels and sample indices.
fn batches(p: &mut Pipeline, n: usize) -> Vec<(Vec<u32>, Vec<f32>, Vec<u32>)> {
    (0..n)
        .map(|_| {
            let b = p.next_batch().unwrap();
            (b.images().iter().map(|v| v.to_bits()).collect(), b.labels().to_vec(), b.sample_indices().to_vec())
        })
        .collect()
}

#[test]
fn streaming_gives_the_batches_of_upfront_decoding_bit_for_bit() {
    let dir = TempDir::new("folder-stream");
    two_class_folder(dir.path(), 6);
    let upfront = FolderOptions { decode: DecodeMode::Upfront, ..opts(16) };
    let ((train, _), (test, _)) = load_folder(dir.path(), &upfront, None, None).unwrap();
    let ((strain, sr), (stest, _)) = load_folder(dir.path(), &streaming(16), None, None).unwrap();
    assert!(!train.is_streamed() && strain.is_streamed() && stest.is_streamed());
    assert_eq!(sr.bad_images, 0);
    // Only the file list is held.
    assert!(strain.pixels().is_empty() && strain.image(0).is_none());
    assert_eq!(
        (strain.len(), strain.labels(), strain.class_names()),
        (train.len(), train.labels(), train.class_names())
    );
    // Statistics from every image of a split this small: exactly the upfront ones.
    assert_eq!((strain.mean(), strain.std()), (train.mean(), train.std()));
    assert_eq!(strain.fingerprint(), train.fingerprint());
    assert_eq!(stest.fingerprint(), test.fingerprint());
    // The training stream, random-resized crops and flips included, two workers, 3 epochs.
    let cfg = |start| PipelineConfig { workers: 2, start, ..PipelineConfig::new(4, 7) };
    let want = batches(&mut Pipeline::new(Arc::new(train.clone()), cfg(Cursor::default())).unwrap(), 9);
    let mut sp = Pipeline::new(Arc::new(strain.clone()), cfg(Cursor::default())).unwrap();
    assert_eq!(batches(&mut sp, 9), want);
    // Started from a saved cursor (a resumed run): the same batches from there on.
    let mut resumed = Pipeline::new(Arc::new(strain.clone()), cfg(Cursor { epoch: 1, batch: 1 })).unwrap();
    assert_eq!(batches(&mut resumed, 5), want[4..]);
    // Evaluation batches (decoded in parallel), a short last batch included.
    let norm = Normalize::from_dataset(&train);
    let eval = |d| -> Vec<(Vec<u32>, Vec<f32>)> {
        EvalBatches::new(d, 5, &norm)
            .unwrap()
            .map(|b| (b.images().iter().map(|v| v.to_bits()).collect(), b.labels().to_vec()))
            .collect()
    };
    assert_eq!(eval(&stest), eval(&test));
    assert_eq!(strain.streaming_report().unwrap().bad_images, 0);
    assert!(train.streaming_report().is_none());
    // A subset of a streamed set keeps its first files.
    let sub = strain.clone().truncated(3);
    assert_eq!((sub.len(), sub.labels()), (3, &train.labels()[..3]));
    assert_ne!(sub.fingerprint(), strain.fingerprint());
}

#[test]
fn folder_data_normalises_with_imagenet_constants_and_a_stream_measures_statistics_only_when_asked() {
    let dir = TempDir::new("folder-normalize");
    two_class_folder(dir.path(), 6);
    let upfront = FolderOptions { decode: DecodeMode::Upfront, ..opts(16) };
    let ((train, _), _) = load_folder(dir.path(), &upfront, None, None).unwrap();
    let ((strain, _), (stest, _)) = load_folder(dir.path(), &streaming(16), None, None).unwrap();
    for d in [&train, &strain, &stest] {
        assert_eq!(d.default_normalize(), &NormalizeChoice::Imagenet);
    }
    // Loading a stream decoded no statistics sample, and a pipeline with the default
    // normalisation (ImageNet's) decodes none either.
    assert!(!strain.stats_measured() && !stest.stats_measured());
    let p = Pipeline::new(Arc::new(strain.clone()), PipelineConfig::new(4, 1)).unwrap();
    assert_eq!((p.normalize().mean(), p.normalize().std()), (&IMAGENET_MEAN[..], &IMAGENET_STD[..]));
    assert!(!strain.stats_measured());
    // auto measures the training split (only), to the upfront statistics here (every image).
    let auto = NormalizeChoice::Auto.resolve(&strain).unwrap();
    assert!(strain.stats_measured() && !stest.stats_measured());
    assert_eq!((auto.mean(), auto.std()), (train.mean(), train.std()));
    assert_ne!(auto.mean(), &IMAGENET_MEAN[..]);
}

#[test]
fn streaming_replaces_a_file_gone_bad_by_the_next_and_names_it_or_stops_with_fail() {
    let dir = TempDir::new("folder-stream-bad");
    two_class_folder(dir.path(), 4);
    let ((train, _), (test, _)) = load_folder(dir.path(), &streaming(8), None, None).unwrap();
    // Files that go bad after the load (a disk error, a file replaced while training).
    let bad = dir.path().join("train/blue/1.PNG");
    write(&bad, b"\x89PNG\r\n\x1a\nbroken");
    let cfg = PipelineConfig { workers: 2, augment: Some(Augment::none()), ..PipelineConfig::new(8, 3) };
    let mut p = Pipeline::new(Arc::new(train.clone()), cfg.clone()).unwrap();
    let b = p.next_batch().unwrap();
    // Blue's `1.PNG` is image 1; it is replaced by image 2 (`2.jpg`), with image 2's label.
    let mut seen = b.sample_indices().to_vec();
    seen.sort();
    assert_eq!(seen, [0, 2, 2, 3, 4, 5, 6, 7]);
    drop(b);
    let report = train.streaming_report().unwrap();
    assert_eq!(report.bad_images, 1);
    assert!(report.first_bad[0].0.ends_with("train/blue/1.PNG"), "{report:?}");
    let line = report.summary(Split::Train).unwrap();
    assert!(line.contains("skipped 1 bad image") && line.contains("1.PNG"), "{line}");
    // Seen again in the next epoch: still counted once.
    let _ = p.next_batch().unwrap();
    assert_eq!(train.streaming_report().unwrap().bad_images, 1);
    // With `fail`, the pipeline stops with an error naming the file.
    let ((ftrain, _), (ftest, _)) = {
        write(&bad, &fs::read(dir.path().join("train/blue/3.PNG")).unwrap());
        load_folder(dir.path(), &FolderOptions { on_bad_image: BadImagePolicy::Fail, ..streaming(8) }, None, None)
            .unwrap()
    };
    write(&bad, b"not an image");
    let mut p = Pipeline::new(Arc::new(ftrain), cfg).unwrap();
    let e = p.next_batch().unwrap_err().to_string();
    assert!(e.contains("train/blue/1.PNG") && e.contains("--on-bad-image fail"), "{e}");
    // The same for evaluation: `try_next` errs, the iterator ends and keeps the error.
    let val = dir.path().join("val/red/0.jpg");
    write(&val, b"not an image either");
    let norm = Normalize::from_dataset(&test);
    let mut it = EvalBatches::new(&ftest, 8, &norm).unwrap();
    let e = it.try_next().unwrap_err().to_string();
    assert!(e.contains("val/red/0.jpg"), "{e}");
    let mut it = EvalBatches::new(&ftest, 8, &norm).unwrap();
    assert!(it.next().is_none() && it.error().is_some());
    // With `skip` the test set's bad file is replaced too, and the pass completes.
    assert_eq!(EvalBatches::new(&test, 3, &norm).unwrap().count(), 3);
    assert_eq!(test.streaming_report().unwrap().bad_images, 1);
    // Loading a stream decodes only until one file of the statistics' sample decodes: a file
    // bad at load is found when the statistics are measured (`auto`), or by a batch.
    let ((strain, report), _) = load_folder(dir.path(), &streaming(8), None, None).unwrap();
    assert_eq!(report.bad_images, 0, "{report:?}");
    let _ = strain.mean();
    let report = strain.streaming_report().unwrap();
    assert_eq!(report.bad_images, 1, "{report:?}");
    assert!(report.first_bad[0].0.ends_with("train/blue/1.PNG"), "{report:?}");
    // The files loading tried, named: skipped up to one that decodes, or (fail) the first.
    let first = dir.path().join("train/blue/0.jpg");
    write(&first, b"truncated");
    let ((_, report), _) = load_folder(dir.path(), &streaming(8), None, None).unwrap();
    assert_eq!(report.bad_images, 2, "blue's 0.jpg and 1.PNG, then 2.jpg decodes: {report:?}");
    let e = load_folder(dir.path(), &FolderOptions { on_bad_image: BadImagePolicy::Fail, ..streaming(8) }, None, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("train/blue/0.jpg"), "{e}");
    // A split with no file that decodes is an error at load.
    for f in
        fs::read_dir(dir.path().join("train/blue")).unwrap().chain(fs::read_dir(dir.path().join("train/red")).unwrap())
    {
        write(&f.unwrap().path(), b"junk");
    }
    let e = load_folder(dir.path(), &streaming(8), None, None).unwrap_err().to_string();
    assert!(e.contains("none of the 8 image files sampled could be decoded"), "{e}");
}

#[test]
fn auto_streams_only_what_does_not_fit_in_half_the_memory() {
    let gb = 1u64 << 30;
    assert!(!DecodeMode::Auto.streams(4 * gb, Some(8 * gb)));
    assert!(DecodeMode::Auto.streams(4 * gb + 1, Some(8 * gb)));
    assert!(!DecodeMode::Auto.streams(u64::MAX, None), "unknown memory: decode up front");
    assert!(DecodeMode::Streaming.streams(1, Some(8 * gb)));
    assert!(!DecodeMode::Upfront.streams(u64::MAX, Some(1)));
    assert_eq!("Streaming".parse::<DecodeMode>().unwrap(), DecodeMode::Streaming);
    assert_eq!(DecodeMode::default(), DecodeMode::Auto);
    let e = "lazy".parse::<DecodeMode>().unwrap_err();
    assert!(e.contains("lazy") && e.contains("streaming"), "{e}");
}

/// Issue 50: a training class whose images are all bad is refused as an empty class folder
/// is (naming the folder and a file), not trained with no examples; a zero-byte file says
/// it is empty; `test/` beside `val/` is reported as unused.
#[test]
fn a_class_of_only_bad_images_is_refused_and_unused_folders_are_named() {
    let dir = TempDir::new("folder-all-bad-class");
    two_class_folder(dir.path(), 3);
    for i in 0..3 {
        let name = if i % 2 == 0 { format!("{i}.jpg") } else { format!("{i}.PNG") };
        write(&dir.path().join("train/red").join(name), if i == 0 { b"" } else { b"garbage" });
    }
    let e = load_folder(dir.path(), &opts(8), None, None).unwrap_err().to_string();
    assert!(e.contains("train/red") && e.contains("none of the class's 3 image file(s) could be decoded"), "{e}");
    assert!(e.contains("every class needs examples"), "{e}");
    assert!(e.contains("0.jpg: is empty (0 bytes)"), "{e}");
    assert!(!e.contains("Some(") && !e.contains("starts with )"), "{e}");
    // test/ beside val/: evaluation reads val/, and says test/ is not used.
    let dir = TempDir::new("folder-val-and-test");
    two_class_folder(dir.path(), 2);
    fs::create_dir_all(dir.path().join("test/red")).unwrap();
    let (_, (_, te)) = load_folder(dir.path(), &opts(8), None, None).unwrap();
    let line = te.summary(Split::Test).unwrap();
    assert!(line.contains("test is not used") || line.contains("/test is not used"), "{line}");
}

/// Issue 50: streaming, a class folder deleted while training stops the run with an error
/// naming the files, after at most `MAX_REPLACEMENT_TRIES` tries per sample, instead of
/// training epochs on substitutes of another class; more than 5% of the files gone bad
/// stops it too.
#[test]
fn streaming_stops_when_a_class_folder_is_deleted_or_too_much_goes_bad() {
    let dir = TempDir::new("folder-stream-deleted");
    two_class_folder(dir.path(), 40);
    let ((train, _), _) = load_folder(dir.path(), &streaming(8), None, None).unwrap();
    fs::remove_dir_all(dir.path().join("train/blue")).unwrap();
    let cfg = PipelineConfig { workers: 1, augment: Some(Augment::none()), ..PipelineConfig::new(16, 3) };
    let mut p = Pipeline::new(Arc::new(train.clone()), cfg.clone()).unwrap();
    let mut err = None;
    for _ in 0..10 {
        match p.next_batch() {
            Ok(_) => {}
            Err(e) => {
                err = Some(e.to_string());
                break;
            }
        }
    }
    let e = err.expect("the pipeline stops");
    assert!(e.contains("train/blue/") && e.contains("fail to decode") || e.contains("have failed to decode"), "{e}");
    // Scattered bad files: 11 of 80 (more than 5%, and at least 10) stop the run, naming the share.
    let dir = TempDir::new("folder-stream-share");
    two_class_folder(dir.path(), 40);
    let ((train, _), _) = load_folder(dir.path(), &streaming(8), None, None).unwrap();
    for i in (0..40).step_by(3).take(11) {
        let name = if i % 2 == 0 { format!("{i}.jpg") } else { format!("{i}.PNG") };
        write(&dir.path().join("train/red").join(name), b"gone bad");
    }
    let mut p = Pipeline::new(Arc::new(train.clone()), cfg).unwrap();
    let mut err = None;
    for _ in 0..20 {
        if let Err(e) = p.next_batch() {
            err = Some(e.to_string());
            break;
        }
    }
    let e = err.expect("the pipeline stops");
    assert!(e.contains("of the 80 image files have failed to decode (more than 5%"), "{e}");
}
