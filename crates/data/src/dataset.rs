use std::fmt;
use std::sync::Arc;

use rayon::prelude::*;

use crate::folder::FileSource;
use crate::{Augment, DataError, NormalizeChoice};

/// Which part of a dataset: the training set or the test set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Split {
    /// The training set (shuffled and augmented by the [`crate::Pipeline`]).
    Train,
    /// The test set (read in order by [`crate::EvalBatches`]).
    Test,
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Split::Train => "train",
            Split::Test => "test",
        })
    }
}

/// A labelled image dataset, held in memory or (folder data, [`crate::DecodeMode::Streaming`])
/// decoded from its files as batches are made.
///
/// Pixels are `u8`, one image after another, each in CHW order (`[c, h, w]`, row-major); labels
/// are class indices in `0..num_classes`. The per-channel mean and standard deviation of the
/// pixels (in units of `pixel / 255`) are computed once, exactly, when the dataset is built (a
/// streamed one measures them on a sample when first asked for); a test set must be normalised
/// with the statistics of its *training* set ([`crate::Normalize::from_dataset`]`(&train)`).
#[derive(Clone, PartialEq)]
pub struct Dataset {
    name: String,
    split: Split,
    shape: [usize; 3],
    num_classes: usize,
    pixels: Vec<u8>,
    /// The files of a streamed dataset (`pixels` is then empty).
    files: Option<Arc<FileSource>>,
    labels: Vec<u32>,
    mean: Vec<f32>,
    std: Vec<f32>,
    class_names: Vec<String>,
    default_augment: Augment,
    default_normalize: NormalizeChoice,
    notes: Vec<String>,
}

impl fmt::Debug for Dataset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dataset")
            .field("name", &self.name)
            .field("split", &self.split)
            .field("len", &self.len())
            .field("shape", &self.shape)
            .field("num_classes", &self.num_classes)
            .field("mean", &self.mean)
            .field("std", &self.std)
            .finish()
    }
}

impl Dataset {
    /// A dataset from its parts. `pixels` holds `labels.len()` images of shape `shape`
    /// (`[c, h, w]`, CHW order); every label must be below `num_classes`.
    ///
    /// Errors: a zero dimension, no classes, a pixel buffer of the wrong length, a label out of
    /// range, or more than `u32::MAX` images.
    pub fn new(
        name: impl Into<String>,
        split: Split,
        shape: [usize; 3],
        num_classes: usize,
        pixels: Vec<u8>,
        labels: Vec<u32>,
    ) -> Result<Self, DataError> {
        let name = name.into();
        if shape.contains(&0) {
            return Err(DataError::config(format!(
                "dataset {name}: image shape {} has a zero dimension",
                shape_text(shape)
            )));
        }
        if num_classes == 0 || num_classes > 1 << 24 {
            return Err(DataError::config(format!(
                "dataset {name}: {num_classes} classes (need 1..=2^24, so that every label is \
                 exact as f32)"
            )));
        }
        check_labels(&name, &labels, num_classes)?;
        let image_len = shape[0]
            .checked_mul(shape[1])
            .and_then(|v| v.checked_mul(shape[2]))
            .ok_or_else(|| DataError::config(format!("dataset {name}: image shape {} overflows", shape_text(shape))))?;
        let expected = image_len
            .checked_mul(labels.len())
            .ok_or_else(|| DataError::config(format!("dataset {name}: pixel count overflows")))?;
        if pixels.len() != expected {
            return Err(DataError::config(format!(
                "dataset {name}: {} labels of {} images need {expected} pixel bytes, got {}",
                labels.len(),
                shape_text(shape),
                pixels.len()
            )));
        }
        let (mean, std) = channel_stats(&pixels, shape);
        let class_names = (0..num_classes).map(|c| c.to_string()).collect();
        let default_augment = Augment::default_for(shape);
        Ok(Dataset {
            name,
            split,
            shape,
            num_classes,
            pixels,
            files: None,
            labels,
            mean,
            std,
            class_names,
            default_augment,
            default_normalize: NormalizeChoice::Auto,
            notes: Vec::new(),
        })
    }

    /// A dataset decoded from `files` as batches are made (its statistics measured when first
    /// asked for). Errors as [`Dataset::new`]'s, and a file list whose length is not the
    /// labels'.
    pub(crate) fn streamed(
        name: impl Into<String>,
        split: Split,
        shape: [usize; 3],
        num_classes: usize,
        files: Arc<FileSource>,
        labels: Vec<u32>,
    ) -> Result<Self, DataError> {
        let name = name.into();
        if files.len() != labels.len() {
            return Err(DataError::config(format!(
                "dataset {name}: {} files for {} labels",
                files.len(),
                labels.len()
            )));
        }
        check_labels(&name, &labels, num_classes)?;
        // Validate the shape and classes with an empty set, then attach the files.
        let mut ds = Dataset::new(name, split, shape, num_classes, Vec::new(), Vec::new())?;
        ds.files = Some(files);
        ds.labels = labels;
        Ok(ds)
    }

    /// Whether a streamed set's statistics have been measured (tests check that nothing decodes
    /// them unasked); an in-memory set always has them.
    #[cfg(test)]
    pub(crate) fn stats_measured(&self) -> bool {
        self.files.as_ref().is_none_or(|f| f.stats_measured())
    }

    /// True when the images are decoded from files as batches are made
    /// ([`crate::DecodeMode::Streaming`]): [`Dataset::pixels`] is then empty and
    /// [`Dataset::image`] `None`.
    pub fn is_streamed(&self) -> bool {
        self.files.is_some()
    }

    /// For a streamed dataset, the bad files met so far (at load and in batches made since),
    /// each counted once; `None` for a dataset held in memory.
    pub fn streaming_report(&self) -> Option<crate::FolderReport> {
        self.files.as_ref().map(|f| f.report())
    }

    pub(crate) fn files(&self) -> Option<&FileSource> {
        self.files.as_deref()
    }

    /// The same dataset with these class names (one per class; by default `"0"`, `"1"`, ...).
    pub fn with_class_names(mut self, names: Vec<String>) -> Result<Self, DataError> {
        if names.len() != self.num_classes {
            return Err(DataError::config(format!(
                "dataset {}: {} class names for {} classes",
                self.name,
                names.len(),
                self.num_classes
            )));
        }
        self.class_names = names;
        Ok(self)
    }

    /// The same dataset with another default training augmentation (see
    /// [`Dataset::default_augment`]).
    pub fn with_default_augment(mut self, augment: Augment) -> Self {
        self.default_augment = augment;
        self
    }

    /// The same dataset with another default normalisation (see
    /// [`Dataset::default_normalize`]).
    pub fn with_default_normalize(mut self, normalize: NormalizeChoice) -> Self {
        self.default_normalize = normalize;
        self
    }

    /// The same dataset with one more line for the log (what loading left out, ...).
    pub fn with_note(mut self, line: String) -> Self {
        self.notes.push(line);
        self
    }

    /// Lines the loader wants the user to see (folder data: bad images skipped, files ignored,
    /// classes missing from the validation set).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The class names, indexed by label (folder datasets: the sorted class folder names).
    pub fn class_names(&self) -> &[String] {
        &self.class_names
    }

    /// The augmentation a training pipeline uses unless told otherwise:
    /// [`Augment::default_for`] the image shape, or what the loader set (folder datasets:
    /// [`Augment::imagenet`]).
    pub fn default_augment(&self) -> Augment {
        self.default_augment
    }

    /// The normalisation a pipeline uses unless told otherwise: [`NormalizeChoice::Auto`]
    /// (this set's own statistics), or what the loader set (folder datasets:
    /// [`NormalizeChoice::Imagenet`], as torchvision's ImageFolder examples).
    pub fn default_normalize(&self) -> &NormalizeChoice {
        &self.default_normalize
    }

    /// The dataset's name (`mnist`, `cifar10`, `synthetic-digits`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Training or test set.
    pub fn split(&self) -> Split {
        self.split
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// True when the dataset holds no image.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The image shape `[channels, height, width]`.
    pub fn image_shape(&self) -> [usize; 3] {
        self.shape
    }

    /// Number of values per image (`c * h * w`).
    pub fn image_len(&self) -> usize {
        self.shape[0] * self.shape[1] * self.shape[2]
    }

    /// Number of classes; every label is below it.
    pub fn num_classes(&self) -> usize {
        self.num_classes
    }

    /// The pixels of image `i` (CHW), or `None` past the end (and for a streamed dataset).
    pub fn image(&self, i: usize) -> Option<&[u8]> {
        let n = self.image_len();
        self.pixels.get(i.checked_mul(n)?..i.checked_add(1)?.checked_mul(n)?)
    }

    /// The label of image `i`, or `None` past the end.
    pub fn label(&self, i: usize) -> Option<u32> {
        self.labels.get(i).copied()
    }

    /// All pixels, image after image (empty for a streamed dataset).
    pub fn pixels(&self) -> &[u8] {
        &self.pixels
    }

    /// All labels.
    pub fn labels(&self) -> &[u32] {
        &self.labels
    }

    /// Per-channel mean of `pixel / 255` over this dataset (a streamed one: over up to
    /// [`crate::STATS_SAMPLE`] evenly spaced images, decoded the first time the statistics are
    /// asked for).
    pub fn mean(&self) -> &[f32] {
        match &self.files {
            Some(f) => &f.stats().0,
            None => &self.mean,
        }
    }

    /// Per-channel (population) standard deviation of `pixel / 255` over this dataset (a
    /// streamed one: as [`Dataset::mean`]).
    pub fn std(&self) -> &[f32] {
        match &self.files {
            Some(f) => &f.stats().1,
            None => &self.std,
        }
    }

    /// The first `n` images (all of them if `n >= len`), statistics recomputed (a streamed
    /// dataset measures them on the files kept, when asked for).
    pub fn truncated(mut self, n: usize) -> Self {
        if let Some(files) = &self.files {
            if n < self.len() {
                self.files = Some(Arc::new(files.truncated(n)));
                self.labels.truncate(n);
            }
            return self;
        }
        if n < self.len() {
            self.labels.truncate(n);
            self.pixels.truncate(n * self.image_len());
            let (mean, std) = channel_stats(&self.pixels, self.shape);
            self.mean = mean;
            self.std = std;
        }
        self
    }
}

/// What identifies a dataset's contents without holding them: its size, image shape,
/// classes, and a hash (64-bit FNV-1a) of every label and of the pixels of up to 256 evenly
/// spaced images (the first and the last among them). Two loads of the same files give the
/// same fingerprint wherever the files lie; other data gives another one (a resumed run
/// refuses it).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fingerprint {
    /// Images.
    pub images: usize,
    /// `[channels, height, width]`.
    pub shape: [usize; 3],
    /// Classes.
    pub classes: usize,
    /// The hash, as 16 hex digits.
    pub hash: String,
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} images of {}, {} classes, contents hash {}",
            self.images,
            shape_text(self.shape),
            self.classes,
            self.hash
        )
    }
}

impl Dataset {
    /// The dataset's [`Fingerprint`] (a streamed dataset computes it once).
    pub fn fingerprint(&self) -> Fingerprint {
        match &self.files {
            Some(files) => files.fingerprint.get_or_init(|| self.compute_fingerprint()).clone(),
            None => self.compute_fingerprint(),
        }
    }

    fn compute_fingerprint(&self) -> Fingerprint {
        const SAMPLES: usize = 256;
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                h ^= b as u64;
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        };
        for l in &self.labels {
            eat(&l.to_le_bytes());
        }
        let n = self.len();
        let picks = n.min(SAMPLES);
        let (mut scratch, mut buf) = (None, Vec::new());
        for k in 0..picks {
            // Evenly spaced, the first and the last included.
            let i = if picks == 1 { 0 } else { k * (n - 1) / (picks - 1) };
            if let Some(files) = &self.files {
                // The same bytes a dataset held in memory has for a file that decodes.
                buf.resize(self.image_len(), 0);
                if files.load_exact(i, &mut scratch, &mut buf).is_ok() {
                    eat(&buf);
                }
            } else if let Some(img) = self.image(i) {
                eat(img);
            }
        }
        Fingerprint { images: n, shape: self.shape, classes: self.num_classes, hash: format!("{h:016x}") }
    }
}

/// Every label below `num_classes`, and no more images than a `u32` index counts.
fn check_labels(name: &str, labels: &[u32], num_classes: usize) -> Result<(), DataError> {
    if u32::try_from(labels.len()).is_err() {
        return Err(DataError::config(format!(
            "dataset {name}: {} images is more than the supported {}",
            labels.len(),
            u32::MAX
        )));
    }
    if let Some((i, &l)) = labels.iter().enumerate().find(|&(_, &l)| l as usize >= num_classes) {
        return Err(DataError::config(format!(
            "dataset {name}: label {l} of image {i} is out of range (expected 0..{num_classes})"
        )));
    }
    Ok(())
}

/// An image shape for messages: `[3, 32, 32]` as `3x32x32`.
pub(crate) fn shape_text(shape: [usize; 3]) -> String {
    format!("{}x{}x{}", shape[0], shape[1], shape[2])
}

/// Per-channel 256-bin histograms of pixel values.
pub(crate) type Hist = Vec<[u64; 256]>;

/// The histograms of one image (CHW).
pub(crate) fn image_hist(image: &[u8], shape: [usize; 3]) -> Hist {
    let [c, h, w] = shape;
    let mut acc = vec![[0u64; 256]; c];
    for (ch, values) in image.chunks_exact(h * w).enumerate().take(c) {
        let hch = &mut acc[ch];
        for &p in values {
            hch[p as usize] += 1;
        }
    }
    acc
}

/// Adds `b` into `a`.
pub(crate) fn add_hist(a: &mut Hist, b: &Hist) {
    for (x, y) in a.iter_mut().zip(b) {
        for (u, v) in x.iter_mut().zip(y) {
            *u += v;
        }
    }
}

/// Exact per-channel mean and std (of `p / 255`) from 256-bin histograms. Independent of the
/// number of rayon threads (integer counts). A channel with zero variance gets std 1.
fn channel_stats(pixels: &[u8], shape: [usize; 3]) -> (Vec<f32>, Vec<f32>) {
    let c = shape[0];
    let image_len = shape.iter().product::<usize>();
    let hist = pixels
        .par_chunks(image_len.max(1) * 64)
        .fold(
            || vec![[0u64; 256]; c],
            |mut acc, chunk| {
                for image in chunk.chunks_exact(image_len) {
                    add_hist(&mut acc, &image_hist(image, shape));
                }
                acc
            },
        )
        .reduce(
            || vec![[0u64; 256]; c],
            |mut a, b| {
                add_hist(&mut a, &b);
                a
            },
        );
    stats_from_hist(&hist)
}

/// Mean and std (of `p / 255`) per channel from histograms; std 1 for a constant channel.
pub(crate) fn stats_from_hist(hist: &Hist) -> (Vec<f32>, Vec<f32>) {
    let c = hist.len();
    let mut mean = Vec::with_capacity(c);
    let mut std = Vec::with_capacity(c);
    for h in hist {
        let count: u64 = h.iter().sum();
        if count == 0 {
            mean.push(0.0);
            std.push(1.0);
            continue;
        }
        let n = count as f64;
        let s: f64 = h.iter().enumerate().map(|(v, &k)| v as f64 * k as f64).sum();
        let m = s / n;
        let var: f64 = h.iter().enumerate().map(|(v, &k)| (v as f64 - m).powi(2) * k as f64).sum::<f64>() / n;
        let sd = var.sqrt() / 255.0;
        mean.push((m / 255.0) as f32);
        std.push(if sd > 1e-6 { sd as f32 } else { 1.0 });
    }
    (mean, std)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_are_exact() {
        // Two 1x1x2 two-channel images: channel 0 = {0, 255, 0, 255}, channel 1 = 51 everywhere.
        let ds =
            Dataset::new("t", Split::Train, [2, 1, 2], 2, vec![0, 255, 51, 51, 0, 255, 51, 51], vec![0, 1]).unwrap();
        assert!((ds.mean()[0] - 0.5).abs() < 1e-6);
        assert!((ds.std()[0] - 0.5).abs() < 1e-6);
        assert!((ds.mean()[1] - 0.2).abs() < 1e-6);
        assert_eq!(ds.std()[1], 1.0, "constant channel gets std 1");
    }

    #[test]
    fn invalid_parts_are_errors() {
        let bad = [
            Dataset::new("t", Split::Train, [1, 2, 2], 2, vec![0; 7], vec![0, 1]),
            Dataset::new("t", Split::Train, [1, 2, 2], 2, vec![0; 8], vec![0, 2]),
            Dataset::new("t", Split::Train, [0, 2, 2], 2, vec![], vec![]),
            Dataset::new("t", Split::Train, [1, 2, 2], 0, vec![], vec![]),
        ];
        for r in bad {
            assert!(matches!(r, Err(DataError::InvalidConfig(_))), "{r:?}");
        }
        let ds = Dataset::new("t", Split::Test, [1, 2, 2], 3, (0..8).collect(), vec![0, 2]).unwrap();
        assert_eq!(ds.image(1), Some(&[4u8, 5, 6, 7][..]));
        assert_eq!(ds.image(2), None);
        assert_eq!(ds.image(usize::MAX), None);
        assert_eq!(ds.label(1), Some(2));
        let t = ds.truncated(1);
        assert_eq!((t.len(), t.pixels().len()), (1, 4));
    }

    #[test]
    fn messages_write_shapes_as_c_x_h_x_w() {
        let e = Dataset::new("t", Split::Train, [1, 0, 2], 2, vec![], vec![]).unwrap_err();
        assert_eq!(e.to_string(), "invalid data configuration: dataset t: image shape 1x0x2 has a zero dimension");
        let e = Dataset::new("t", Split::Train, [1, 2, 2], 2, vec![0; 7], vec![0, 1]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid data configuration: dataset t: 2 labels of 1x2x2 images need 8 pixel bytes, got 7"
        );
        let a = Dataset::new("a", Split::Train, [2, 1, 1], 2, vec![0; 2], vec![0]).unwrap();
        let b = Dataset::new("b", Split::Test, [1, 1, 2], 2, vec![0; 2], vec![0]).unwrap();
        let tmp = crate::tests::TempDir::new("shape-text");
        let e = crate::export(&a, &b, tmp.path()).unwrap_err();
        assert!(e.to_string().contains("training set (2x1x1, 2 classes) and test set (1x1x2, 2 classes)"), "{e}");
        let e = crate::export(&a, &a, tmp.path()).unwrap_err();
        assert!(e.to_string().contains("no standard format for 2x1x1 images with 2 classes"), "{e}");
    }
}
