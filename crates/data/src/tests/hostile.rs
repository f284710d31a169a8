//! Hostile dataset files, one test per way a file can lie: each must be a clean error naming the
//! file, without panicking, hanging, or reading and allocating what the file cannot back.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use flate2::Compression;
use flate2::write::GzEncoder;

use super::TempDir;
use super::alloc::peak_bytes;
use crate::cifar::{CifarVariant, parse_cifar};
use crate::file::{Input, MAX_DECOMPRESSED};
use crate::idx::{IDX1_MAGIC, IDX3_MAGIC, Idx, parse_idx, read_idx};
use crate::{DataError, DatasetKind, LoadOptions, load};

/// A reader over bytes that counts how many were read from it.
pub(crate) struct Counting<'a> {
    bytes: &'a [u8],
    pub(crate) read: u64,
}

impl<'a> Counting<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Counting { bytes, read: 0 }
    }
}

impl Read for Counting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let k = self.bytes.read(buf)?;
        self.read += k as u64;
        Ok(k)
    }
}

fn header(magic: u32, dims: &[u32]) -> Vec<u8> {
    let mut v = magic.to_be_bytes().to_vec();
    for d in dims {
        v.extend_from_slice(&d.to_be_bytes());
    }
    v
}

pub(crate) fn gzip_fast(bytes: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// Parses `bytes` as an IDX file called `name`; returns the result, the raw bytes consumed and
/// the peak heap bytes held.
fn parse_counted(name: &str, bytes: &[u8], magic: u32) -> (Result<Idx, DataError>, u64, u64) {
    let path = PathBuf::from(name);
    let mut reader = Counting::new(bytes);
    let (r, peak) = peak_bytes(|| {
        let input = Input::new(&path, &mut reader, bytes.len() as u64)?;
        parse_idx(input, magic, "IDX3 images")
    });
    (r, reader.read, peak)
}

/// Pseudo-random bytes (xorshift), incompressible.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[test]
fn huge_idx_header_is_refused_before_reading_or_allocating() {
    // 4 billion 28x28 images claimed, one image present.
    let mut bytes = header(IDX3_MAGIC, &[4_000_000_000, 28, 28]);
    bytes.extend(noise(784, 1));
    let (r, read, peak) = parse_counted("train-images-idx3-ubyte", &bytes, IDX3_MAGIC);
    let e = r.err().unwrap();
    let m = e.to_string();
    assert!(matches!(e, DataError::Truncated { .. }), "{m}");
    assert!(m.starts_with("train-images-idx3-ubyte: truncated: header declares 4000000000 x 28 x 28"), "{m}");
    assert!(m.contains(&format!("the file holds {} bytes", bytes.len())), "{m}");
    assert_eq!(read, 16, "only the header may be read");
    assert!(peak < 64 << 10, "{peak} bytes allocated");
    // Dimensions whose product overflows usize (and u64) are refused the same way.
    let bytes = header(IDX3_MAGIC, &[u32::MAX, u32::MAX, u32::MAX]);
    let (r, read, _) = parse_counted("x", &bytes, IDX3_MAGIC);
    let m = r.err().unwrap().to_string();
    assert!(m.contains("4294967295 x 4294967295 x 4294967295 = more than 2^64 data bytes"), "{m}");
    assert_eq!(read, 16);
    // Through the file system: the same answer, from the file's own size.
    let tmp = TempDir::new("huge");
    let path = tmp.path().join("train-images-idx3-ubyte");
    let mut bytes = header(IDX3_MAGIC, &[4_000_000_000, 28, 28]);
    bytes.extend(noise(784, 1));
    std::fs::write(&path, &bytes).unwrap();
    let (r, peak) = peak_bytes(|| read_idx(&path, IDX3_MAGIC, "IDX3 images"));
    let m = r.err().unwrap().to_string();
    assert!(m.starts_with(&format!("{}: truncated: header declares 4000000000", path.display())), "{m}");
    assert!(peak < 256 << 10, "{peak} bytes allocated");
}

#[test]
fn huge_gz_header_is_refused_before_decompressing() {
    // A 3 MB gzip file (incompressible data) whose header claims 4e9 images: past the absolute cap.
    let mut content = header(IDX3_MAGIC, &[4_000_000_000, 28, 28]);
    content.extend(noise(3 << 20, 2));
    let gz = gzip_fast(&content);
    assert!(gz.len() as u64 * 1032 > MAX_DECOMPRESSED);
    let (r, read, peak) = parse_counted("train-images-idx3-ubyte.gz", &gz, IDX3_MAGIC);
    let e = r.err().unwrap();
    let m = e.to_string();
    assert!(matches!(e, DataError::Malformed { .. }), "{m}");
    assert!(m.starts_with("train-images-idx3-ubyte.gz: impossible size: header declares 4000000000 x 28 x 28"), "{m}");
    assert!(m.contains("refuses to decompress more than 2147483648 bytes"), "{m}");
    assert!(read <= 128 << 10, "{read} of {} compressed bytes read", gz.len());
    assert!(peak < 1 << 20, "{peak} bytes allocated");
    // A small gzip file claiming more than DEFLATE can expand it to: refused by the ratio.
    let mut content = header(IDX3_MAGIC, &[10_000, 28, 28]);
    content.extend(vec![0u8; 784]);
    let gz = gzip_fast(&content);
    let (r, _, peak) = parse_counted("t.gz", &gz, IDX3_MAGIC);
    let m = r.err().unwrap().to_string();
    assert!(m.contains(&format!("a {}-byte gzip file cannot decompress to more than", gz.len())), "{m}");
    assert!(peak < 1 << 20, "{peak} bytes allocated");
}

#[test]
fn gzip_bomb_is_bounded_by_the_header() {
    // One valid 28x28 image, then 256 MiB of zeros: compresses to a few hundred KB.
    let mut enc = GzEncoder::new(Vec::new(), Compression::best());
    enc.write_all(&header(IDX3_MAGIC, &[1, 28, 28])).unwrap();
    enc.write_all(&[7u8; 784]).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..256 {
        enc.write_all(&zeros).unwrap();
    }
    let gz = enc.finish().unwrap();
    let (r, read, peak) = parse_counted("bomb.gz", &gz, IDX3_MAGIC);
    let e = r.err().unwrap();
    let m = e.to_string();
    assert!(m.starts_with("bomb.gz: unexpected bytes after the 784 data bytes the header 1 x 28 x 28 declares"), "{m}");
    // Decompression stopped one byte past the payload: only the first compressed block(s) read.
    assert!(read <= 128 << 10 && read < gz.len() as u64 / 2, "{read} of {} compressed bytes read", gz.len());
    assert!(peak < 1 << 20, "{peak} bytes allocated for 256 MiB of decompressed zeros");
    // CIFAR has no header: a gzip stream is cut off at what its compressed size allows. Declare
    // the input 10 bytes long so the bound (10 * 1032 bytes) is 3 CIFAR-10 records.
    let gz = gzip_fast(&vec![0u8; 64 << 20]);
    let path = Path::new("data_batch_1.bin");
    let mut reader = Counting::new(&gz);
    let (mut pixels, mut labels) = (Vec::new(), Vec::new());
    let (r, peak) = peak_bytes(|| {
        let input = Input::new(path, &mut reader, 10)?;
        parse_cifar(input, CifarVariant::Cifar10, &mut pixels, &mut labels)
    });
    let m = r.err().unwrap().to_string();
    assert!(m.starts_with("data_batch_1.bin: decompresses to more than 9219 bytes, but a 10-byte gzip file"), "{m}");
    assert_eq!(labels.len(), 3);
    assert!(reader.read <= 128 << 10, "{} of {} compressed bytes read", reader.read, gz.len());
    assert!(peak < 1 << 20, "{peak} bytes allocated");
}

#[test]
fn random_bytes_named_gz_say_not_gzip() {
    let tmp = TempDir::new("notgz");
    crate::tests::formats::write_mnist(tmp.path(), false, false);
    let path = tmp.path().join("train-images-idx3-ubyte.gz");
    std::fs::rename(tmp.path().join("train-images-idx3-ubyte"), &path).unwrap();
    // A raw IDX file named .gz (as a browser may save it) is still read.
    assert!(load(DatasetKind::Mnist, tmp.path(), &LoadOptions::default()).is_ok());
    for bytes in [noise(5000, 3), vec![0x1f], Vec::new()] {
        std::fs::write(&path, &bytes).unwrap();
        let m = load(DatasetKind::Mnist, tmp.path(), &LoadOptions::default()).unwrap_err().to_string();
        assert!(m.starts_with(&format!("{}: not gzip: the name ends in .gz but the file", path.display())), "{m}");
        assert!(!m.contains("magic number"), "{m}");
    }
    let m = load(DatasetKind::Mnist, tmp.path(), &LoadOptions::default()).unwrap_err().to_string();
    assert!(m.ends_with("the file is empty, not the gzip magic bytes 1f 8b"), "{m}");
    std::fs::write(&path, noise(10, 3)).unwrap();
    let m = load(DatasetKind::Mnist, tmp.path(), &LoadOptions::default()).unwrap_err().to_string();
    let hex: Vec<String> = noise(4, 3).iter().map(|b| format!("{b:02x}")).collect();
    assert!(m.contains(&format!("the file starts with {}, not", hex.join(" "))), "{m}");
    // CIFAR content in a file named .gz.
    let bytes = noise(3073, 4);
    let input = Input::new(Path::new("batch.bin.gz"), &bytes[..], 3073).unwrap();
    let m = parse_cifar(input, CifarVariant::Cifar10, &mut Vec::new(), &mut Vec::new()).unwrap_err().to_string();
    assert!(m.starts_with("batch.bin.gz: not gzip"), "{m}");
}

#[test]
fn directory_where_a_data_file_should_be_is_reported_as_such() {
    let tmp = TempDir::new("dir");
    crate::tests::formats::write_mnist(tmp.path(), false, false);
    let path = tmp.path().join("t10k-labels-idx1-ubyte");
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    let e = load(DatasetKind::Mnist, tmp.path(), &LoadOptions::default()).unwrap_err();
    assert!(matches!(e, DataError::NotRegularFile { .. }), "{e}");
    assert_eq!(e.to_string(), format!("{}: is a directory, not a data file", path.display()));
    // A regular file under another accepted name still wins over the directory.
    std::fs::write(tmp.path().join("t10k-labels-idx1-ubyte.gz"), gzip_fast(&header(IDX1_MAGIC, &[4]))).unwrap();
    let e = load(DatasetKind::Mnist, tmp.path(), &LoadOptions::default()).unwrap_err();
    assert!(matches!(e, DataError::Truncated { .. }), "{e}");
    // CIFAR, and reading a directory directly.
    let tmp = TempDir::new("dir-cifar");
    std::fs::create_dir(tmp.path().join("train.bin")).unwrap();
    let m = load(DatasetKind::Cifar100, tmp.path(), &LoadOptions::default()).unwrap_err().to_string();
    assert!(m.ends_with("train.bin: is a directory, not a data file"), "{m}");
    let m = read_idx(tmp.path(), IDX3_MAGIC, "IDX3 images").err().unwrap().to_string();
    assert_eq!(m, format!("{}: is a directory, not a data file", tmp.path().display()));
}

/// Runs `f` on another thread; fails the test if it does not return within 20 s.
fn within_20s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20)).expect("hung on a FIFO")
}

#[cfg(unix)]
#[test]
fn fifo_where_a_data_file_should_be_is_refused_without_hanging() {
    let tmp = TempDir::new("fifo");
    crate::tests::formats::write_mnist(tmp.path(), false, false);
    let path = tmp.path().join("train-images-idx3-ubyte");
    std::fs::remove_file(&path).unwrap();
    let status = std::process::Command::new("mkfifo").arg(&path).status().unwrap();
    assert!(status.success());
    let dir = tmp.path().to_path_buf();
    let e = within_20s(move || load(DatasetKind::Mnist, &dir, &LoadOptions::default())).unwrap_err();
    assert!(matches!(e, DataError::NotRegularFile { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!("{}: is not a regular file (a FIFO, socket or device), not a data file", path.display())
    );
    let p = path.clone();
    let e = within_20s(move || read_idx(&p, IDX3_MAGIC, "IDX3 images").err()).unwrap();
    assert!(e.to_string().contains("is not a regular file"), "{e}");
    // A device file is refused the same way.
    let e = read_idx(Path::new("/dev/zero"), IDX3_MAGIC, "IDX3 images").err().unwrap();
    assert_eq!(e.to_string(), "/dev/zero: is not a regular file (a FIFO, socket or device), not a data file");
}

#[test]
fn degenerate_image_shapes_are_a_clear_error() {
    let tmp = TempDir::new("tiny");
    crate::tests::formats::write_mnist(tmp.path(), false, false);
    let path = tmp.path().join("train-images-idx3-ubyte");
    for (n, rows, cols, want) in [
        (6, 1, 1, "images of 1x1 pixels are too small: crossbow's models need at least 12x12"),
        (6, 11, 28, "images of 11x28 pixels are too small"),
        (6, 28, 0, "images of 28x0 pixels are too small"),
        (0, 28, 28, "holds no images (the header's count is 0)"),
    ] {
        let mut bytes = header(IDX3_MAGIC, &[n, rows, cols]);
        bytes.extend(vec![0u8; (n * rows * cols) as usize]);
        std::fs::write(&path, &bytes).unwrap();
        let e = load(DatasetKind::Mnist, tmp.path(), &LoadOptions::default()).unwrap_err();
        let m = e.to_string();
        assert!(matches!(e, DataError::Malformed { .. }), "{m}");
        assert!(m.starts_with(&format!("{}: {want}", path.display())), "{m}");
        assert!(!m.contains(['{', '}', '[']), "no debug formatting: {m}");
    }
    // 12x12 is the smallest accepted.
    let mut bytes = header(IDX3_MAGIC, &[6, 12, 12]);
    bytes.extend(vec![0u8; 6 * 144]);
    std::fs::write(&path, &bytes).unwrap();
    let m = load(DatasetKind::Mnist, tmp.path(), &LoadOptions::default()).unwrap_err().to_string();
    assert!(m.contains("images are 28x28 but the training images") && m.contains("are 12x12"), "{m}");
}

#[test]
fn every_hostile_file_error_names_the_file_and_the_problem() {
    let tmp = TempDir::new("names");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), "truncated: 0 bytes, too short for the 4-byte IDX magic number"),
        ("short-header", header(IDX3_MAGIC, &[1, 28]), "truncated: header ends after 12 bytes, expected 16"),
        ("magic", header(IDX1_MAGIC, &[1, 28, 28]), "wrong magic number 0x00000801 (expected 0x00000803"),
        ("huge", header(IDX3_MAGIC, &[u32::MAX, 28, 28]), "truncated: header declares 4294967295 x 28 x 28"),
        ("bad-gzip", vec![0x1f, 0x8b, 7, 0, 0, 0, 0, 0, 0, 0, 1, 2], "invalid gzip data"),
        ("cut-gzip", vec![0x1f, 0x8b, 0, 0], "truncated: compressed stream ends early"),
        ("noise.gz", noise(100, 9), "not gzip"),
        ("tiny", header(IDX3_MAGIC, &[1, 1, 1]), "images of 1x1 pixels are too small"),
    ];
    for (name, bytes, want) in cases {
        let path = tmp.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        let m = read_idx(&path, IDX3_MAGIC, "IDX3 images").err().unwrap().to_string();
        assert!(m.starts_with(&format!("{}: ", path.display())), "{name}: {m}");
        assert!(m.contains(want), "{name}: {m}");
        assert!(m.len() > path.display().to_string().len() + 10, "{name}: says what is wrong: {m}");
    }
}

/// A consistent MNIST pair whose header declares `n` images of 28x28, as sparse files (the
/// size is real, the disk use is not), and a small test pair, in `dir`.
fn sparse_mnist(dir: &Path, n: u32) {
    let write = |name: &str, head: Vec<u8>, payload: u64| {
        let p = dir.join(name);
        let mut f = std::fs::File::create(&p).unwrap();
        f.write_all(&head).unwrap();
        f.set_len(head.len() as u64 + payload).unwrap();
    };
    write("train-images-idx3-ubyte", header(IDX3_MAGIC, &[n, 28, 28]), n as u64 * 784);
    write("train-labels-idx1-ubyte", header(IDX1_MAGIC, &[n]), n as u64);
    write("t10k-images-idx3-ubyte", header(IDX3_MAGIC, &[100, 28, 28]), 100 * 784);
    write("t10k-labels-idx1-ubyte", header(IDX1_MAGIC, &[100]), 100);
}

/// Issue 26, item 5: a consistent raw IDX file larger than the memory available is refused
/// with both figures before anything is allocated; with a training size only those images
/// are read (fast, and little memory).
#[test]
fn files_larger_than_memory_are_refused_and_a_train_size_reads_only_its_images() {
    let tmp = TempDir::new("sparse");
    // Two billion images of 28x28: a 1.6 TB file that takes no disk space.
    sparse_mnist(tmp.path(), 2_000_000_000);
    let t0 = std::time::Instant::now();
    let (r, peak) = peak_bytes(|| load(DatasetKind::Mnist, tmp.path(), &LoadOptions::default()));
    let m = r.err().unwrap().to_string();
    assert!(m.contains("train-images-idx3-ubyte") && m.contains("needs 1568.00 GB") && m.contains("available"), "{m}");
    assert!(peak < 1 << 20, "{peak} bytes allocated");
    let opts = LoadOptions { train_size: Some(1000), ..LoadOptions::default() };
    let (r, peak) = peak_bytes(|| load(DatasetKind::Mnist, tmp.path(), &opts));
    let (train, test) = r.unwrap();
    assert_eq!((train.len(), test.len()), (1000, 100));
    assert!(peak < 16 << 20, "{peak} bytes allocated for 1000 images");
    assert!(t0.elapsed() < Duration::from_secs(20), "took {:?}", t0.elapsed());
    // Asking for more than the files declare is still an error.
    let opts = LoadOptions { test_size: Some(101), ..opts };
    let m = load(DatasetKind::Mnist, tmp.path(), &opts).err().unwrap().to_string();
    assert!(m.contains("asked for 101 images, it holds 100"), "{m}");
}

/// The same for CIFAR: a training size reads only the first files' records.
#[test]
fn cifar_reads_only_the_records_asked_for() {
    let tmp = TempDir::new("cifar-partial");
    let rec = 3073usize;
    for (i, name) in
        ["data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"]
            .iter()
            .enumerate()
    {
        let mut bytes = vec![0u8; 100 * rec];
        for r in 0..100 {
            bytes[r * rec] = ((i + r) % 10) as u8;
        }
        std::fs::write(tmp.path().join(name), &bytes).unwrap();
    }
    std::fs::write(tmp.path().join("test_batch.bin"), vec![0u8; 50 * rec]).unwrap();
    let opts = LoadOptions { train_size: Some(150), test_size: Some(10), ..LoadOptions::default() };
    let (train, test) = load(DatasetKind::Cifar10, tmp.path(), &opts).unwrap();
    assert_eq!((train.len(), test.len()), (150, 10));
    assert_eq!(train.label(100), Some(1), "the 101st image is the first of data_batch_2.bin");
    let opts = LoadOptions { train_size: Some(501), ..LoadOptions::default() };
    let m = load(DatasetKind::Cifar10, tmp.path(), &opts).err().unwrap().to_string();
    assert!(m.contains("asked for 501 images, it holds 500"), "{m}");
}
