//! conv_commit's CPU twin (docs/SPEC.md "conv_commit").

use crate::cpu::parallel::par_tasks;
use crate::dtype::Element;
use crate::shape::ConvShape;

/// `conv_commit` (docs/SPEC.md, "conv_commit"): each layer's window row `(b, c)` becomes
/// the last `K - 1` values of `window[b, c, :] ++ x[b, 0..a, c]`, in place, with
/// `a = min(accepted[b], T)` (the kernel's clamp; the host calls refuse `a > T` first).
/// It only moves values: every bit is kept.
pub(crate) fn conv_commit<E: Element>(
    threads: usize,
    shape: &ConvShape,
    x: &[E],
    accepted: &[u32],
    window: &mut [E],
) {
    let width = shape.window_width();
    let seq_len = shape.channels() * width; // one sequence's rows
    let layer_len = shape.batch() * seq_len;
    for l in 0..shape.layers() {
        let start = shape.window_row_in_layer(l, 0, 0);
        let layer = &mut window[start..start + layer_len];
        par_tasks(threads, layer, seq_len, layer_len, |seqs, out| {
            for (b, rows) in seqs.zip(out.chunks_mut(seq_len)) {
                let a = (accepted[b] as usize).min(shape.steps());
                // The first `kept` new values are old ones, shifted down by `a`; the rest
                // are the accepted steps of x, the newest last.
                let kept = width.saturating_sub(a);
                for (c, row) in rows.chunks_exact_mut(width).enumerate() {
                    row.copy_within(width - kept.., 0);
                    for (j, v) in row.iter_mut().enumerate().skip(kept) {
                        *v = x[shape.x_index_in_layer(l, b, a + j - width, c)];
                    }
                }
            }
        });
    }
}
