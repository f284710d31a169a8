//! Image-folder datasets: `DIR/train/<class>/*` and `DIR/val/<class>/*` (or `DIR/test/`), JPEG
//! and PNG files, one sub-folder per class — the layout torchvision's `ImageFolder` reads.
//!
//! Every image is converted to RGB (grey is replicated, alpha is dropped, 16-bit samples are
//! cut to 8 bits), its short side resized to the stored size with an antialiased bilinear
//! filter and the centre square cut out (torchvision's `Resize(s)` + `CenterCrop(s)`).
//! Training batches then take a random-resized crop of that square
//! ([`crate::Augment::imagenet`]).
//!
//! [`DecodeMode`] says when: once, in parallel, when the data is loaded, the squares then held
//! in memory ([`DecodeMode::Upfront`]); or every time an image enters a batch, on the
//! pipeline's worker threads, for data larger than memory ([`DecodeMode::Streaming`]). Both
//! give the same batches, bit for bit, when every file decodes.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer, images::Image};
use parking_lot::Mutex;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;

use crate::dataset::{Hist, add_hist, image_hist, stats_from_hist};
use crate::file::{available_memory, check_memory};
use crate::{Augment, DataError, Dataset, NormalizeChoice, Split};

/// Default side of the stored (and trained) square images of folder datasets.
pub const DEFAULT_IMAGE_SIZE: usize = 224;
/// Default limit on the pixels of one image (width × height), checked from its header before
/// anything is allocated: 178,956,970 as Pillow's decompression-bomb limit.
pub const DEFAULT_MAX_IMAGE_PIXELS: u64 = 178_956_970;
/// Files larger than this are refused before they are read (1 GiB).
const MAX_FILE_BYTES: u64 = 1 << 30;
/// How many bad files a [`FolderReport`] names (the count covers all).
pub const NAMED_BAD_IMAGES: usize = 5;

/// Streaming: how many files (the bad one and those after it) are tried for a sample before
/// the run stops; a longer run of bad files is not damage here and there but data gone (a
/// class folder deleted while training), which substitutes would hide.
pub const MAX_REPLACEMENT_TRIES: usize = 32;

/// Streaming: the share of a split's files that may fail to decode before the run stops
/// (and at least [`MIN_BAD_TO_STOP`] of them: a few bad files in a small set are damage, not
/// data gone).
pub const MAX_BAD_SHARE: f64 = 0.05;

/// See [`MAX_BAD_SHARE`].
pub const MIN_BAD_TO_STOP: usize = 10;

/// What to do with an image file that cannot be decoded (corrupt, truncated, too large,
/// unreadable, not a JPEG or PNG despite its name).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BadImagePolicy {
    /// Leave it out, count it and name the first few (the default).
    #[default]
    #[serde(rename = "skip")]
    Skip,
    /// Stop loading with an error naming the file.
    #[serde(rename = "fail")]
    Fail,
}

impl fmt::Display for BadImagePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BadImagePolicy::Skip => "skip",
            BadImagePolicy::Fail => "fail",
        })
    }
}

impl FromStr for BadImagePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "skip" => Ok(BadImagePolicy::Skip),
            "fail" => Ok(BadImagePolicy::Fail),
            _ => Err(format!("`{s}` is not a bad-image policy (valid: skip, fail)")),
        }
    }
}

/// When the images of a folder dataset are decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DecodeMode {
    /// [`DecodeMode::Upfront`] when the decoded images take at most half the memory available
    /// (Linux's `MemAvailable`; always where it cannot be read), else
    /// [`DecodeMode::Streaming`] (the default).
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// Once, in parallel, when the data is loaded; the images are then held in memory
    /// (`3 x S x S` bytes each) and bad ones are left out.
    #[serde(rename = "upfront")]
    Upfront,
    /// Every time an image enters a batch, on the pipeline's worker threads; only the file
    /// list is held. The normalisation statistics come from up to [`STATS_SAMPLE`] evenly
    /// spaced images decoded at load. A bad file found in training is replaced by the next
    /// file after it that decodes (or stops the run with `--on-bad-image fail`).
    #[serde(rename = "streaming")]
    Streaming,
}

impl fmt::Display for DecodeMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DecodeMode::Auto => "auto",
            DecodeMode::Upfront => "upfront",
            DecodeMode::Streaming => "streaming",
        })
    }
}

impl FromStr for DecodeMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(DecodeMode::Auto),
            "upfront" => Ok(DecodeMode::Upfront),
            "streaming" => Ok(DecodeMode::Streaming),
            _ => Err(format!("`{s}` is not a decode mode (valid: auto, upfront, streaming)")),
        }
    }
}

impl DecodeMode {
    /// Whether a dataset of `bytes` decoded is streamed on a machine with `available` bytes of
    /// memory (`None`: unknown).
    pub fn streams(self, bytes: u64, available: Option<u64>) -> bool {
        match self {
            DecodeMode::Streaming => true,
            DecodeMode::Upfront => false,
            DecodeMode::Auto => available.is_some_and(|a| bytes > a / 2),
        }
    }
}

/// Images of a streamed split decoded at load for its normalisation statistics: all of them
/// up to this many (the statistics are then exact, as with [`DecodeMode::Upfront`]), else
/// this many evenly spaced.
pub const STATS_SAMPLE: usize = 1024;

/// Settings of a folder dataset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FolderOptions {
    /// Side of the stored square images, in pixels (at least 8).
    pub image_size: usize,
    /// Largest width × height accepted; larger images are bad images.
    pub max_pixels: u64,
    /// What to do with bad images.
    pub on_bad_image: BadImagePolicy,
    /// When images are decoded.
    pub decode: DecodeMode,
}

impl Default for FolderOptions {
    fn default() -> Self {
        FolderOptions {
            image_size: DEFAULT_IMAGE_SIZE,
            max_pixels: DEFAULT_MAX_IMAGE_PIXELS,
            on_bad_image: BadImagePolicy::Skip,
            decode: DecodeMode::Auto,
        }
    }
}

/// What loading one split of a folder dataset left out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FolderReport {
    /// Image files that could not be used (all of them counted).
    pub bad_images: usize,
    /// The first [`NAMED_BAD_IMAGES`] of them: path and reason.
    pub first_bad: Vec<(String, String)>,
    /// Files that are not JPEG or PNG by their name (ignored, as torchvision does).
    pub ignored_files: usize,
    /// Training classes with no folder in this split (validation only).
    pub missing_classes: Vec<String>,
    /// A folder of the same role that is not used (`test/` beside `val/`: evaluation reads
    /// `val/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unused_folder: Option<String>,
}

impl FolderReport {
    /// One line for logs, or `None` when nothing was left out.
    pub fn summary(&self, split: Split) -> Option<String> {
        let mut parts = Vec::new();
        if self.bad_images > 0 {
            let named: Vec<String> = self.first_bad.iter().map(|(p, why)| format!("{p} ({why})")).collect();
            let more = if self.bad_images > named.len() { ", ..." } else { "" };
            parts.push(format!("skipped {} bad image(s): {}{more}", self.bad_images, named.join("; ")));
        }
        if self.ignored_files > 0 {
            parts.push(format!("ignored {} file(s) that are not .jpg/.jpeg/.png", self.ignored_files));
        }
        if !self.missing_classes.is_empty() {
            parts.push(format!("no images of class(es) {}", self.missing_classes.join(", ")));
        }
        if let Some(f) = &self.unused_folder {
            parts.push(format!("{f} is not used (val/ is the evaluation folder when both exist)"));
        }
        (!parts.is_empty()).then(|| format!("{split} set: {}", parts.join("; ")))
    }
}

/// A loaded split and what loading it left out.
pub type FolderSplit = (Dataset, FolderReport);

/// A file found by the scan, with its label.
struct Entry {
    path: PathBuf,
    label: u32,
}

/// Loads `dir/train` and `dir/val` (or `dir/test`) as `(train, test)`, with what each left out.
/// Images are in scan order: classes sorted by name, files sorted within a class.
/// `train_size` / `test_size` keep `n` files, chosen before decoding as the first `n` of a
/// round-robin over the classes (the first file of each class, then the second, ...).
pub fn load_folder(
    dir: &Path,
    opts: &FolderOptions,
    train_size: Option<usize>,
    test_size: Option<usize>,
) -> Result<(FolderSplit, FolderSplit), DataError> {
    if opts.image_size < 8 || opts.image_size > 4096 {
        return Err(DataError::config(format!("--image-size {} is out of range (need 8..=4096)", opts.image_size)));
    }
    if opts.max_pixels == 0 {
        return Err(DataError::config("--max-image-pixels must be at least 1"));
    }
    if !dir.is_dir() {
        return Err(DataError::MissingDirectory {
            path: dir.to_path_buf(),
            looked_for: vec![dir.join("train"), dir.join("val"), dir.join("test")],
        });
    }
    let train_dir = dir.join("train");
    if !train_dir.is_dir() {
        return Err(DataError::malformed(
            dir,
            "no train/ folder: a folder dataset is DIR/train/<class>/*.jpg|png and DIR/val/<class>/* (or DIR/test/)",
        ));
    }
    let test_dir = ["val", "test"].iter().map(|n| dir.join(n)).find(|p| p.is_dir()).ok_or_else(|| {
        DataError::malformed(
            dir,
            "no val/ or test/ folder beside train/ (the evaluation images, one sub-folder per class)",
        )
    })?;
    let classes = class_folders(&train_dir)?;
    if classes.is_empty() {
        return Err(DataError::malformed(&train_dir, "no class sub-folders"));
    }
    if classes.len() > 1 << 24 {
        return Err(DataError::malformed(&train_dir, format!("{} class folders (at most 2^24)", classes.len())));
    }
    let names: Vec<String> = classes.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    let (train_entries, train_ignored) = scan(&train_dir, &classes, true)?;
    let test_classes = class_folders(&test_dir)?;
    if let Some(extra) = test_classes.iter().find(|c| !classes.contains(c)) {
        return Err(DataError::malformed(
            &test_dir.join(extra),
            format!("class folder `{}` is not among the training classes", extra.to_string_lossy()),
        ));
    }
    let (test_entries, test_ignored) = scan(&test_dir, &classes, false)?;
    if test_entries.is_empty() {
        return Err(DataError::malformed(&test_dir, "no .jpg/.jpeg/.png images in any class folder"));
    }
    let missing_classes =
        classes.iter().filter(|c| !test_classes.contains(c)).map(|c| c.to_string_lossy().into_owned()).collect();
    let train_entries = first(train_entries, train_size, &train_dir)?;
    let test_entries = first(test_entries, test_size, &test_dir)?;
    let side = opts.image_size;
    let bytes = (train_entries.len() + test_entries.len()) as u64 * 3 * (side * side) as u64;
    let streaming = opts.decode.streams(bytes, available_memory());
    let split = |entries: Vec<Entry>, which: Split, dir: &Path| {
        if streaming {
            stream_split(entries, &names, which, dir, opts)
        } else {
            decode_split(&entries, &names, which, dir, opts)
        }
    };
    if !streaming {
        let what = format!("{} decoded {side}x{side} images", train_entries.len() + test_entries.len());
        check_memory(dir, bytes, &what)?;
    }
    let (train, mut train_report) = split(train_entries, Split::Train, &train_dir)?;
    train_report.ignored_files = train_ignored;
    let (test, mut test_report) = split(test_entries, Split::Test, &test_dir)?;
    test_report.ignored_files = test_ignored;
    test_report.missing_classes = missing_classes;
    if test_dir.ends_with("val") && dir.join("test").is_dir() {
        test_report.unused_folder = Some(dir.join("test").display().to_string());
    }
    Ok(((train, train_report), (test, test_report)))
}

/// The first `n` entries of a round-robin over the classes (the first file of every class,
/// then the second, ...), so that a subset keeps the classes balanced; kept in scan order.
fn first(entries: Vec<Entry>, n: Option<usize>, dir: &Path) -> Result<Vec<Entry>, DataError> {
    match n {
        None => Ok(entries),
        Some(n) if n == 0 || n > entries.len() => Err(DataError::config(format!(
            "{}: asked for {n} images, it holds {} (need 1..={})",
            dir.display(),
            entries.len(),
            entries.len()
        ))),
        Some(n) => {
            // Rank of each entry within its class (entries are grouped by class, in order).
            let mut rank = Vec::with_capacity(entries.len());
            let mut prev = None;
            let mut r = 0usize;
            for e in &entries {
                r = if prev == Some(e.label) { r + 1 } else { 0 };
                prev = Some(e.label);
                rank.push(r);
            }
            let mut order: Vec<usize> = (0..entries.len()).collect();
            order.sort_by_key(|&i| (rank[i], entries[i].label));
            let mut keep = vec![false; entries.len()];
            for &i in &order[..n] {
                keep[i] = true;
            }
            Ok(entries.into_iter().zip(keep).filter_map(|(e, k)| k.then_some(e)).collect())
        }
    }
}

/// The class sub-folders of a split folder, sorted by name (bytes). Hidden folders (`.name`)
/// are not classes.
/// The class names of the folder dataset in `dir` (the sub-folders of `dir/train`, sorted),
/// without reading any image: what a model for it is built with.
pub fn folder_classes(dir: &Path) -> Result<Vec<String>, DataError> {
    let train = dir.join("train");
    if !train.is_dir() {
        return Err(DataError::malformed(dir, "no train/ folder: a folder dataset is DIR/train/<class>/*.jpg|png"));
    }
    Ok(class_folders(&train)?.iter().map(|c| c.to_string_lossy().into_owned()).collect())
}

fn class_folders(dir: &Path) -> Result<Vec<OsString>, DataError> {
    let mut classes = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| DataError::io(dir, e))? {
        let entry = entry.map_err(|e| DataError::io(dir, e))?;
        let name = entry.file_name();
        if name.as_encoded_bytes().first() == Some(&b'.') {
            continue;
        }
        // Follows links, as torchvision does; a dangling link is not a class.
        if fs::metadata(entry.path()).map(|m| m.is_dir()).unwrap_or(false) {
            classes.push(name);
        }
    }
    classes.sort_by(|a, b| a.as_encoded_bytes().cmp(b.as_encoded_bytes()));
    Ok(classes)
}

fn is_image_name(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .map(|e| matches!(e.to_ascii_lowercase().as_str(), "jpg" | "jpeg" | "png"))
        .unwrap_or(false)
}

/// Every image file under each class folder (recursively, following links, each directory
/// visited once so that a link loop ends), sorted within the class. A training class with no
/// image is an error naming its folder. Returns the entries and the number of other files.
fn scan(split_dir: &Path, classes: &[OsString], require_each: bool) -> Result<(Vec<Entry>, usize), DataError> {
    let mut entries = Vec::new();
    let mut ignored = 0usize;
    for (label, class) in classes.iter().enumerate() {
        let root = split_dir.join(class);
        if !root.is_dir() {
            continue;
        }
        let mut visited = HashSet::new();
        let mut files = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(d) = stack.pop() {
            // Canonical paths identify directories reached through links.
            let Ok(canon) = fs::canonicalize(&d) else { continue };
            if !visited.insert(canon) {
                continue;
            }
            let rd = fs::read_dir(&d).map_err(|e| DataError::io(&d, e))?;
            for e in rd {
                let e = e.map_err(|e| DataError::io(&d, e))?;
                let p = e.path();
                match fs::metadata(&p) {
                    Ok(m) if m.is_dir() => stack.push(p),
                    Ok(m) if m.is_file() && is_image_name(&p) => files.push(p),
                    // Unreadable metadata of an image-named file: decoding will name it.
                    Err(_) if is_image_name(&p) => files.push(p),
                    _ => ignored += 1,
                }
            }
        }
        if files.is_empty() && require_each {
            return Err(DataError::malformed(
                &root,
                "class folder holds no .jpg/.jpeg/.png image (remove it, or add images: every class needs examples)",
            ));
        }
        files.sort_by(|a, b| a.as_os_str().as_encoded_bytes().cmp(b.as_os_str().as_encoded_bytes()));
        entries.extend(files.into_iter().map(|path| Entry { path, label: label as u32 }));
    }
    Ok((entries, ignored))
}

fn decode_split(
    entries: &[Entry],
    classes: &[String],
    split: Split,
    split_dir: &Path,
    opts: &FolderOptions,
) -> Result<(Dataset, FolderReport), DataError> {
    let side = opts.image_size;
    let image_len = 3 * side * side;
    // Every image is decoded straight into its slot of the dataset's buffer, each worker
    // reusing its own decode buffers and resizer: no per-image allocation or copy.
    let mut pixels = vec![0u8; entries.len() * image_len];
    let decoded: Vec<Result<(), String>> = pixels
        .par_chunks_mut(image_len)
        .zip(entries.par_iter())
        .map_init(|| Scratch::new(side), |scratch, (slot, e)| load_image_into(&e.path, opts.max_pixels, scratch, slot))
        .collect();
    let mut report = FolderReport::default();
    let mut labels = Vec::with_capacity(entries.len());
    for (i, (e, r)) in entries.iter().zip(decoded).enumerate() {
        match r {
            Ok(()) => {
                // Close the gaps left by bad images (a no-op while there are none).
                let kept = labels.len();
                if kept != i {
                    pixels.copy_within(i * image_len..(i + 1) * image_len, kept * image_len);
                }
                labels.push(e.label);
            }
            Err(why) => {
                if opts.on_bad_image == BadImagePolicy::Fail {
                    return Err(DataError::malformed(&e.path, format!("{why} (--on-bad-image fail)")));
                }
                report.bad_images += 1;
                if report.first_bad.len() < NAMED_BAD_IMAGES {
                    report.first_bad.push((e.path.display().to_string(), why));
                }
            }
        }
    }
    pixels.truncate(labels.len() * image_len);
    let first_bad = |report: &FolderReport| {
        report.first_bad.first().map_or_else(String::new, |(p, why)| format!(" (first: {p}: {why})"))
    };
    if labels.is_empty() {
        return Err(DataError::malformed(
            split_dir,
            format!("none of its {} image files could be decoded{}", entries.len(), first_bad(&report)),
        ));
    }
    // Every training class needs examples: a class whose images are all bad is refused as an
    // empty class folder is.
    if split == Split::Train {
        let mut have = vec![false; classes.len()];
        for &l in &labels {
            if let Some(h) = have.get_mut(l as usize) {
                *h = true;
            }
        }
        if let Some(c) = have.iter().position(|h| !h) {
            let files = entries.iter().filter(|e| e.label as usize == c).count();
            let bad = entries
                .iter()
                .filter(|e| e.label as usize == c)
                .find_map(|e| report.first_bad.iter().find(|(p, _)| *p == e.path.display().to_string()))
                .map_or_else(String::new, |(p, why)| format!(" (first: {p}: {why})"));
            return Err(DataError::malformed(
                &split_dir.join(&classes[c]),
                format!(
                    "none of the class's {files} image file(s) could be decoded{bad}: every class needs examples (fix or remove them)"
                ),
            ));
        }
    }
    let ds = Dataset::new("folder", split, [3, side, side], classes.len(), pixels, labels)?
        .with_class_names(classes.to_vec())?
        .with_default_augment(Augment::imagenet())
        .with_default_normalize(NormalizeChoice::Imagenet);
    Ok((ds, report))
}

/// The files of a split decoded as batches are made ([`DecodeMode::Streaming`]): the paths,
/// the decoding settings and a record of the bad files met so far.
pub(crate) struct FileSource {
    paths: Vec<PathBuf>,
    side: usize,
    max_pixels: u64,
    policy: BadImagePolicy,
    bad: Mutex<BadLog>,
    /// The dataset's fingerprint, computed once (it decodes up to 256 files).
    pub(crate) fingerprint: std::sync::OnceLock<crate::Fingerprint>,
    /// The normalisation statistics, measured the first time they are asked for (a test
    /// split, or a run normalised by fixed constants, never decodes for them).
    stats: std::sync::OnceLock<(Vec<f32>, Vec<f32>)>,
}

#[derive(Default)]
struct BadLog {
    seen: HashSet<usize>,
    first: Vec<(String, String)>,
}

impl PartialEq for FileSource {
    fn eq(&self, other: &Self) -> bool {
        (&self.paths, self.side, self.max_pixels, self.policy)
            == (&other.paths, other.side, other.max_pixels, other.policy)
    }
}

impl FileSource {
    pub(crate) fn len(&self) -> usize {
        self.paths.len()
    }

    /// The first `n` files (same settings, a fresh record of bad files).
    pub(crate) fn truncated(&self, n: usize) -> FileSource {
        FileSource {
            paths: self.paths[..n.min(self.paths.len())].to_vec(),
            side: self.side,
            max_pixels: self.max_pixels,
            policy: self.policy,
            bad: Mutex::new(BadLog::default()),
            fingerprint: std::sync::OnceLock::new(),
            stats: std::sync::OnceLock::new(),
        }
    }

    /// Indices of the images the statistics are measured on: all of them up to
    /// [`STATS_SAMPLE`], else that many evenly spaced (the first and the last among them).
    fn stats_sample(&self) -> Vec<usize> {
        let n = self.paths.len();
        let picks = n.min(STATS_SAMPLE);
        (0..picks).map(|k| if picks == n { k } else { k * (n - 1) / (picks - 1).max(1) }).collect()
    }

    #[cfg(test)]
    pub(crate) fn stats_measured(&self) -> bool {
        self.stats.get().is_some()
    }

    /// Per-channel mean and standard deviation (units of `pixel / 255`) of the images of
    /// [`FileSource::stats_sample`], decoded in parallel the first time they are asked for.
    /// A file that does not decode is recorded as bad and left out, whatever the policy (a
    /// run with `--on-bad-image fail` stops when its pipeline reaches the file).
    pub(crate) fn stats(&self) -> &(Vec<f32>, Vec<f32>) {
        self.stats.get_or_init(|| {
            let side = self.side;
            let decoded: Vec<(usize, Result<Hist, String>)> = self
                .stats_sample()
                .par_iter()
                .map_init(
                    || (None, vec![0u8; 3 * side * side]),
                    |(scratch, buf), &i| {
                        (i, self.load_exact(i, scratch, buf).map(|()| image_hist(buf, [3, side, side])))
                    },
                )
                .collect();
            let mut hist = vec![[0u64; 256]; 3];
            for (i, r) in decoded {
                match r {
                    Ok(h) => add_hist(&mut hist, &h),
                    Err(why) => {
                        self.note_bad(i, why);
                    }
                }
            }
            stats_from_hist(&hist)
        })
    }

    /// Decodes file `index` into `out` (`3 x side x side`, CHW), with no substitution.
    pub(crate) fn load_exact(
        &self,
        index: usize,
        scratch: &mut Option<Box<Scratch>>,
        out: &mut [u8],
    ) -> Result<(), String> {
        let path = self.paths.get(index).ok_or_else(|| format!("image {index} of {}", self.paths.len()))?;
        let s = scratch.get_or_insert_with(|| Box::new(Scratch::new(self.side)));
        if s.side != self.side {
            **s = Scratch::new(self.side);
        }
        load_image_into(path, self.max_pixels, s, out)
    }

    /// Decodes file `index` into `out`; a bad file is recorded and, with
    /// [`BadImagePolicy::Skip`], replaced by the next file after it (cyclically) that decodes,
    /// trying at most [`MAX_REPLACEMENT_TRIES`] files. Returns the index of the file decoded.
    /// Errors name the file: a run of that many bad files in a row (a class folder deleted
    /// mid-run), or more than [`MAX_BAD_SHARE`] of the split gone bad, stops the run rather
    /// than train on substitutes.
    pub(crate) fn load(
        &self,
        index: usize,
        scratch: &mut Option<Box<Scratch>>,
        out: &mut [u8],
    ) -> Result<usize, String> {
        let n = self.paths.len();
        for k in 0..n.min(MAX_REPLACEMENT_TRIES) {
            let i = (index + k) % n;
            match self.load_exact(i, scratch, out) {
                Ok(()) => return Ok(i),
                Err(why) => {
                    if self.policy == BadImagePolicy::Fail {
                        return Err(format!("{}: {why} (--on-bad-image fail)", self.paths[i].display()));
                    }
                    let bad = self.note_bad(i, why.clone());
                    if bad >= MIN_BAD_TO_STOP && bad as f64 > MAX_BAD_SHARE * n as f64 {
                        return Err(format!(
                            "{bad} of the {n} image files have failed to decode (more than {}%: the data has gone bad, e.g. files deleted while training); last: {}: {why}",
                            100.0 * MAX_BAD_SHARE,
                            self.paths[i].display()
                        ));
                    }
                }
            }
        }
        let tried = n.min(MAX_REPLACEMENT_TRIES);
        Err(format!(
            "{} and the {} image files after it fail to decode (a folder deleted or emptied while training?); {}",
            self.paths[index % n.max(1)].display(),
            tried.saturating_sub(1),
            self.bad
                .lock()
                .first
                .first()
                .map_or_else(|| "no file decodes".to_string(), |(p, why)| format!("first bad file: {p}: {why}"))
        ))
    }

    /// Records file `i` as bad; returns how many are now.
    fn note_bad(&self, i: usize, why: String) -> usize {
        let mut log = self.bad.lock();
        if log.seen.insert(i) && log.first.len() < NAMED_BAD_IMAGES {
            log.first.push((self.paths[i].display().to_string(), why));
        }
        log.seen.len()
    }

    /// The bad files met so far (each counted once).
    pub(crate) fn report(&self) -> FolderReport {
        let log = self.bad.lock();
        FolderReport { bad_images: log.seen.len(), first_bad: log.first.clone(), ..FolderReport::default() }
    }
}

/// A split of [`DecodeMode::Streaming`]: the file list. Its normalisation statistics are
/// measured only if asked for ([`FileSource::stats`]); loading checks that the split holds an
/// image that decodes, trying the statistics' sample in order.
fn stream_split(
    entries: Vec<Entry>,
    classes: &[String],
    split: Split,
    split_dir: &Path,
    opts: &FolderOptions,
) -> Result<(Dataset, FolderReport), DataError> {
    let side = opts.image_size;
    let (paths, labels): (Vec<PathBuf>, Vec<u32>) = entries.into_iter().map(|e| (e.path, e.label)).unzip();
    let source = FileSource {
        paths,
        side,
        max_pixels: opts.max_pixels,
        policy: opts.on_bad_image,
        bad: Mutex::new(BadLog::default()),
        fingerprint: std::sync::OnceLock::new(),
        stats: std::sync::OnceLock::new(),
    };
    let sample = source.stats_sample();
    let (mut scratch, mut buf) = (None, vec![0u8; 3 * side * side]);
    let mut good = false;
    for &i in &sample {
        match source.load_exact(i, &mut scratch, &mut buf) {
            Ok(()) => {
                good = true;
                break;
            }
            Err(why) => {
                if opts.on_bad_image == BadImagePolicy::Fail {
                    return Err(DataError::malformed(&source.paths[i], format!("{why} (--on-bad-image fail)")));
                }
                source.note_bad(i, why);
            }
        }
    }
    let report = source.report();
    if !good {
        return Err(DataError::malformed(
            split_dir,
            format!(
                "none of the {} image files sampled could be decoded{}",
                sample.len(),
                report.first_bad.first().map_or_else(String::new, |(p, why)| format!(" (first: {p}: {why})"))
            ),
        ));
    }
    let ds = Dataset::streamed("folder", split, [3, side, side], classes.len(), Arc::new(source), labels)?
        .with_class_names(classes.to_vec())?
        .with_default_augment(Augment::imagenet())
        .with_default_normalize(NormalizeChoice::Imagenet);
    Ok((ds, report))
}

/// One loader thread's reusable state: the decoder's output, the RGB image, the resizer and
/// its output, so that decoding a folder allocates per thread, not per image.
pub(crate) struct Scratch {
    decoded: Vec<u8>,
    rgb: Vec<u8>,
    resizer: Resizer,
    resized: Image<'static>,
    side: usize,
}

impl fmt::Debug for Scratch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scratch").field("side", &self.side).finish_non_exhaustive()
    }
}

impl Scratch {
    pub(crate) fn new(side: usize) -> Self {
        let px = u32::try_from(side).unwrap_or(u32::MAX);
        Scratch {
            decoded: Vec::new(),
            rgb: Vec::new(),
            resizer: Resizer::new(),
            resized: Image::new(px, px, PixelType::U8x3),
            side,
        }
    }
}

/// Reads, decodes and resizes one file into `out`: `3 x side x side` CHW pixels.
fn load_image_into(path: &Path, max_pixels: u64, s: &mut Scratch, out: &mut [u8]) -> Result<(), String> {
    let meta = fs::metadata(path).map_err(|e| format!("cannot read: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!("{} bytes is more than the 1 GiB accepted for one image", meta.len()));
    }
    let bytes = fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    let (w, h) = decode_into(&bytes, max_pixels, s)?;
    resize_center_square_into(w, h, s, out)
}

/// Decodes a JPEG or PNG (recognised by content, not by name) to `(width, height, RGB)`, the
/// pixels interleaved row by row, as the folder loader does: grey replicated, alpha dropped,
/// 16-bit cut to 8. An image of more than `max_pixels` pixels is refused from its header, before
/// anything is allocated. The error says what is wrong (no path: the caller knows it).
pub fn decode_image(bytes: &[u8], max_pixels: u64) -> Result<(usize, usize, Vec<u8>), String> {
    decode_rgb(bytes, max_pixels)
}

pub(crate) fn decode_rgb(bytes: &[u8], max_pixels: u64) -> Result<(usize, usize, Vec<u8>), String> {
    let mut s = Scratch::new(8);
    let (w, h) = decode_into(bytes, max_pixels, &mut s)?;
    Ok((w, h, std::mem::take(&mut s.rgb)))
}

/// Decodes into `s.rgb` (interleaved RGB, `w * h * 3` bytes); returns `(w, h)`.
fn decode_into(bytes: &[u8], max_pixels: u64, s: &mut Scratch) -> Result<(usize, usize), String> {
    let check = |w: usize, h: usize| -> Result<(), String> {
        if w == 0 || h == 0 {
            return Err(format!("{w}x{h} image has no pixels"));
        }
        if (w as u64).saturating_mul(h as u64) > max_pixels {
            return Err(format!(
                "{w}x{h} pixels is more than the limit of {max_pixels} (--max-image-pixels); refused before decoding"
            ));
        }
        Ok(())
    };
    let (w, h, channels) = if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        let options = DecoderOptions::default()
            .set_max_width(1 << 20)
            .set_max_height(1 << 20)
            .jpeg_set_out_colorspace(ColorSpace::RGB)
            .set_strict_mode(true);
        let mut dec = zune_jpeg::JpegDecoder::new_with_options(ZCursor::new(bytes), options);
        dec.decode_headers().map_err(|e| format!("not a valid JPEG: {e:?}"))?;
        let info = dec.info().ok_or("JPEG without a frame header")?;
        let (w, h) = (info.width as usize, info.height as usize);
        check(w, h)?;
        let len = dec.output_buffer_size().ok_or("JPEG output size overflows")?;
        s.decoded.clear();
        s.decoded.resize(len, 0);
        dec.decode_into(&mut s.decoded).map_err(|e| format!("corrupt or truncated JPEG: {e:?}"))?;
        let channels = dec.output_colorspace().map(|c| c.num_components()).unwrap_or(3);
        (w, h, channels)
    } else if bytes.starts_with(&[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A]) {
        let mut dec = png::Decoder::new(std::io::Cursor::new(bytes));
        dec.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
        let mut reader = dec.read_info().map_err(|e| format!("not a valid PNG: {e}"))?;
        let (w, h) = (reader.info().width as usize, reader.info().height as usize);
        check(w, h)?;
        let len = reader.output_buffer_size().ok_or("PNG output size overflows")?;
        s.decoded.clear();
        s.decoded.resize(len, 0);
        let frame = reader.next_frame(&mut s.decoded).map_err(|e| format!("corrupt or truncated PNG: {e}"))?;
        if frame.bit_depth != png::BitDepth::Eight {
            return Err(format!("PNG decoded to {}-bit samples (expected 8)", frame.bit_depth as u8));
        }
        s.decoded.truncate(frame.buffer_size());
        (w, h, frame.color_type.samples())
    } else {
        if bytes.is_empty() {
            return Err("is empty (0 bytes)".into());
        }
        let head: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
        return Err(format!("not a JPEG or PNG file (starts with {})", head.join(" ")));
    };
    let n = w * h;
    if channels == 0 || s.decoded.len() != n * channels {
        return Err(format!("decoder returned {} bytes for {w}x{h} with {channels} channel(s)", s.decoded.len()));
    }
    match channels {
        3 => std::mem::swap(&mut s.decoded, &mut s.rgb),
        4 => {
            s.rgb.clear();
            s.rgb.extend(s.decoded.chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]));
        }
        1 => {
            s.rgb.clear();
            s.rgb.extend(s.decoded.iter().flat_map(|&g| [g, g, g]));
        }
        2 => {
            s.rgb.clear();
            s.rgb.extend(s.decoded.chunks_exact(2).flat_map(|p| [p[0], p[0], p[0]]));
        }
        c => return Err(format!("{c} colour channels (expected grey, grey+alpha, RGB or RGBA)")),
    }
    Ok((w, h))
}

/// Resizes the short side to `side` (antialiased bilinear) and cuts out the centre square, as
/// torchvision's `Resize(side)` + `CenterCrop(side)`; returns CHW.
#[cfg(test)]
pub(crate) fn resize_center_square(w: usize, h: usize, rgb: Vec<u8>, side: usize) -> Result<Vec<u8>, String> {
    let mut s = Scratch::new(side);
    s.rgb = rgb;
    let mut chw = vec![0u8; 3 * side * side];
    resize_center_square_into(w, h, &mut s, &mut chw)?;
    Ok(chw)
}

/// Resizes `s.rgb` (`w x h`) as [`resize_center_square`] does, into `out` (CHW).
fn resize_center_square_into(w: usize, h: usize, s: &mut Scratch, out: &mut [u8]) -> Result<(), String> {
    let side = s.side;
    let plane = side * side;
    if out.len() != 3 * plane || s.rgb.len() != 3 * w * h {
        return Err(format!("resize: {}x{w}x{h} into {} bytes for side {side}", s.rgb.len(), out.len()));
    }
    let interleaved: &[u8] = if w == side && h == side {
        &s.rgb
    } else {
        let short = w.min(h) as f64;
        // The centre square of the source that maps to the output.
        let (left, top) = ((w as f64 - short) / 2.0, (h as f64 - short) / 2.0);
        let (w32, h32) = (u32::try_from(w).map_err(|_| "too wide")?, u32::try_from(h).map_err(|_| "too high")?);
        let src = Image::from_slice_u8(w32, h32, &mut s.rgb, PixelType::U8x3).map_err(|e| format!("resize: {e}"))?;
        let options =
            ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear)).crop(left, top, short, short);
        s.resizer.resize(&src, &mut s.resized, &options).map_err(|e| format!("resize: {e}"))?;
        s.resized.buffer()
    };
    let (r, rest) = out.split_at_mut(plane);
    let (g, b) = rest.split_at_mut(plane);
    for (i, p) in interleaved.chunks_exact(3).enumerate() {
        r[i] = p[0];
        g[i] = p[1];
        b[i] = p[2];
    }
    Ok(())
}

/// Writes a training and a test set as an image folder of PNG files —
/// `dir/train/<class>/<index>.png` and `dir/val/<class>/<index>.png`, class folders named by
/// [`Dataset::class_names`] — which [`load_folder`] (at the same image size) and torchvision's
/// `ImageFolder` read back as exactly these pixels. 1- and 3-channel images. Returns the
/// number of files written.
pub fn export_folder(train: &Dataset, test: &Dataset, dir: &Path) -> Result<usize, DataError> {
    let mut written = 0;
    for (ds, split) in [(train, "train"), (test, "val")] {
        let [c, h, w] = ds.image_shape();
        let colour = match c {
            1 => png::ColorType::Grayscale,
            3 => png::ColorType::Rgb,
            _ => return Err(DataError::config(format!("export: {c}-channel images cannot be written as PNG"))),
        };
        let names = ds.class_names();
        for name in names {
            if name.is_empty() || name.starts_with('.') || name.contains(['/', '\\']) {
                return Err(DataError::config(format!("export: class name `{name}` cannot be a folder name")));
            }
            let class_dir = dir.join(split).join(name);
            fs::create_dir_all(&class_dir).map_err(|e| DataError::io(&class_dir, e))?;
        }
        let plane = h * w;
        for i in 0..ds.len() {
            let (Some(img), Some(label)) = (ds.image(i), ds.label(i)) else { continue };
            let interleaved: Vec<u8> = (0..plane).flat_map(|p| (0..c).map(move |ch| img[ch * plane + p])).collect();
            let out = encode_png(w, h, colour, &interleaved)
                .map_err(|e| DataError::config(format!("export: PNG encoding failed: {e}")))?;
            let path = dir.join(split).join(&names[label as usize]).join(format!("{i:06}.png"));
            fs::write(&path, out).map_err(|e| DataError::io(&path, e))?;
            written += 1;
        }
    }
    Ok(written)
}

/// One 8-bit PNG file in memory.
fn encode_png(w: usize, h: usize, colour: png::ColorType, pixels: &[u8]) -> Result<Vec<u8>, png::EncodingError> {
    let too_large = || png::EncodingError::LimitsExceeded;
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(
        &mut out,
        u32::try_from(w).map_err(|_| too_large())?,
        u32::try_from(h).map_err(|_| too_large())?,
    );
    enc.set_color(colour);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header()?;
    writer.write_image_data(pixels)?;
    writer.finish()?;
    Ok(out)
}
