//! The backward-data pass of a stride-2 convolution as four stride-1 direct convolutions,
//! one per parity class ("phase") of the input pixels, without im2col.
//!
//! With stride 2, input row `y` is read by the kernel rows `ki` with `y + p_h − ki` even, at
//! output row `oy = (y + p_h − ki) / 2`. Every row of one parity `py = y mod 2` sees the same
//! kernel rows, so the gradient of the rows `y = 2i + py`, and likewise of the columns, is a
//! stride-1 correlation of `dy` with the sub-kernel of those taps (transposed
//! `c_in <-> c_out`, flipped): for a 3×3 kernel with padding 1, sub-kernels of 1×1, 1×2, 2×1
//! and 2×2, nine taps in all. That is the pass's own FLOP count, where a stride-1 convolution
//! over a zero-dilated `dy` would spend three quarters of its FMAs on zeros. The padding of a
//! phase is not symmetric (a 2-tap phase reads one row past the end of `dy`), which
//! [`Direct`]'s `eh`/`ew` express. Each phase runs the padded [`Direct`] kernels of this CPU
//! into a buffer, which is then interleaved into `dx`.
//!
//! The sum for an input pixel runs over `(c_out, ki, kj)` with the kernel rows and columns in
//! descending order; the im2col path (GEMM, then col2im) adds in another order, so the two
//! agree to rounding, and each is checked against the f64 definition.

use super::Conv2dGeom;
use super::direct::Direct;
use crate::cpu::{CpuCtx, chunks_mut_n, split_mut_by, split_ranges};

/// One parity class of the input pixels and the stride-1 convolution that gives its gradient.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Phase {
    /// Row and column parity of the input pixels this phase writes.
    py: usize,
    px: usize,
    /// The kernel rows and columns of its taps, in the order of the sub-kernel's taps
    /// (descending: the sub-kernel's first tap reads the lowest output row).
    kis: Vec<usize>,
    kjs: Vec<usize>,
    /// The sub-kernel's convolution of `dy[c_out, oh, ow]` into `[c_in, rows, cols]`.
    d: Direct,
}

/// The backward-data pass of a stride-2 convolution by phases, where every phase has a
/// padded direct kernel on this CPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Phases {
    phases: Vec<Phase>,
}

/// The kernel taps along one axis that read input positions of parity `q` (kernel `k`,
/// padding `p`, stride 2), in the sub-kernel's order, with the sub-kernel's leading padding,
/// its extra trailing padding against an `n_out`-long `dy` axis, and the phase's length on an
/// `n_in`-long input axis; `None` where the phase is empty or its padding would be negative.
fn axis(q: usize, k: usize, p: usize, n_in: usize, n_out: usize) -> Option<(Vec<usize>, usize, usize, usize)> {
    // Descending kernel index = ascending offset into dy: oy = i + (q + p − ki) / 2.
    let taps: Vec<usize> = (0..k).rev().filter(|ki| (q + p + ki).is_multiple_of(2)).collect();
    let len = n_in.checked_sub(q)?.div_ceil(2);
    let first = *taps.first()?;
    // The lowest offset, (q + p − ki_max) / 2, must be at most 0: a leading padding of its negation.
    let lead = first.checked_sub(q + p)? / 2;
    // Output rows of a stride-1 correlation: n_out + 2·lead + extra − taps + 1 = len.
    let extra = (len + taps.len()).checked_sub(1 + n_out + 2 * lead)?;
    (len >= 1).then_some((taps, lead, extra, len))
}

impl Phases {
    /// The phases of `g`'s backward-data pass: stride 2 along both axes, kernels at least 2×2
    /// (so that every phase has taps), the same leading padding in every phase (so that they
    /// share one padded copy of `dy`: 3×3 with padding 1, 2×2 and 4×4 without, ...), and each
    /// phase's rows at least 8 pixels wide with a padded direct kernel on this CPU; else
    /// `None` (the im2col path).
    pub(crate) fn of(g: &Conv2dGeom) -> Option<Phases> {
        if g.stride_h != 2 || g.stride_w != 2 || g.kernel_h < 2 || g.kernel_w < 2 || !super::direct::has_kernel() {
            return None;
        }
        let mut phases = Vec::with_capacity(4);
        for py in 0..2 {
            let (kis, ph, eh, _) = axis(py, g.kernel_h, g.pad_h, g.in_h, g.out_h())?;
            for px in 0..2 {
                let (kjs, pw, ew, _) = axis(px, g.kernel_w, g.pad_w, g.in_w, g.out_w())?;
                let d = Direct {
                    c: g.out_channels,
                    h: g.out_h(),
                    w: g.out_w(),
                    co: g.in_channels,
                    kh: kis.len(),
                    kw: kjs.len(),
                    ph,
                    pw,
                    s: 1,
                    eh,
                    ew,
                    pad_to: (0, 0),
                };
                if d.ow() < 8 || d.padded_rows().is_none() {
                    return None;
                }
                phases.push(Phase { py, px, kis: kis.clone(), kjs, d });
            }
        }
        // One padded copy of dy for all four: the same interior offset, the largest extent.
        if phases.iter().any(|p| (p.d.ph, p.d.pw) != (phases[0].d.ph, phases[0].d.pw)) {
            return None;
        }
        let dims = phases.iter().map(|p| p.d.padded_dims()).fold((0, 0), |a, b| (a.0.max(b.0), a.1.max(b.1)));
        for p in &mut phases {
            p.d.pad_to = dims;
        }
        Some(Phases { phases })
    }

    /// Floats of the packed weights of every phase.
    fn packed_len(&self) -> usize {
        self.phases.iter().map(|p| p.d.packed_len()).sum()
    }

    /// Floats of one phase's output buffer (the largest phase's).
    fn out_len(&self) -> usize {
        self.phases.iter().map(|p| p.d.co * p.d.oh() * p.d.ow()).max().unwrap_or(0)
    }

    /// Floats one thread group needs: the shared padded copy of `dy` (its zero padding kept
    /// across images) and the outputs of a row parity's two phases.
    fn group_len(&self) -> usize {
        self.phases[0].d.scratch_len() + 2 * self.out_len()
    }

    /// Workspace floats of [`Phases::run`] with `groups` thread groups.
    pub(crate) fn workspace_len(&self, groups: usize) -> usize {
        self.packed_len() + groups * self.group_len()
    }

    /// `dx = ` the input gradient of `g` for `dy`, with the weights `w` (`[c_out, c_in, kh, kw]`).
    pub(crate) fn run(&self, ctx: CpuCtx<'_>, g: &Conv2dGeom, dy: &[f32], w: &[f32], dx: &mut [f32], ws: &mut [f32]) {
        let (in_img, out_img) = (g.in_channels * g.in_h * g.in_w, g.out_channels * g.out_h() * g.out_w());
        let groups = ctx.groups(g.batch);
        let (mut packed, rest) = ws.split_at_mut(self.packed_len());
        let (c_in, taps) = (g.in_channels, g.kernel_h * g.kernel_w);
        let mut wps: Vec<&[f32]> = Vec::with_capacity(self.phases.len());
        for p in &self.phases {
            let (wp, tail) = std::mem::take(&mut packed).split_at_mut(p.d.packed_len());
            let kw = p.kjs.len();
            // Direct's output channel `o` is dx's channel, its input channel `c` is dy's.
            let weight = |o: usize, c: usize, t: usize| w[(c * c_in + o) * taps + p.kis[t / kw] * g.kernel_w + p.kjs[t % kw]];
            p.d.pack(weight, wp);
            wps.push(wp);
            packed = tail;
        }
        let ranges = split_ranges(g.batch, groups);
        let dxs = split_mut_by(dx, &ranges, in_img);
        let bufs = chunks_mut_n(rest, groups, self.group_len());
        let items: Vec<_> = ranges.into_iter().zip(dxs).zip(bufs).collect();
        let copy_len = self.phases[0].d.scratch_len();
        ctx.for_each(items, |((r, dxg), buf)| {
            // The padding of the copy stays zero: each image rewrites only the interior.
            buf.fill(0.0);
            let (xp, outs) = buf.split_at_mut(copy_len);
            let (even, odd) = outs.split_at_mut(self.out_len());
            for (i, n) in r.enumerate() {
                self.phases[0].d.pad_into(&dy[n * out_img..(n + 1) * out_img], xp);
                let dst = &mut dxg[i * in_img..(i + 1) * in_img];
                // The phases in (py, px) order: each row parity's two column phases, then
                // their rows interleaved into dx.
                for (pair, wpair) in self.phases.chunks_exact(2).zip(wps.chunks_exact(2)) {
                    let (a, b) = (&pair[0], &pair[1]);
                    let (oa, ob) = (&mut even[..c_in * a.d.oh() * a.d.ow()], &mut odd[..c_in * b.d.oh() * b.d.ow()]);
                    a.d.run_on_copy(xp, wpair[0], None, oa);
                    b.d.run_on_copy(xp, wpair[1], None, ob);
                    interleave(oa, ob, a.d.oh(), a.py, (g.in_h, g.in_w), dst);
                }
            }
        });
    }
}

/// Writes the gradients of a row parity `py`'s two column phases, `even[c, rows, ⌈w/2⌉]`
/// and `odd[c, rows, ⌊w/2⌋]`, into the rows `2i + py` of `dx[c, h, w]`, alternating.
fn interleave(even: &[f32], odd: &[f32], rows: usize, py: usize, (h, w): (usize, usize), dx: &mut [f32]) {
    let (ce, co) = (w.div_ceil(2), w / 2);
    for (c, (pe, po)) in even.chunks_exact(rows * ce).zip(odd.chunks_exact(rows * co)).enumerate() {
        for (i, (re, ro)) in pe.chunks_exact(ce).zip(po.chunks_exact(co)).enumerate() {
            let line = &mut dx[(c * h + 2 * i + py) * w..][..w];
            for (d, (e, o)) in line.chunks_exact_mut(2).zip(re.iter().zip(ro)) {
                d[0] = *e;
                d[1] = *o;
            }
            if w % 2 == 1 {
                line[w - 1] = re[ce - 1];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3×3 kernel with padding 1 splits into 1×1, 1×2, 2×1 and 2×2 sub-kernels whose taps
    /// read `dy` at the offsets the definition gives, with one extra trailing row or column
    /// for the odd phases.
    #[test]
    fn a_padded_three_by_three_kernel_splits_into_nine_taps() {
        assert_eq!(axis(0, 3, 1, 32, 16), Some((vec![1], 0, 0, 16)));
        assert_eq!(axis(1, 3, 1, 32, 16), Some((vec![2, 0], 0, 1, 16)));
        // An odd input: 8 even rows, 7 odd ones.
        assert_eq!(axis(0, 3, 1, 15, 8), Some((vec![1], 0, 0, 8)));
        assert_eq!(axis(1, 3, 1, 15, 8), Some((vec![2, 0], 0, 0, 7)));
        // Without padding: row 2i reads kernel rows 2 and 0 at dy rows i − 1 and i.
        assert_eq!(axis(0, 3, 0, 33, 16), Some((vec![2, 0], 1, 0, 17)));
        // A phase with no taps, or one that would need negative padding, is refused.
        assert_eq!(axis(1, 1, 0, 32, 16), None);
        assert_eq!(axis(0, 2, 2, 32, 17), None);
    }

    /// Every tap of the kernel belongs to exactly one phase.
    #[test]
    fn the_phases_cover_every_tap_once() {
        let g = Conv2dGeom::square(2, 16, (32, 32), 32, 3, 2, 1, false);
        let Some(ph) = Phases::of(&g) else {
            return eprintln!("skipped: no direct kernel on this CPU");
        };
        let mut seen = vec![0; 9];
        for p in &ph.phases {
            for ki in &p.kis {
                for kj in &p.kjs {
                    seen[ki * 3 + kj] += 1;
                }
            }
        }
        assert_eq!(seen, vec![1; 9]);
    }
}
