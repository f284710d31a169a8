//! `synthetic-digits`: MNIST-shaped (1x28x28) rendered digit glyphs.
//!
//! Each digit is a handful of strokes (lines, elliptic arcs, a Bézier curve) in a unit box,
//! with per-class style variants (a `1` with or without flag and foot, an open or closed `4`,
//! a `7` with or without bar, a straight or curved tail on the `9`). Per image: a smooth wobble of
//! the control points, a random affine map (rotation ±18°, scale, aspect, shear, translation
//! anywhere the glyph fits), an anti-aliased stroke of random width and brightness, a dim
//! background, 0–3 distractor dots or scratches, and pixel noise.

use crossbow_tensor::Rng;

use super::raster::{Noise, TRI_NOISE_STD, sin_cos, splat_segment, to_u8, uniform};

/// Image side.
pub(crate) const SIDE: usize = 28;

/// Reusable per-thread buffers.
#[derive(Default)]
pub(crate) struct Scratch {
    points: Vec<[f32; 2]>,
    /// End (exclusive) of each stroke in `points`.
    ends: Vec<usize>,
    dmin2: Vec<f32>,
    value: Vec<f32>,
}

struct Glyph<'a> {
    s: &'a mut Scratch,
}

impl Glyph<'_> {
    fn start(&mut self) {
        if self.s.ends.last().copied().unwrap_or(0) != self.s.points.len() {
            self.s.ends.push(self.s.points.len());
        }
    }
    fn to(&mut self, x: f32, y: f32) {
        self.s.points.push([x, y]);
    }
    fn line(&mut self, pts: &[[f32; 2]]) {
        self.start();
        for p in pts {
            self.to(p[0], p[1]);
        }
    }
    /// Elliptic arc, angles in degrees (y points down, so 270° is the top), continuing the
    /// current stroke.
    fn arc(&mut self, cx: f32, cy: f32, rx: f32, ry: f32, a0: f32, a1: f32) {
        let steps = (((a1 - a0).abs() / 20.0).ceil() as usize).max(2);
        for k in 0..=steps {
            let a = (a0 + (a1 - a0) * k as f32 / steps as f32).to_radians();
            let (s, c) = sin_cos(a);
            self.to(cx + rx * c, cy + ry * s);
        }
    }
    /// Quadratic Bézier from the given start, continuing the current stroke.
    fn bezier(&mut self, p0: [f32; 2], p1: [f32; 2], p2: [f32; 2]) {
        let steps = 8;
        for k in 0..=steps {
            let t = k as f32 / steps as f32;
            let u = 1.0 - t;
            self.to(
                u * u * p0[0] + 2.0 * u * t * p1[0] + t * t * p2[0],
                u * u * p0[1] + 2.0 * u * t * p1[1] + t * t * p2[1],
            );
        }
    }
    fn finish(&mut self) {
        self.start();
    }
}

/// Writes the strokes of `digit` (unit box, x in about ±0.32, y in ±0.5, y down).
fn glyph(digit: usize, rng: &mut Rng, s: &mut Scratch) {
    s.points.clear();
    s.ends.clear();
    let mut g = Glyph { s };
    match digit {
        0 => {
            g.start();
            g.arc(0.0, 0.0, 0.30, 0.48, 0.0, 360.0);
        }
        1 => {
            if rng.bernoulli(0.6) {
                g.line(&[[-0.12, -0.37], [0.02, -0.48], [0.0, 0.48]]);
            } else {
                g.line(&[[0.02, -0.48], [0.0, 0.48]]);
            }
            if rng.bernoulli(0.3) {
                g.line(&[[-0.15, 0.48], [0.15, 0.48]]);
            }
        }
        2 => {
            g.start();
            g.arc(0.0, -0.21, 0.27, 0.26, 195.0, 380.0);
            g.to(-0.28, 0.48);
            g.to(0.31, 0.48);
        }
        3 => {
            g.start();
            g.arc(0.0, -0.24, 0.24, 0.23, 200.0, 450.0);
            g.arc(0.0, 0.23, 0.27, 0.25, 270.0, 520.0);
        }
        4 => {
            if rng.bernoulli(0.5) {
                g.line(&[[0.14, 0.48], [0.14, -0.48], [-0.30, 0.16], [0.32, 0.16]]);
            } else {
                g.line(&[[-0.22, -0.48], [-0.28, 0.14], [0.32, 0.14]]);
                g.line(&[[0.14, -0.30], [0.14, 0.48]]);
            }
        }
        5 => {
            g.line(&[[0.29, -0.48], [-0.18, -0.48], [-0.22, -0.05]]);
            g.arc(0.0, 0.19, 0.27, 0.28, 215.0, 505.0);
        }
        6 => {
            g.start();
            g.bezier([0.22, -0.48], [-0.30, -0.36], [-0.27, 0.20]);
            g.arc(0.0, 0.20, 0.27, 0.27, 180.0, 540.0);
        }
        7 => {
            g.line(&[[-0.30, -0.48], [0.30, -0.48], [-0.06, 0.48]]);
            if rng.bernoulli(0.3) {
                g.line(&[[-0.10, 0.02], [0.20, 0.02]]);
            }
        }
        8 => {
            g.start();
            g.arc(0.0, -0.25, 0.21, 0.22, 0.0, 360.0);
            g.start();
            g.arc(0.0, 0.24, 0.26, 0.25, 0.0, 360.0);
        }
        _ => {
            g.start();
            g.arc(0.0, -0.20, 0.25, 0.26, 0.0, 360.0);
            g.start();
            if rng.bernoulli(0.5) {
                g.to(0.25, -0.20);
                g.to(0.13, 0.48);
            } else {
                g.bezier([0.25, -0.20], [0.27, 0.32], [-0.06, 0.48]);
            }
        }
    }
    g.finish();
}

/// Renders one image of class `digit` into `out` (784 bytes).
pub(crate) fn render(digit: usize, rng: &mut Rng, out: &mut [u8], s: &mut Scratch) {
    let n = SIDE * SIDE;
    glyph(digit, rng, s);

    // Smooth wobble of the control points (like a hand that is not quite steady).
    let (ax, ay) = (uniform(rng, 0.0, 0.035), uniform(rng, 0.0, 0.035));
    let (fx, fy) = (uniform(rng, 2.0, 5.0), uniform(rng, 2.0, 5.0));
    let (px, py) = (uniform(rng, 0.0, std::f32::consts::TAU), uniform(rng, 0.0, std::f32::consts::TAU));
    // Affine map: scale (glyph height in pixels), aspect, shear, rotation.
    let height = uniform(rng, 16.0, 22.0);
    let sx = height * uniform(rng, 0.8, 1.2);
    let sy = height;
    let shear = uniform(rng, -0.3, 0.3);
    let (sin, cos) = sin_cos(uniform(rng, -18.0, 18.0).to_radians());
    let (mut lo_x, mut lo_y, mut hi_x, mut hi_y) = (f32::MAX, f32::MAX, f32::MIN, f32::MIN);
    for p in s.points.iter_mut() {
        let (ux, uy) = (p[0], p[1]);
        let wx = ux + ax * sin_cos(fy * uy + px).0;
        let wy = uy + ay * sin_cos(fx * ux + py).0;
        let x = sx * (wx + shear * wy);
        let y = sy * wy;
        let (rx, ry) = (cos * x - sin * y, sin * x + cos * y);
        *p = [rx, ry];
        lo_x = lo_x.min(rx);
        lo_y = lo_y.min(ry);
        hi_x = hi_x.max(rx);
        hi_y = hi_y.max(ry);
    }
    let half_width = uniform(rng, 0.9, 1.9);
    // Translate so the glyph lies anywhere it fits (centred when it does not).
    let margin = half_width + 0.5;
    let place = |lo: f32, hi: f32, rng: &mut Rng| {
        let room = SIDE as f32 - 2.0 * margin - (hi - lo);
        let offset = if room > 0.0 { uniform(rng, 0.0, room) } else { room / 2.0 };
        margin + offset - lo
    };
    let tx = place(lo_x, hi_x, rng);
    let ty = place(lo_y, hi_y, rng);
    for p in s.points.iter_mut() {
        p[0] += tx;
        p[1] += ty;
    }

    // Rasterise the strokes: distance field, then anti-aliased coverage.
    s.dmin2.clear();
    s.dmin2.resize(n, f32::MAX);
    let reach = half_width + 1.0;
    let mut begin = 0;
    for &end in &s.ends {
        let stroke = &s.points[begin..end];
        if stroke.len() == 1 {
            splat_segment(&mut s.dmin2, SIDE, SIDE, stroke[0], stroke[0], reach);
        }
        for seg in stroke.windows(2) {
            splat_segment(&mut s.dmin2, SIDE, SIDE, seg[0], seg[1], reach);
        }
        begin = end;
    }
    let ink = uniform(rng, 0.7, 1.0);
    let background = uniform(rng, 0.0, 0.12);
    s.value.clear();
    s.value.extend(s.dmin2.iter().map(|&d2| {
        let cover = (half_width + 0.5 - d2.sqrt()).clamp(0.0, 1.0);
        background + (ink - background) * cover
    }));

    // Distractors: faint dots and short thin scratches, drawn under the stroke's brightness.
    let distractors = [0usize, 0, 1, 1, 2, 3][rng.below(6)];
    for _ in 0..distractors {
        s.dmin2.fill(f32::MAX);
        let c = [uniform(rng, 0.0, 28.0), uniform(rng, 0.0, 28.0)];
        let (radius, end) = if rng.bernoulli(0.5) {
            (uniform(rng, 0.7, 1.6), c)
        } else {
            let len = uniform(rng, 2.5, 6.0);
            let (sa, ca) = sin_cos(uniform(rng, 0.0, std::f32::consts::TAU));
            (uniform(rng, 0.3, 0.6), [c[0] + len * ca, c[1] + len * sa])
        };
        let level = uniform(rng, 0.25, 0.6);
        splat_segment(&mut s.dmin2, SIDE, SIDE, c, end, radius + 1.0);
        for (v, &d2) in s.value.iter_mut().zip(&s.dmin2) {
            if d2 < (radius + 1.0) * (radius + 1.0) {
                let cover = (radius + 0.5 - d2.sqrt()).clamp(0.0, 1.0);
                *v = v.max(background + (level - background) * cover);
            }
        }
    }

    let sigma = uniform(rng, 0.02, 0.10) / TRI_NOISE_STD;
    let mut noise = Noise::new(rng);
    for (o, &v) in out.iter_mut().zip(&s.value) {
        *o = to_u8(v + sigma * noise.next());
    }
}
