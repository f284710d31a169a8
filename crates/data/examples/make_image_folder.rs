//! Makes a realistic image folder for the input-pipeline benchmark (issue 25): the real
//! CIFAR-10 images of `data/cifar10-4k` (or, given a Fashion-MNIST folder, its grey images,
//! written as grey JPEG and PNG files), each upscaled to a random 400–500 x 400–500 pixels
//! (antialiased bilinear), with mild per-pixel grain so the files carry photograph-like detail
//! rather than smooth gradients, written as JPEG at a random quality 85–95 (one in four
//! progressive) and, one image in ten, as PNG. Classes are named from `batches.meta.txt`.
//!
//! `cargo run --release -p crossbow-data --example make_image_folder -- data/cifar10-4k OUT [train] [val]`
//! `cargo run --release -p crossbow-data --example make_image_folder -- /usr/share/datasets/fashion-mnist OUT 3200 800`
//!
//! The same seed always writes the same files.

use std::path::Path;

use crossbow_data::{DatasetKind, LoadOptions, load};
use crossbow_tensor::Rng;
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer, images::Image};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        return Err(
            "usage: make_image_folder <cifar10-or-fashion-mnist-dir> <out-dir> [train-images] [val-images]".into()
        );
    }
    let (src, out) = (Path::new(&args[0]), Path::new(&args[1]));
    let n = |i: usize| -> Result<Option<usize>, Box<dyn std::error::Error>> {
        Ok(match args.get(i) {
            Some(s) => Some(s.parse()?),
            None => None,
        })
    };
    let opts = LoadOptions { train_size: n(2)?, test_size: n(3)?, ..LoadOptions::default() };
    let fashion = ["train-images-idx3-ubyte", "train-images-idx3-ubyte.gz"].iter().any(|f| src.join(f).is_file());
    let kind = if fashion { DatasetKind::Mnist } else { DatasetKind::Cifar10 };
    let (train, test) = load(kind, src, &opts)?;
    let names: Vec<String> = if fashion {
        ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "ankle-boot"]
            .map(String::from)
            .to_vec()
    } else {
        match std::fs::read_to_string(src.join("batches.meta.txt")) {
            Ok(t) => t.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect(),
            Err(_) => (0..10).map(|c| c.to_string()).collect(),
        }
    };
    if names.len() < 10 {
        return Err(format!("{}: expected 10 class names", src.join("batches.meta.txt").display()).into());
    }
    let [channels, side, _] = train.image_shape();
    let (pixel_type, png_colour, jpeg_colour) = if channels == 1 {
        (PixelType::U8, png::ColorType::Grayscale, jpeg_encoder::ColorType::Luma)
    } else {
        (PixelType::U8x3, png::ColorType::Rgb, jpeg_encoder::ColorType::Rgb)
    };
    let plane = side * side;
    let mut rng = Rng::new(2026);
    let mut bytes = 0usize;
    let mut files = 0usize;
    for (ds, split) in [(&train, "train"), (&test, "val")] {
        for name in &names {
            std::fs::create_dir_all(out.join(split).join(name))?;
        }
        for i in 0..ds.len() {
            let (Some(img), Some(label)) = (ds.image(i), ds.label(i)) else { continue };
            let (w, h) = (400 + rng.below(101), 400 + rng.below(101));
            let interleaved: Vec<u8> =
                (0..plane).flat_map(|p| (0..channels).map(move |c| img[c * plane + p])).collect();
            let src_img = Image::from_vec_u8(side as u32, side as u32, interleaved, pixel_type)?;
            let mut dst = Image::new(w as u32, h as u32, pixel_type);
            let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear));
            Resizer::new().resize(&src_img, &mut dst, &options)?;
            let mut pixels = dst.into_vec();
            for p in pixels.iter_mut() {
                let grain = rng.below(13) as i32 - 6;
                *p = (*p as i32 + grain).clamp(0, 255) as u8;
            }
            let dir = out.join(split).join(&names[label as usize]);
            let data = if i % 10 == 9 {
                let path = dir.join(format!("{i:05}.png"));
                let mut data = Vec::new();
                let mut enc = png::Encoder::new(&mut data, w as u32, h as u32);
                enc.set_color(png_colour);
                enc.write_header()?.write_image_data(&pixels)?;
                std::fs::write(&path, &data)?;
                data
            } else {
                let path = dir.join(format!("{i:05}.jpg"));
                let mut data = Vec::new();
                let quality = 85 + rng.below(11) as u8;
                let mut enc = jpeg_encoder::Encoder::new(&mut data, quality);
                enc.set_progressive(i % 4 == 3);
                enc.encode(&pixels, w as u16, h as u16, jpeg_colour)?;
                std::fs::write(&path, &data)?;
                data
            };
            bytes += data.len();
            files += 1;
        }
    }
    println!("{files} files, {:.1} MB, under {}", bytes as f64 / 1e6, out.display());
    Ok(())
}
