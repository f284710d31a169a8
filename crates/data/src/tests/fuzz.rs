//! Fuzz harnesses: valid IDX, IDX.gz and CIFAR files, mutated (truncation, bit flips, header
//! fields overwritten with huge values, inserted, appended or entirely random bytes), parsed
//! from memory. Each checks that nothing panics, that the parser accepts exactly the files a
//! reference validator accepts (with exactly their content), that every error names the file
//! without debug formatting, and that memory stays small. 10,000 cases each.

use std::path::Path;

use proptest::prelude::*;
use proptest::sample::Index;

use super::alloc::peak_bytes;
use super::hostile::gzip_fast;
use crate::DataError;
use crate::cifar::{CifarVariant, parse_cifar};
use crate::file::Input;
use crate::idx::{IDX1_MAGIC, IDX3_MAGIC, MIN_IMAGE_SIDE, parse_idx};

const CASES: u32 = 10_000;

/// The most heap memory one parse of these small (< 16 KB) inputs may hold: the decoder's state
/// and buffers plus a few copies of the input, far below what a lying header could ask for.
const PEAK_LIMIT: u64 = 1 << 20;

#[derive(Clone, Debug)]
enum Mutation {
    /// Cut the file at this point.
    Truncate(Index),
    /// Flip one bit.
    FlipBit(Index, u8),
    /// Overwrite the 4-byte header field (IDX) or the label byte(s) of a record (CIFAR).
    Field(Index, u32),
    /// Overwrite one byte.
    SetByte(Index, u8),
    /// Insert bytes.
    Insert(Index, Vec<u8>),
    /// Append bytes.
    Append(Vec<u8>),
    /// Replace the whole file with random bytes.
    Random(Vec<u8>),
}

fn huge() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(u32::MAX),
        Just(4_000_000_000),
        Just(1 << 31),
        Just(1 << 24),
        Just(0),
        Just(1),
        0u32..40,
        any::<u32>(),
    ]
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<Index>().prop_map(Mutation::Truncate),
        (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::FlipBit(i, b)),
        (any::<Index>(), huge()).prop_map(|(i, v)| Mutation::Field(i, v)),
        (any::<Index>(), any::<u8>()).prop_map(|(i, v)| Mutation::SetByte(i, v)),
        (any::<Index>(), bytes(8)).prop_map(|(i, b)| Mutation::Insert(i, b)),
        bytes(300).prop_map(Mutation::Append),
        bytes(600).prop_map(Mutation::Random),
    ]
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    proptest::collection::vec(mutation(), 0..4)
}

/// Applies `m` to `v`; `fields` are the offsets of the fields `Field` may overwrite, each
/// `width` bytes wide (big-endian, low bytes of the value).
fn apply(v: &mut Vec<u8>, m: &Mutation, fields: &[usize], width: usize) {
    match m {
        Mutation::Truncate(i) => v.truncate(i.index(v.len() + 1)),
        Mutation::FlipBit(i, b) if !v.is_empty() => {
            let k = i.index(v.len());
            v[k] ^= 1 << b;
        }
        Mutation::Field(i, value) if !fields.is_empty() => {
            let at = fields[i.index(fields.len())];
            let be = value.to_be_bytes();
            for (k, &b) in be[4 - width..].iter().enumerate() {
                if let Some(slot) = v.get_mut(at + k) {
                    *slot = b;
                }
            }
        }
        Mutation::SetByte(i, b) if !v.is_empty() => {
            let k = i.index(v.len());
            v[k] = *b;
        }
        Mutation::Insert(i, b) => {
            let at = i.index(v.len() + 1);
            v.splice(at..at, b.iter().copied());
        }
        Mutation::Append(b) => v.extend_from_slice(b),
        Mutation::Random(b) => *v = b.clone(),
        _ => {}
    }
}

fn idx_file(magic: u32, dims: &[usize], seed: u8) -> Vec<u8> {
    let mut v = magic.to_be_bytes().to_vec();
    for &d in dims {
        v.extend_from_slice(&(d as u32).to_be_bytes());
    }
    let len: usize = dims.iter().product();
    v.extend(
        (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) % if magic == IDX1_MAGIC { 10 } else { 255 }),
    );
    v
}

/// What a correct IDX parser must return for `bytes`: the dimensions and payload, or `None`.
fn reference_idx(bytes: &[u8], magic: u32) -> Option<(Vec<usize>, &[u8])> {
    let ndims = (magic & 0xff) as usize;
    let header = 4 + 4 * ndims;
    if bytes.len() < header || bytes[..4] != magic.to_be_bytes() {
        return None;
    }
    let dims: Vec<usize> =
        bytes[4..header].chunks_exact(4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize).collect();
    if dims[0] == 0 || (ndims == 3 && (dims[1] < MIN_IMAGE_SIDE || dims[2] < MIN_IMAGE_SIDE)) {
        return None;
    }
    let len = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
    (bytes.len() - header == len).then(|| (dims, &bytes[header..]))
}

/// An error message names the file first, says something, and shows no debug formatting.
fn check_message(e: &DataError, name: &str) -> Result<(), TestCaseError> {
    let m = e.to_string();
    prop_assert!(m.starts_with(&format!("{name}: ")), "does not name the file: {}", m);
    prop_assert!(m.len() > name.len() + 8, "says nothing: {}", m);
    prop_assert!(!m.contains(['{', '}', '[', ']']), "debug formatting: {}", m);
    Ok(())
}

/// Parses `file` (undecoded bytes) as an IDX file named `name` and checks the result against
/// `expected` (the reference's verdict on the decoded content; `None` when the decoded content
/// is unknown because the compressed bytes were damaged).
fn check_idx(
    name: &str,
    file: &[u8],
    magic: u32,
    expected: Option<Option<(Vec<usize>, &[u8])>>,
) -> Result<(), TestCaseError> {
    let path = Path::new(name);
    let (r, peak) = peak_bytes(|| {
        let input = Input::new(path, file, file.len() as u64)?;
        parse_idx(input, magic, "IDX file")
    });
    prop_assert!(peak <= PEAK_LIMIT, "{} bytes held for a {}-byte file", peak, file.len());
    match (&r, expected) {
        (Ok(idx), Some(Some((dims, data)))) => {
            prop_assert_eq!(&idx.dims, &dims);
            prop_assert_eq!(&idx.data[..], data);
        }
        (Ok(idx), None) => {
            let len = idx.dims.iter().product::<usize>();
            prop_assert_eq!(idx.data.len(), len);
        }
        (Err(e), Some(Some(_))) => prop_assert!(false, "valid file refused: {}", e),
        (Ok(_), Some(None)) => prop_assert!(false, "invalid file accepted"),
        (Err(e), _) => check_message(e, name)?,
    }
    Ok(())
}

fn header_fields(magic: u32) -> Vec<usize> {
    (0..=(magic & 0xff) as usize).map(|k| 4 * k).collect()
}

fn idx_base(images: bool, n: usize, rows: usize, cols: usize, seed: u8) -> (u32, Vec<u8>) {
    if images {
        (IDX3_MAGIC, idx_file(IDX3_MAGIC, &[n, rows, cols], seed))
    } else {
        (IDX1_MAGIC, idx_file(IDX1_MAGIC, &[n * 20], seed))
    }
}

fn cifar_file(variant: CifarVariant, records: usize, seed: u8) -> Vec<u8> {
    let mut v = Vec::new();
    for r in 0..records {
        let fine = (r as u8).wrapping_add(seed) % 10;
        match variant {
            CifarVariant::Cifar10 => v.push(fine),
            CifarVariant::Cifar100 => v.extend_from_slice(&[fine % 20, fine]),
        }
        v.extend((0..3072).map(|i| (i as u8).wrapping_add(seed)));
    }
    v
}

/// What a correct CIFAR parser must return: the labels and pixels, or `None`.
fn reference_cifar(bytes: &[u8], variant: CifarVariant) -> Option<(Vec<u32>, Vec<u8>)> {
    let rec = variant.record_bytes();
    if bytes.is_empty() || !bytes.len().is_multiple_of(rec) {
        return None;
    }
    let (mut labels, mut pixels) = (Vec::new(), Vec::new());
    for r in bytes.chunks_exact(rec) {
        let (label, px) = match variant {
            CifarVariant::Cifar10 => (r[0], &r[1..]),
            CifarVariant::Cifar100 if r[0] < 20 => (r[1], &r[2..]),
            CifarVariant::Cifar100 => return None,
        };
        let classes = if variant == CifarVariant::Cifar10 { 10 } else { 100 };
        if label as usize >= classes {
            return None;
        }
        labels.push(label as u32);
        pixels.extend_from_slice(px);
    }
    Some((labels, pixels))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    /// Raw IDX image and label files.
    #[test]
    fn fuzz_idx(
        images in any::<bool>(),
        n in 1usize..3,
        rows in 12usize..15,
        cols in 12usize..15,
        seed in any::<u8>(),
        named_gz in any::<bool>(),
        muts in mutations(),
    ) {
        let (magic, mut file) = idx_base(images, n, rows, cols, seed);
        for m in &muts {
            apply(&mut file, m, &header_fields(magic), 4);
        }
        let name = if named_gz { "fuzz-idx3-ubyte.gz" } else { "fuzz-idx3-ubyte" };
        check_idx(name, &file, magic, Some(reference_idx(&file, magic)))?;
    }

    /// Gzip-compressed IDX files: the content mutated before compression (the parser must give
    /// the reference's verdict), the compressed bytes mutated (any clean outcome), or both.
    #[test]
    fn fuzz_idx_gz(
        images in any::<bool>(),
        n in 1usize..3,
        rows in 12usize..15,
        cols in 12usize..15,
        seed in any::<u8>(),
        content_muts in mutations(),
        gz_muts in mutations(),
    ) {
        let (magic, mut content) = idx_base(images, n, rows, cols, seed);
        for m in &content_muts {
            apply(&mut content, m, &header_fields(magic), 4);
        }
        let mut gz = gzip_fast(&content);
        let clean = gz.clone();
        for m in &gz_muts {
            // The gzip header's fields: flags, mtime, and the CRC / size trailer.
            let trailer = gz.len().saturating_sub(8);
            apply(&mut gz, m, &[0, 3, 4, trailer, trailer + 4], 4);
        }
        let expected = if gz == clean { Some(reference_idx(&content, magic)) } else { None };
        check_idx("fuzz-idx3-ubyte.gz", &gz, magic, expected)?;
    }

    /// CIFAR-10 and CIFAR-100 binary files (raw; a few gzip-compressed).
    #[test]
    fn fuzz_cifar(
        hundred in any::<bool>(),
        records in 1usize..3,
        seed in any::<u8>(),
        gz in proptest::bool::weighted(0.1),
        muts in mutations(),
    ) {
        let variant = if hundred { CifarVariant::Cifar100 } else { CifarVariant::Cifar10 };
        let mut file = cifar_file(variant, records, seed);
        let rec = variant.record_bytes();
        let fields: Vec<usize> = (0..records).map(|r| r * rec).collect();
        let width = if hundred { 2 } else { 1 };
        for m in &muts {
            apply(&mut file, m, &fields, width);
        }
        let expected = reference_cifar(&file, variant);
        let name = "data_batch_1.bin";
        let raw = if gz { gzip_fast(&file) } else { file.clone() };
        let path = Path::new(name);
        let (mut pixels, mut labels) = (Vec::new(), Vec::new());
        let (r, peak) = peak_bytes(|| {
            let input = Input::new(path, &raw[..], raw.len() as u64)?;
            parse_cifar(input, variant, &mut pixels, &mut labels)
        });
        prop_assert!(peak <= PEAK_LIMIT, "{} bytes held for a {}-byte file", peak, raw.len());
        match (r, expected) {
            (Ok(()), Some((l, p))) => {
                prop_assert_eq!(labels, l);
                prop_assert!(pixels == p, "pixels differ");
            }
            (Err(e), Some(_)) => prop_assert!(false, "valid file refused: {}", e),
            (Ok(()), None) => prop_assert!(false, "invalid file accepted"),
            (Err(e), None) => check_message(&e, name)?,
        }
    }
}
