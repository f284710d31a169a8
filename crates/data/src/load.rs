use std::path::{Path, PathBuf};

use crate::cifar::{CifarVariant, read_cifar_first, write_cifar};
use crate::dataset::shape_text;
use crate::file::is_regular_file;
use crate::folder::{FolderOptions, FolderReport, load_folder};
use crate::idx::{self, read_pair_first};
use crate::synthetic;
use crate::{DataError, Dataset, DatasetKind, Split};

/// Default number of training images of the synthetic datasets.
pub const DEFAULT_SYNTHETIC_TRAIN: usize = 20_000;
/// Default number of test images of the synthetic datasets.
pub const DEFAULT_SYNTHETIC_TEST: usize = 4_000;

/// Options for [`load`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Seed of the synthetic datasets (ignored by file datasets).
    pub seed: u64,
    /// Training-set size. Synthetic datasets: how many images to generate (default
    /// [`DEFAULT_SYNTHETIC_TRAIN`]). File datasets: keep the first `n` images (default all;
    /// more than the files hold is an error).
    pub train_size: Option<usize>,
    /// Test-set size, as `train_size` (synthetic default [`DEFAULT_SYNTHETIC_TEST`]).
    pub test_size: Option<usize>,
    /// Image size, pixel limit and bad-image policy of folder datasets (ignored by the others).
    pub folder: FolderOptions,
}

/// Loads (or generates) a dataset: `(training set, test set)`.
///
/// File datasets are read from `data_dir`:
///
/// * `mnist`: `train-images-idx3-ubyte`, `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`,
///   `t10k-labels-idx1-ubyte`, each raw or gzip (`.gz`, detected by content), also accepted
///   with `.` before `idx` (`train-images.idx3-ubyte`), in `data_dir`, `data_dir/mnist` or
///   `data_dir/MNIST/raw`.
/// * `cifar10`: `data_batch_1.bin` .. `data_batch_5.bin` and `test_batch.bin`, in `data_dir` or
///   `data_dir/cifar-10-batches-bin`.
/// * `cifar100`: `train.bin` and `test.bin` (fine labels), in `data_dir` or
///   `data_dir/cifar-100-binary`.
///
/// * `folder`: `train/<class>/*` and `val/<class>/*` (or `test/<class>/*`), JPEG and PNG files,
///   decoded and resized to `opts.folder.image_size` squares; what was left out is in each
///   set's [`Dataset::notes`].
///
/// Synthetic datasets ignore `data_dir` and are generated from `opts.seed`.
pub fn load(
    kind: DatasetKind,
    data_dir: impl AsRef<Path>,
    opts: &LoadOptions,
) -> Result<(Dataset, Dataset), DataError> {
    let dir = data_dir.as_ref();
    let synthetic = |kind: DatasetKind| -> Result<(Dataset, Dataset), DataError> {
        let train_n = opts.train_size.unwrap_or(DEFAULT_SYNTHETIC_TRAIN);
        let test_n = opts.test_size.unwrap_or(DEFAULT_SYNTHETIC_TEST);
        if train_n == 0 || test_n == 0 {
            return Err(DataError::config(format!(
                "{kind}: train and test sizes must be at least 1 (got {train_n} and {test_n})"
            )));
        }
        let train = synthetic::generate(kind, Split::Train, train_n, opts.seed)?;
        let test = synthetic::generate(kind, Split::Test, test_n, opts.seed)?;
        Ok((train, test))
    };
    // File datasets read only the images asked for (the first N); each loader returns the
    // counts the files declare, so that asking for more than they hold is an error.
    let ((train, train_declared), (test, test_declared)) = match kind {
        DatasetKind::SyntheticDigits | DatasetKind::SyntheticShapes => return synthetic(kind),
        DatasetKind::Mnist => load_mnist(dir, opts)?,
        DatasetKind::Cifar10 => load_cifar10(dir, opts)?,
        DatasetKind::Cifar100 => load_cifar100(dir, opts)?,
        DatasetKind::Folder => {
            let ((train, train_report), (test, test_report)) =
                load_folder(dir, &opts.folder, opts.train_size, opts.test_size)?;
            let note = |ds: Dataset, r: FolderReport| match r.summary(ds.split()) {
                Some(line) => ds.with_note(line),
                None => ds,
            };
            return Ok((note(train, train_report), note(test, test_report)));
        }
    };
    Ok((limit(train, train_declared, opts.train_size)?, limit(test, test_declared, opts.test_size)?))
}

fn limit(ds: Dataset, declared: usize, n: Option<usize>) -> Result<Dataset, DataError> {
    match n {
        None => Ok(ds),
        Some(n) if n == 0 || n > declared => Err(DataError::config(format!(
            "{} {} set: asked for {n} images, it holds {declared} (need 1..={declared})",
            ds.name(),
            ds.split(),
        ))),
        Some(n) => Ok(ds.truncated(n)),
    }
}

fn check_dir(dir: &Path, names: &[&str]) -> Result<(), DataError> {
    if dir.is_dir() {
        Ok(())
    } else {
        Err(DataError::MissingDirectory {
            path: dir.to_path_buf(),
            looked_for: names.iter().map(|n| dir.join(n)).collect(),
        })
    }
}

/// The first candidate that is a regular file. When none is but one of them exists as a
/// directory, a FIFO, ..., that is the error (rather than "missing"); no candidate is opened here.
fn find(dir: &Path, what: &str, candidates: Vec<PathBuf>) -> Result<PathBuf, DataError> {
    let mut not_regular = None;
    for p in &candidates {
        match is_regular_file(p) {
            Ok(true) => return Ok(p.clone()),
            Ok(false) => {}
            Err(e) => {
                not_regular.get_or_insert(e);
            }
        }
    }
    match not_regular {
        Some(e) => Err(e),
        None => Err(DataError::MissingFile { dir: dir.to_path_buf(), what: what.to_string(), looked_for: candidates }),
    }
}

const MNIST_FILES: [&str; 4] =
    ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"];

/// A loaded split and the number of images its files declare.
type Loaded = (Dataset, usize);

fn load_mnist(dir: &Path, opts: &LoadOptions) -> Result<(Loaded, Loaded), DataError> {
    check_dir(dir, &MNIST_FILES)?;
    let dirs = [dir.to_path_buf(), dir.join("mnist"), dir.join("MNIST").join("raw")];
    let what = ["MNIST training images", "MNIST training labels", "MNIST test images", "MNIST test labels"];
    let mut paths = Vec::with_capacity(4);
    for (base, what) in MNIST_FILES.iter().zip(what) {
        paths.push(find(dir, what, idx::candidates(&dirs, base))?);
    }
    let train = read_pair_first(&paths[0], &paths[1], 10, opts.train_size)?;
    let test = read_pair_first(&paths[2], &paths[3], 10, opts.test_size)?;
    if (test.rows, test.cols) != (train.rows, train.cols) {
        return Err(DataError::malformed(
            &paths[2],
            format!(
                "images are {}x{} but the training images ({}) are {}x{}",
                test.rows,
                test.cols,
                paths[0].display(),
                train.rows,
                train.cols
            ),
        ));
    }
    let shape = [1, train.rows, train.cols];
    Ok((
        (Dataset::new("mnist", Split::Train, shape, 10, train.pixels, train.labels)?, train.declared),
        (Dataset::new("mnist", Split::Test, shape, 10, test.pixels, test.labels)?, test.declared),
    ))
}

fn load_cifar_files(
    dir: &Path,
    sub: &str,
    variant: CifarVariant,
    train_files: &[&str],
    test_file: &str,
    opts: &LoadOptions,
) -> Result<(Loaded, Loaded), DataError> {
    let mut all: Vec<&str> = train_files.to_vec();
    all.push(test_file);
    check_dir(dir, &all)?;
    let dirs = [dir.to_path_buf(), dir.join(sub)];
    let (name, classes) = match variant {
        CifarVariant::Cifar10 => ("cifar10", 10),
        CifarVariant::Cifar100 => ("cifar100", 100),
    };
    let locate = |file: &str, what: &str| {
        find(dir, &format!("{name} {what} file {file}"), dirs.iter().map(|d| d.join(file)).collect())
    };
    // Every file must be there; only the records asked for are read, in file order.
    let train_paths = train_files.iter().map(|f| locate(f, "training")).collect::<Result<Vec<_>, _>>()?;
    let test_path = locate(test_file, "test")?;
    let mut pixels = Vec::new();
    let mut labels = Vec::new();
    let mut declared = 0usize;
    for path in &train_paths {
        let left = opts.train_size.map(|n| n.saturating_sub(labels.len()));
        declared += read_cifar_first(path, variant, &mut pixels, &mut labels, left)?;
    }
    let train = Dataset::new(name, Split::Train, [3, 32, 32], classes, pixels, labels)?;
    let (mut pixels, mut labels) = (Vec::new(), Vec::new());
    let test_declared = read_cifar_first(&test_path, variant, &mut pixels, &mut labels, opts.test_size)?;
    let test = Dataset::new(name, Split::Test, [3, 32, 32], classes, pixels, labels)?;
    Ok(((train, declared), (test, test_declared)))
}

const CIFAR10_TRAIN: [&str; 5] =
    ["data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"];

fn load_cifar10(dir: &Path, opts: &LoadOptions) -> Result<(Loaded, Loaded), DataError> {
    load_cifar_files(dir, "cifar-10-batches-bin", CifarVariant::Cifar10, &CIFAR10_TRAIN, "test_batch.bin", opts)
}

fn load_cifar100(dir: &Path, opts: &LoadOptions) -> Result<(Loaded, Loaded), DataError> {
    load_cifar_files(dir, "cifar-100-binary", CifarVariant::Cifar100, &["train.bin"], "test.bin", opts)
}

/// Writes a training and a test set to `dir` (created if needed) in a standard file format, so
/// that [`load`] — or another framework — reads back exactly the same images:
///
/// * 1-channel images with at most 10 classes: MNIST IDX (`train-images-idx3-ubyte`, ...; load
///   as `mnist`).
/// * 3x32x32 images with at most 10 classes: CIFAR-10 binary (the training set split over
///   `data_batch_1.bin` .. `data_batch_5.bin`, plus `test_batch.bin`; load as `cifar10`).
/// * 3x32x32 images with at most 100 classes: CIFAR-100 binary (`train.bin`, `test.bin`; load
///   as `cifar100`).
///
/// Returns the paths written. Other shapes or class counts are an error.
pub fn export(train: &Dataset, test: &Dataset, dir: impl AsRef<Path>) -> Result<Vec<PathBuf>, DataError> {
    let dir = dir.as_ref();
    if train.image_shape() != test.image_shape() || train.num_classes() != test.num_classes() {
        return Err(DataError::config(format!(
            "export: training set ({}, {} classes) and test set ({}, {} classes) differ",
            shape_text(train.image_shape()),
            train.num_classes(),
            shape_text(test.image_shape()),
            test.num_classes()
        )));
    }
    let [c, h, w] = train.image_shape();
    let classes = train.num_classes();
    std::fs::create_dir_all(dir).map_err(|e| DataError::io(dir, e))?;
    let mut written = Vec::new();
    if c == 1 && classes <= 10 {
        for (ds, prefix) in [(train, "train"), (test, "t10k")] {
            let labels: Vec<u8> = ds.labels().iter().map(|&l| l as u8).collect();
            let images = dir.join(format!("{prefix}-images-idx3-ubyte"));
            idx::write_idx(&images, &[ds.len(), h, w], ds.pixels())?;
            let label_path = dir.join(format!("{prefix}-labels-idx1-ubyte"));
            idx::write_idx(&label_path, &[ds.len()], &labels)?;
            written.push(images);
            written.push(label_path);
        }
    } else if [c, h, w] == [3, 32, 32] && classes <= 10 {
        if train.len() < CIFAR10_TRAIN.len() {
            return Err(DataError::config(format!(
                "export: CIFAR-10 format spreads the training set over {} files; {} images are \
                 too few",
                CIFAR10_TRAIN.len(),
                train.len()
            )));
        }
        let (n, files) = (train.len(), CIFAR10_TRAIN.len());
        for (k, file) in CIFAR10_TRAIN.iter().enumerate() {
            let (start, end) = (k * n / files, (k + 1) * n / files);
            let path = dir.join(file);
            write_cifar(
                &path,
                CifarVariant::Cifar10,
                &train.pixels()[start * 3072..end * 3072],
                &train.labels()[start..end],
            )?;
            written.push(path);
        }
        let path = dir.join("test_batch.bin");
        write_cifar(&path, CifarVariant::Cifar10, test.pixels(), test.labels())?;
        written.push(path);
    } else if [c, h, w] == [3, 32, 32] && classes <= 100 {
        for (ds, file) in [(train, "train.bin"), (test, "test.bin")] {
            let path = dir.join(file);
            write_cifar(&path, CifarVariant::Cifar100, ds.pixels(), ds.labels())?;
            written.push(path);
        }
    } else {
        return Err(DataError::config(format!(
            "export: no standard format for {} images with {classes} classes (MNIST IDX takes \
             1-channel images with <= 10 classes, CIFAR binary 3x32x32 with <= 100)",
            shape_text(train.image_shape())
        )));
    }
    Ok(written)
}
