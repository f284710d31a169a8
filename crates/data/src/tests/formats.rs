use std::io::Write;
use std::path::Path;

use flate2::Compression;
use flate2::write::GzEncoder;
use proptest::prelude::*;

use super::TempDir;
use crate::cifar::{CifarVariant, read_cifar};
use crate::idx::{IdxPair, read_pair, write_idx};
use crate::{DataError, DatasetKind, LoadOptions, Split, export, load};

/// IDX3 image file bytes.
fn idx3(n: usize, rows: usize, cols: usize, pixels: &[u8]) -> Vec<u8> {
    let mut v = 0x0000_0803u32.to_be_bytes().to_vec();
    for d in [n, rows, cols] {
        v.extend_from_slice(&(d as u32).to_be_bytes());
    }
    v.extend_from_slice(pixels);
    v
}

/// IDX1 label file bytes.
fn idx1(labels: &[u8]) -> Vec<u8> {
    let mut v = 0x0000_0801u32.to_be_bytes().to_vec();
    v.extend_from_slice(&(labels.len() as u32).to_be_bytes());
    v.extend_from_slice(labels);
    v
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
}

fn pixels(n: usize, len: usize, salt: usize) -> Vec<u8> {
    (0..n * len).map(|i| ((i * 31 + salt * 7) % 256) as u8).collect()
}

/// Writes a small MNIST directory (`train` 6 images, `test` 4, 28x28). `gz` compresses the
/// files (and names them `.gz`); `dotted` uses the `train-images.idx3-ubyte` names.
pub(crate) fn write_mnist(dir: &Path, gz: bool, dotted: bool) -> (Vec<u8>, Vec<u8>) {
    let train_px = pixels(6, 784, 1);
    let test_px = pixels(4, 784, 2);
    let files = [
        ("train-images-idx3-ubyte", idx3(6, 28, 28, &train_px)),
        ("train-labels-idx1-ubyte", idx1(&[0, 1, 2, 3, 9, 5])),
        ("t10k-images-idx3-ubyte", idx3(4, 28, 28, &test_px)),
        ("t10k-labels-idx1-ubyte", idx1(&[7, 8, 9, 0])),
    ];
    for (name, bytes) in files {
        let mut name = name.to_string();
        if dotted {
            name = name.replacen("-idx", ".idx", 1);
        }
        if gz {
            write(&dir.join(format!("{name}.gz")), &gzip(&bytes));
        } else {
            write(&dir.join(name), &bytes);
        }
    }
    (train_px, test_px)
}

#[test]
fn mnist_raw_gz_dotted_and_subdirectories_read_back() {
    for (gz, dotted, sub) in
        [(false, false, ""), (true, false, ""), (false, true, ""), (true, true, "mnist"), (false, false, "MNIST/raw")]
    {
        let tmp = TempDir::new("mnist");
        let dir = tmp.path().join(sub);
        std::fs::create_dir_all(&dir).unwrap();
        let (train_px, test_px) = write_mnist(&dir, gz, dotted);
        let (train, test) = load(DatasetKind::Mnist, tmp.path(), &LoadOptions::default()).unwrap();
        assert_eq!(train.name(), "mnist");
        assert_eq!((train.split(), test.split()), (Split::Train, Split::Test));
        assert_eq!(train.image_shape(), [1, 28, 28]);
        assert_eq!(train.num_classes(), 10);
        assert_eq!(train.pixels(), &train_px[..]);
        assert_eq!(train.labels(), &[0, 1, 2, 3, 9, 5]);
        assert_eq!(test.pixels(), &test_px[..]);
        assert_eq!(test.labels(), &[7, 8, 9, 0]);
    }
}

#[test]
fn sizes_limit_file_datasets() {
    let tmp = TempDir::new("limit");
    write_mnist(tmp.path(), false, false);
    let opts = LoadOptions { train_size: Some(2), test_size: Some(4), ..LoadOptions::default() };
    let (train, test) = load(DatasetKind::Mnist, tmp.path(), &opts).unwrap();
    assert_eq!((train.len(), test.len()), (2, 4));
    assert_eq!(train.labels(), &[0, 1]);
    for bad in [Some(0), Some(7)] {
        let opts = LoadOptions { train_size: bad, ..LoadOptions::default() };
        let e = load(DatasetKind::Mnist, tmp.path(), &opts).unwrap_err();
        assert!(matches!(e, DataError::InvalidConfig(_)), "{e}");
    }
}

fn cifar_records(variant: CifarVariant, labels: &[(u8, u8)], salt: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for (i, &(coarse, fine)) in labels.iter().enumerate() {
        match variant {
            CifarVariant::Cifar10 => v.push(fine),
            CifarVariant::Cifar100 => v.extend_from_slice(&[coarse, fine]),
        }
        v.extend(pixels(1, 3072, salt + i));
    }
    v
}

#[test]
fn cifar10_reads_back_from_dir_and_subdir() {
    for sub in ["", "cifar-10-batches-bin"] {
        let tmp = TempDir::new("cifar10");
        let dir = tmp.path().join(sub);
        std::fs::create_dir_all(&dir).unwrap();
        for k in 1..=5 {
            let labels: Vec<(u8, u8)> = (0..3).map(|i| (0, ((k + i) % 10) as u8)).collect();
            write(&dir.join(format!("data_batch_{k}.bin")), &cifar_records(CifarVariant::Cifar10, &labels, k * 10));
        }
        write(&dir.join("test_batch.bin"), &cifar_records(CifarVariant::Cifar10, &[(0, 9), (0, 0)], 99));
        let (train, test) = load(DatasetKind::Cifar10, tmp.path(), &LoadOptions::default()).unwrap();
        assert_eq!((train.len(), test.len()), (15, 2));
        assert_eq!(train.image_shape(), [3, 32, 32]);
        assert_eq!(&train.labels()[..3], &[1, 2, 3]);
        assert_eq!(train.image(0).unwrap(), &pixels(1, 3072, 10)[..]);
        assert_eq!(train.image(14).unwrap(), &pixels(1, 3072, 52)[..]);
        assert_eq!(test.labels(), &[9, 0]);
        assert_eq!(test.image(1).unwrap(), &pixels(1, 3072, 100)[..]);
    }
}

#[test]
fn cifar100_uses_fine_labels() {
    for sub in ["", "cifar-100-binary"] {
        let tmp = TempDir::new("cifar100");
        let dir = tmp.path().join(sub);
        std::fs::create_dir_all(&dir).unwrap();
        write(&dir.join("train.bin"), &cifar_records(CifarVariant::Cifar100, &[(3, 99), (19, 0), (0, 42)], 1));
        write(&dir.join("test.bin"), &cifar_records(CifarVariant::Cifar100, &[(5, 17)], 7));
        let (train, test) = load(DatasetKind::Cifar100, tmp.path(), &LoadOptions::default()).unwrap();
        assert_eq!(train.num_classes(), 100);
        assert_eq!(train.labels(), &[99, 0, 42]);
        assert_eq!(train.image(2).unwrap(), &pixels(1, 3072, 3)[..]);
        assert_eq!(test.labels(), &[17]);
    }
}

#[test]
fn export_round_trips_synthetic_datasets() {
    let opts = LoadOptions { seed: 3, train_size: Some(23), test_size: Some(7), ..LoadOptions::default() };
    for (kind, as_kind) in
        [(DatasetKind::SyntheticDigits, DatasetKind::Mnist), (DatasetKind::SyntheticShapes, DatasetKind::Cifar10)]
    {
        let tmp = TempDir::new("export");
        let (train, test) = load(kind, "", &opts).unwrap();
        let written = export(&train, &test, tmp.path()).unwrap();
        assert!(written.iter().all(|p| p.is_file()));
        let (train2, test2) = load(as_kind, tmp.path(), &LoadOptions::default()).unwrap();
        assert_eq!(train2.pixels(), train.pixels());
        assert_eq!(train2.labels(), train.labels());
        assert_eq!(test2.pixels(), test.pixels());
        assert_eq!(test2.labels(), test.labels());
        assert_eq!(train2.mean(), train.mean());
    }
}

fn message(e: &DataError) -> String {
    e.to_string()
}

#[test]
fn missing_directory_lists_the_files_looked_for() {
    let tmp = TempDir::new("nodir");
    let missing = tmp.path().join("nope");
    let e = load(DatasetKind::Mnist, &missing, &LoadOptions::default()).unwrap_err();
    let m = message(&e);
    assert!(matches!(e, DataError::MissingDirectory { .. }), "{m}");
    assert!(m.contains("does not exist"), "{m}");
    assert!(m.contains("train-images-idx3-ubyte") && m.contains("t10k-labels-idx1-ubyte"), "{m}");
    let e = load(DatasetKind::Cifar10, &missing, &LoadOptions::default()).unwrap_err();
    assert!(message(&e).contains("data_batch_5.bin"), "{e}");
    assert!(message(&e).contains("test_batch.bin"), "{e}");
}

#[test]
fn missing_file_names_every_candidate() {
    let tmp = TempDir::new("nofile");
    write_mnist(tmp.path(), false, false);
    std::fs::remove_file(tmp.path().join("t10k-labels-idx1-ubyte")).unwrap();
    let e = load(DatasetKind::Mnist, tmp.path(), &LoadOptions::default()).unwrap_err();
    let m = message(&e);
    assert!(matches!(e, DataError::MissingFile { .. }), "{m}");
    assert!(m.contains("MNIST test labels"), "{m}");
    assert!(m.contains("t10k-labels-idx1-ubyte.gz"), "{m}");
    assert!(m.contains("t10k-labels.idx1-ubyte"), "{m}");

    let tmp = TempDir::new("nofile100");
    let e = load(DatasetKind::Cifar100, tmp.path(), &LoadOptions::default()).unwrap_err();
    let m = message(&e);
    assert!(m.contains("train.bin") && m.contains("cifar-100-binary"), "{m}");
}

#[test]
fn wrong_magic_names_file_and_numbers() {
    let tmp = TempDir::new("magic");
    write_mnist(tmp.path(), false, false);
    let path = tmp.path().join("train-images-idx3-ubyte");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[..4].copy_from_slice(&[0, 0, 0, 0]);
    write(&path, &bytes);
    let e = load(DatasetKind::Mnist, tmp.path(), &LoadOptions::default()).unwrap_err();
    assert_eq!(
        message(&e),
        format!("{}: wrong magic number 0x00000000 (expected 0x00000803 for IDX3 images)", path.display())
    );
    // Swapped image and label files.
    let tmp = TempDir::new("swap");
    write_mnist(tmp.path(), false, false);
    let labels = tmp.path().join("train-labels-idx1-ubyte");
    std::fs::copy(tmp.path().join("t10k-images-idx3-ubyte"), &labels).unwrap();
    let e = load(DatasetKind::Mnist, tmp.path(), &LoadOptions::default()).unwrap_err();
    assert!(message(&e).contains("expected 0x00000801 for IDX1 labels"), "{e}");
    assert!(message(&e).starts_with(&labels.display().to_string()), "{e}");
}

#[test]
fn truncated_and_trailing_files_are_errors() {
    let tmp = TempDir::new("trunc");
    let images = tmp.path().join("i");
    let labels = tmp.path().join("l");
    write(&labels, &idx1(&[1, 2]));
    let full = idx3(2, 12, 12, &[7; 288]);
    for cut in [0, 3, 10, 16, 17, full.len() - 1] {
        write(&images, &full[..cut]);
        let e = read_pair(&images, &labels, 10).err().unwrap();
        assert!(matches!(e, DataError::Truncated { .. }), "cut {cut}: {e}");
        assert!(message(&e).starts_with(&images.display().to_string()), "{e}");
        assert!(message(&e).contains("truncated"), "{e}");
    }
    let mut long = full.clone();
    long.push(0);
    write(&images, &long);
    let e = read_pair(&images, &labels, 10).err().unwrap();
    assert!(message(&e).contains("unexpected bytes after"), "{e}");
    // CIFAR: not a whole number of records.
    let rec = cifar_records(CifarVariant::Cifar10, &[(0, 1), (0, 2)], 0);
    let path = tmp.path().join("data_batch_1.bin");
    write(&path, &rec[..rec.len() - 5]);
    let e = read_cifar(&path, CifarVariant::Cifar10, &mut Vec::new(), &mut Vec::new()).unwrap_err();
    assert!(matches!(e, DataError::Truncated { .. }), "{e}");
    assert!(message(&e).contains("1 whole records and 3068 bytes left over"), "{e}");
    // A truncated gzip stream.
    let gz = gzip(&full);
    write(&images, &gz[..gz.len() / 2]);
    assert!(read_pair(&images, &labels, 10).is_err());
    // Not gzip after all.
    let mut bad = gz.clone();
    for b in bad.iter_mut().skip(10) {
        *b ^= 0x5a;
    }
    write(&images, &bad);
    let e = read_pair(&images, &labels, 10).err().unwrap();
    assert!(message(&e).starts_with(&images.display().to_string()), "{e}");
}

#[test]
fn labels_out_of_range_and_count_mismatch() {
    let tmp = TempDir::new("labels");
    let images = tmp.path().join("i");
    let labels = tmp.path().join("l");
    write(&images, &idx3(3, 12, 12, &[0; 432]));
    write(&labels, &idx1(&[1, 10, 2]));
    let e = read_pair(&images, &labels, 10).err().unwrap();
    assert_eq!(message(&e), format!("{}: label 10 of record 1 is out of range (expected 0..10)", labels.display()));
    write(&labels, &idx1(&[1, 2]));
    let e = read_pair(&images, &labels, 10).err().unwrap();
    assert_eq!(message(&e), format!("{} holds 3 images but {} holds 2 labels", images.display(), labels.display()));
    let path = tmp.path().join("c");
    write(&path, &cifar_records(CifarVariant::Cifar10, &[(0, 3), (0, 10)], 0));
    let e = read_cifar(&path, CifarVariant::Cifar10, &mut Vec::new(), &mut Vec::new()).unwrap_err();
    assert!(message(&e).contains("label 10 of record 1"), "{e}");
    write(&path, &cifar_records(CifarVariant::Cifar100, &[(0, 100)], 0));
    let e = read_cifar(&path, CifarVariant::Cifar100, &mut Vec::new(), &mut Vec::new()).unwrap_err();
    assert!(message(&e).contains("label 100 of record 0 is out of range (expected 0..100)"), "{e}");
    write(&path, &cifar_records(CifarVariant::Cifar100, &[(20, 1)], 0));
    let e = read_cifar(&path, CifarVariant::Cifar100, &mut Vec::new(), &mut Vec::new()).unwrap_err();
    assert!(message(&e).contains("expected 0..20"), "{e}");
}

#[test]
fn mnist_train_and_test_shapes_must_agree() {
    let tmp = TempDir::new("shape");
    write_mnist(tmp.path(), false, false);
    write(&tmp.path().join("t10k-images-idx3-ubyte"), &idx3(4, 14, 56, &pixels(4, 784, 0)));
    let e = load(DatasetKind::Mnist, tmp.path(), &LoadOptions::default()).unwrap_err();
    assert!(message(&e).contains("14x56") && message(&e).contains("28x28"), "{e}");
}

#[test]
fn written_idx_gz_reads_back() {
    let tmp = TempDir::new("idxgz");
    let images = tmp.path().join("x-images.gz");
    let labels = tmp.path().join("x-labels.gz");
    let px = pixels(2, 12 * 13, 5);
    write_idx(&images, &[2, 12, 13], &px).unwrap();
    write_idx(&labels, &[2], &[4, 2]).unwrap();
    let IdxPair { rows, cols, pixels, labels, .. } = read_pair(&images, &labels, 10).unwrap();
    assert_eq!((rows, cols, pixels, labels), (12, 13, px, vec![4, 2]));
}

/// Reads `bytes` as an IDX image file next to a valid label file.
fn try_idx(dir: &Path, images: &[u8], labels: &[u8]) -> Result<IdxPair, DataError> {
    let i = dir.join("images");
    let l = dir.join("labels");
    write(&i, images);
    write(&l, labels);
    read_pair(&i, &l, 10)
}

fn try_cifar(dir: &Path, bytes: &[u8], variant: CifarVariant) -> Result<usize, DataError> {
    let p = dir.join("cifar.bin");
    write(&p, bytes);
    let mut labels = Vec::new();
    read_cifar(&p, variant, &mut Vec::new(), &mut labels).map(|()| labels.len())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any damage to an IDX header, any truncation and any out-of-range label is an error;
    /// nothing panics.
    #[test]
    fn corrupted_idx_is_an_error_never_a_panic(
        n in 1usize..5,
        header_byte in 0usize..16,
        flip in 1u8..=255,
        cut_frac in 0.0f64..1.0,
        label_pos in 0usize..5,
        bad_label in 10u8..=255,
        gz in any::<bool>(),
    ) {
        let tmp = TempDir::new("prop-idx");
        let px = pixels(n, 144, 0);
        let images = idx3(n, 12, 12, &px);
        let labels: Vec<u8> = (0..n as u8).collect();
        let lab = idx1(&labels);
        let enc = |b: &[u8]| if gz { gzip(b) } else { b.to_vec() };
        prop_assert!(try_idx(tmp.path(), &enc(&images), &enc(&lab)).is_ok());

        let mut bad_header = images.clone();
        bad_header[header_byte] ^= flip;
        prop_assert!(try_idx(tmp.path(), &enc(&bad_header), &enc(&lab)).is_err());
        let mut bad_header = lab.clone();
        bad_header[header_byte % 8] ^= flip;
        prop_assert!(try_idx(tmp.path(), &enc(&images), &enc(&bad_header)).is_err());

        let cut = ((images.len() as f64) * cut_frac) as usize;
        prop_assert!(try_idx(tmp.path(), &enc(&images[..cut]), &enc(&lab)).is_err());
        let cut = ((lab.len() as f64) * cut_frac) as usize;
        prop_assert!(try_idx(tmp.path(), &enc(&images), &enc(&lab[..cut])).is_err());
        if gz {
            // Truncated compressed streams (cut before the end of the deflate data).
            let z = enc(&images);
            let cut = ((z.len() - 8) as f64 * cut_frac) as usize;
            prop_assert!(try_idx(tmp.path(), &z[..cut], &enc(&lab)).is_err());
        }

        let mut out_of_range = lab.clone();
        out_of_range[8 + label_pos % n] = bad_label;
        let e = try_idx(tmp.path(), &enc(&images), &enc(&out_of_range)).err();
        let is_range_error = matches!(e, Some(DataError::LabelOutOfRange { .. }));
        prop_assert!(is_range_error);
    }

    /// CIFAR files: only whole records of valid labels are accepted.
    #[test]
    fn corrupted_cifar_is_an_error_never_a_panic(
        records in 1usize..4,
        cut in 0usize..(4 * 3074),
        pos in 0usize..4,
        bad_label in 100u8..=255,
        hundred in any::<bool>(),
    ) {
        let tmp = TempDir::new("prop-cifar");
        let variant = if hundred { CifarVariant::Cifar100 } else { CifarVariant::Cifar10 };
        let labels: Vec<(u8, u8)> = (0..records).map(|i| (i as u8, i as u8)).collect();
        let bytes = cifar_records(variant, &labels, 0);
        prop_assert_eq!(try_cifar(tmp.path(), &bytes, variant).ok(), Some(records));
        let rec = variant.record_bytes();
        let cut = cut.min(bytes.len());
        let r = try_cifar(tmp.path(), &bytes[..cut], variant);
        if cut > 0 && cut % rec == 0 {
            prop_assert_eq!(r.ok(), Some(cut / rec));
        } else {
            prop_assert!(r.is_err());
        }
        let mut bad = bytes.clone();
        let label_at = (pos % records) * rec + if hundred { 1 } else { 0 };
        bad[label_at] = bad_label;
        let is_range_error = matches!(
            try_cifar(tmp.path(), &bad, variant),
            Err(DataError::LabelOutOfRange { .. })
        );
        prop_assert!(is_range_error);
    }

    /// Arbitrary bytes never make a reader panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let tmp = TempDir::new("prop-any");
        let mut with_magic = 0x0000_0803u32.to_be_bytes().to_vec();
        with_magic.extend_from_slice(&bytes);
        let _ = try_idx(tmp.path(), &bytes, &bytes);
        let _ = try_idx(tmp.path(), &with_magic, &idx1(&[1]));
        let _ = try_idx(tmp.path(), &gzip(&with_magic), &gzip(&bytes));
        let mut gz_garbage = vec![0x1f, 0x8b];
        gz_garbage.extend_from_slice(&bytes);
        let _ = try_idx(tmp.path(), &gz_garbage, &idx1(&[1]));
        let _ = try_cifar(tmp.path(), &bytes, CifarVariant::Cifar10);
        let _ = try_cifar(tmp.path(), &bytes, CifarVariant::Cifar100);
    }
}
