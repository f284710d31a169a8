//! `synthetic-shapes`: CIFAR-shaped (3x32x32) coloured shapes on textured backgrounds.
//!
//! Classes: 0 disc, 1 ring, 2 square, 3 square frame, 4 triangle, 5 plus, 6 five-pointed star,
//! 7 horizontal bar, 8 vertical bar, 9 crescent. Per image: a size (7–13 px "radius"), a position
//! anywhere the shape fits, a rotation (any angle; ±25° for the bars, whose orientation is
//! their class), a random fill colour that differs clearly from a random background colour, a
//! background with a colour gradient and a wavy luminance texture, an occasional small
//! occluding rectangle kept off the shape's centre, and pixel noise. Shapes are anti-aliased
//! from their exact signed distance functions.

use crossbow_tensor::Rng;

use super::raster::{Noise, TRI_NOISE_STD, sin_cos, to_u8, uniform};

/// Image side.
pub(crate) const SIDE: usize = 32;
const PLANE: usize = SIDE * SIDE;

/// Reusable per-thread buffer (3 planes of f32).
#[derive(Default)]
pub(crate) struct Scratch {
    value: Vec<f32>,
}

#[inline]
fn length(x: f32, y: f32) -> f32 {
    (x * x + y * y).sqrt()
}

/// Signed distance to an axis-aligned box of half extents `(bx, by)`.
#[inline]
fn sd_box(x: f32, y: f32, bx: f32, by: f32) -> f32 {
    let (qx, qy) = (x.abs() - bx, y.abs() - by);
    length(qx.max(0.0), qy.max(0.0)) + qx.max(qy).min(0.0)
}

/// Signed distance to an equilateral triangle of half side `r`, centred, pointing up (y down).
#[inline]
fn sd_triangle(x: f32, y: f32, r: f32) -> f32 {
    const K: f32 = 1.732_050_8;
    let y = -y; // the formula has y up
    let mut px = x.abs() - r;
    let mut py = y + r / K;
    if px + K * py > 0.0 {
        let (nx, ny) = ((px - K * py) / 2.0, (-K * px - py) / 2.0);
        px = nx;
        py = ny;
    }
    px -= px.clamp(-2.0 * r, 0.0);
    let l = length(px, py);
    if py < 0.0 { l } else { -l }
}

/// Signed distance to a five-pointed star of outer radius `r` and inner ratio `rf`.
#[inline]
fn sd_star5(x: f32, y: f32, r: f32, rf: f32) -> f32 {
    const K1X: f32 = 0.809_017;
    const K1Y: f32 = -0.587_785_24;
    let (k2x, k2y) = (-K1X, K1Y);
    let (mut px, mut py) = (x.abs(), -y);
    let d1 = 2.0 * (K1X * px + K1Y * py).max(0.0);
    px -= d1 * K1X;
    py -= d1 * K1Y;
    let d2 = 2.0 * (k2x * px + k2y * py).max(0.0);
    px -= d2 * k2x;
    py -= d2 * k2y;
    px = px.abs();
    py -= r;
    let (bax, bay) = (rf * -K1Y, rf * K1X - 1.0);
    let h = ((px * bax + py * bay) / (bax * bax + bay * bay)).clamp(0.0, r);
    let l = length(px - bax * h, py - bay * h);
    if py * bax - px * bay > 0.0 { l } else { -l }
}

/// Signed distance (pixels) from local point `(x, y)` to shape `class` of size `r`.
#[inline]
fn sdf(class: usize, x: f32, y: f32, r: f32) -> f32 {
    match class {
        0 => length(x, y) - 0.9 * r,
        1 => (length(x, y) - 0.72 * r).abs() - 0.2 * r,
        2 => sd_box(x, y, 0.7 * r, 0.7 * r),
        3 => sd_box(x, y, 0.62 * r, 0.62 * r).abs() - 0.16 * r,
        4 => sd_triangle(x, y, 0.85 * r),
        5 => sd_box(x, y, 0.9 * r, 0.26 * r).min(sd_box(x, y, 0.26 * r, 0.9 * r)),
        6 => sd_star5(x, y, 0.98 * r, 0.45),
        7 => sd_box(x, y, 0.95 * r, 0.28 * r),
        8 => sd_box(x, y, 0.28 * r, 0.95 * r),
        _ => (length(x, y) - 0.9 * r).max(-(length(x - 0.45 * r, y) - 0.72 * r)),
    }
}

fn colour(rng: &mut Rng) -> [f32; 3] {
    [rng.uniform(), rng.uniform(), rng.uniform()]
}

fn distance(a: [f32; 3], b: [f32; 3]) -> f32 {
    length(length(a[0] - b[0], a[1] - b[1]), a[2] - b[2])
}

/// Renders one image of class `class` into `out` (3072 bytes, CHW).
pub(crate) fn render(class: usize, rng: &mut Rng, out: &mut [u8], s: &mut Scratch) {
    s.value.clear();
    s.value.resize(3 * PLANE, 0.0);

    // Background: colour + per-channel gradient + a luminance texture of two 1-D waves.
    let bg = colour(rng);
    let mut grad = [[0.0f32; 2]; 3];
    for g in &mut grad {
        *g = [uniform(rng, -0.25, 0.25), uniform(rng, -0.25, 0.25)];
    }
    let mut wave = [[0.0f32; SIDE]; 2];
    for w in &mut wave {
        let amp = uniform(rng, 0.0, 0.12);
        let freq = uniform(rng, 0.1, 0.8);
        let phase = uniform(rng, 0.0, std::f32::consts::TAU);
        for (i, v) in w.iter_mut().enumerate() {
            *v = amp * sin_cos(freq * i as f32 + phase).0;
        }
    }
    for (c, plane) in s.value.chunks_exact_mut(PLANE).enumerate() {
        for (y, row) in plane.chunks_exact_mut(SIDE).enumerate() {
            let fy = y as f32 / SIDE as f32 - 0.5;
            for (x, v) in row.iter_mut().enumerate() {
                let fx = x as f32 / SIDE as f32 - 0.5;
                *v = bg[c] + grad[c][0] * fx + grad[c][1] * fy + wave[0][x] + wave[1][y];
            }
        }
    }

    // A fill colour clearly different from the background.
    let mut fg = colour(rng);
    let mut tries = 0;
    while distance(fg, bg) < 0.5 && tries < 16 {
        fg = colour(rng);
        tries += 1;
    }
    if distance(fg, bg) < 0.5 {
        fg = [1.0 - bg[0], 1.0 - bg[1], 1.0 - bg[2]];
    }

    // Geometry.
    let r = uniform(rng, 7.0, 13.0);
    let lo = r + 1.0;
    let hi = SIDE as f32 - r - 1.0;
    let (cx, cy) = (uniform(rng, lo, hi), uniform(rng, lo, hi));
    let angle = if class == 7 || class == 8 {
        uniform(rng, -25.0, 25.0).to_radians()
    } else {
        uniform(rng, 0.0, std::f32::consts::TAU)
    };
    let (sin, cos) = sin_cos(angle);
    let reach = r + 2.0;
    let x0 = (cx - reach).floor().max(0.0) as usize;
    let x1 = ((cx + reach).ceil().max(0.0) as usize).min(SIDE);
    let y0 = (cy - reach).floor().max(0.0) as usize;
    let y1 = ((cy + reach).ceil().max(0.0) as usize).min(SIDE);
    for y in y0..y1 {
        let dy = y as f32 + 0.5 - cy;
        for x in x0..x1 {
            let dx = x as f32 + 0.5 - cx;
            // Rotate the pixel into the shape's frame.
            let (lx, ly) = (cos * dx + sin * dy, -sin * dx + cos * dy);
            let cover = (0.5 - sdf(class, lx, ly, r)).clamp(0.0, 1.0);
            if cover > 0.0 {
                let i = y * SIDE + x;
                for (c, &f) in fg.iter().enumerate() {
                    let v = &mut s.value[c * PLANE + i];
                    *v += (f - *v) * cover;
                }
            }
        }
    }

    // An occasional occluder, kept away from the shape's centre so the class stays visible.
    if rng.bernoulli(0.3) {
        let (w, h) = (2 + rng.below(5), 2 + rng.below(5));
        let ox = rng.below(SIDE - w + 1);
        let oy = rng.below(SIDE - h + 1);
        let col = colour(rng);
        let (mx, my) = (ox as f32 + w as f32 / 2.0, oy as f32 + h as f32 / 2.0);
        let clear = r * 0.8 + (w.max(h) as f32) / 2.0;
        if length(mx - cx, my - cy) > clear {
            for (c, &v) in col.iter().enumerate() {
                for y in oy..oy + h {
                    s.value[c * PLANE + y * SIDE + ox..c * PLANE + y * SIDE + ox + w].fill(v);
                }
            }
        }
    }

    let sigma = uniform(rng, 0.01, 0.08) / TRI_NOISE_STD;
    let mut noise = Noise::new(rng);
    for (o, &v) in out.iter_mut().zip(&s.value) {
        *o = to_u8(v + sigma * noise.next());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdfs_have_the_right_sign() {
        for class in 0..10 {
            // Far away is outside; for all but the ring, frame and crescent the centre is inside.
            assert!(sdf(class, 30.0, 30.0, 10.0) > 0.0, "class {class}");
            let centre = sdf(class, 0.0, 0.0, 10.0);
            if [1, 3, 9].contains(&class) {
                assert!(centre > 0.0, "class {class} has a hole: {centre}");
            } else {
                assert!(centre < 0.0, "class {class}: {centre}");
            }
        }
        // Triangle apex up: a point just below the top is inside, just above the base corners not.
        assert!(sd_triangle(0.0, -6.0, 8.0) < 0.0);
        assert!(sd_triangle(-7.5, -6.0, 8.0) > 0.0);
        // Star: a tip is inside, the notch between two tips is outside.
        assert!(sd_star5(0.0, -8.5, 9.8, 0.45) < 0.0);
        assert!(sd_star5(0.0, 8.0, 9.8, 0.45) > 0.0);
    }
}
