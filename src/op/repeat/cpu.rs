//! repeat's CPU twin (docs/SPEC.md "repeat").

use crate::cpu::parallel::par_tasks;
use crate::dtype::Element;
use crate::shape::{GqaLayout, RepeatShape};

/// `repeat` (docs/SPEC.md, "repeat"): `dst[n, h, i] = src[n, hk(h), i]`.
pub(crate) fn repeat<E: Element>(
    threads: usize,
    shape: &RepeatShape,
    layout: GqaLayout,
    src: &[E],
    dst: &mut [E],
) {
    let (h_n, k) = (shape.dst_heads(), shape.dim());
    let cost = dst.len();
    par_tasks(threads, dst, h_n * k, cost, |rows, out| {
        for (n, out) in rows.zip(out.chunks_mut(h_n * k)) {
            for h in 0..h_n {
                let from = shape.src_index(layout, n, h, 0);
                out[h * k..][..k].copy_from_slice(&src[from..from + k]);
            }
        }
    });
}
