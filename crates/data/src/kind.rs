use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::DataError;

/// The datasets this crate can load or generate, by their command-line names.
///
/// Parsed from (and displayed as) `mnist`, `cifar10`, `cifar100`, `synthetic-digits`,
/// `synthetic-shapes` and `folder`; parsing ignores ASCII case and also accepts `cifar-10` /
/// `cifar-100` / `imagefolder`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DatasetKind {
    /// MNIST handwritten digits, IDX files: 1x28x28, 10 classes.
    #[serde(rename = "mnist")]
    Mnist,
    /// CIFAR-10 binary version: 3x32x32, 10 classes.
    #[serde(rename = "cifar10")]
    Cifar10,
    /// CIFAR-100 binary version (fine labels): 3x32x32, 100 classes.
    #[serde(rename = "cifar100")]
    Cifar100,
    /// Built-in MNIST-shaped digits rendered from a seed: 1x28x28, 10 classes.
    #[serde(rename = "synthetic-digits")]
    SyntheticDigits,
    /// Built-in CIFAR-shaped coloured shapes rendered from a seed: 3x32x32, 10 classes.
    #[serde(rename = "synthetic-shapes")]
    SyntheticShapes,
    /// A folder of JPEG/PNG images, one sub-folder per class (`DIR/train/<class>/*`,
    /// `DIR/val/<class>/*`): 3 x S x S with S from `--image-size` (default 224), classes from
    /// the folder names.
    #[serde(rename = "folder")]
    Folder,
}

impl DatasetKind {
    /// Every kind, in the order they are listed in messages.
    pub const ALL: [DatasetKind; 6] = [
        DatasetKind::Mnist,
        DatasetKind::Cifar10,
        DatasetKind::Cifar100,
        DatasetKind::SyntheticDigits,
        DatasetKind::SyntheticShapes,
        DatasetKind::Folder,
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            DatasetKind::Mnist => "mnist",
            DatasetKind::Cifar10 => "cifar10",
            DatasetKind::Cifar100 => "cifar100",
            DatasetKind::SyntheticDigits => "synthetic-digits",
            DatasetKind::SyntheticShapes => "synthetic-shapes",
            DatasetKind::Folder => "folder",
        }
    }

    /// The image shape `[channels, height, width]`. For MNIST this is the standard shape; the
    /// reader accepts any size the IDX header declares. For folder data it is the default
    /// `--image-size`.
    pub fn image_shape(self) -> [usize; 3] {
        match self {
            DatasetKind::Folder => [3, crate::folder::DEFAULT_IMAGE_SIZE, crate::folder::DEFAULT_IMAGE_SIZE],
            DatasetKind::Mnist | DatasetKind::SyntheticDigits => [1, 28, 28],
            DatasetKind::Cifar10 | DatasetKind::Cifar100 | DatasetKind::SyntheticShapes => [3, 32, 32],
        }
    }

    /// The number of classes (folder data: 0, the folders decide).
    pub fn num_classes(self) -> usize {
        match self {
            DatasetKind::Folder => 0,
            DatasetKind::Cifar100 => 100,
            DatasetKind::Mnist | DatasetKind::Cifar10 | DatasetKind::SyntheticDigits | DatasetKind::SyntheticShapes => {
                10
            }
        }
    }

    /// True for the built-in datasets, which need no files.
    pub fn is_synthetic(self) -> bool {
        match self {
            DatasetKind::SyntheticDigits | DatasetKind::SyntheticShapes => true,
            DatasetKind::Mnist | DatasetKind::Cifar10 | DatasetKind::Cifar100 | DatasetKind::Folder => false,
        }
    }

    /// The valid names, comma separated (for messages).
    pub fn valid_names() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
        names.join(", ")
    }
}

impl fmt::Display for DatasetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DatasetKind {
    type Err = DataError;

    fn from_str(s: &str) -> Result<Self, DataError> {
        let lower = s.trim().to_ascii_lowercase();
        let kind = match lower.as_str() {
            "mnist" => DatasetKind::Mnist,
            "cifar10" | "cifar-10" => DatasetKind::Cifar10,
            "cifar100" | "cifar-100" => DatasetKind::Cifar100,
            "synthetic-digits" => DatasetKind::SyntheticDigits,
            "synthetic-shapes" => DatasetKind::SyntheticShapes,
            "folder" | "imagefolder" => DatasetKind::Folder,
            _ => {
                return Err(DataError::UnknownDataset { name: s.to_string() });
            }
        };
        Ok(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in DatasetKind::ALL {
            assert_eq!(k.name().parse::<DatasetKind>().unwrap(), k);
            assert_eq!(k.to_string(), k.name());
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.name()));
            assert_eq!(serde_json::from_str::<DatasetKind>(&json).unwrap(), k);
        }
        assert_eq!("CIFAR-10".parse::<DatasetKind>().unwrap(), DatasetKind::Cifar10);
    }

    #[test]
    fn unknown_name_lists_valid_ones() {
        let e = "imagenet".parse::<DatasetKind>().unwrap_err().to_string();
        assert!(e.contains("imagenet"), "{e}");
        for k in DatasetKind::ALL {
            assert!(e.contains(k.name()), "{e}");
        }
    }
}
