//! replay's CPU twin (docs/SPEC.md "replay"). It validates nothing: the host call
//! checks lengths and counts first.

use crate::cpu::parallel::{dims, is_live, par_heads, widen_into};
use crate::dtype::Element;
use crate::shape::{GdnShape, GqaLayout};

/// Elements of one state row that replay keeps in registers across all its steps.
const REPLAY_LANES: usize = 32;

/// `state_replay` (docs/SPEC.md, "replay"): fold the first `accepted[b]` steps of the tape
/// onto the snapshot.
///
/// Per value head, the live steps' k, g and delta are gathered (and widened) once; then
/// each state row is read from the snapshot (or, with none, from `state_out`: in place)
/// [`REPLAY_LANES`] elements at a time, taken through every live step in registers
/// (`S = S*g + k*delta`, the SPEC's order) and stored once to `state_out`: the state
/// crosses memory exactly twice, as in a copy. The tape's k is expanded or at key heads
/// (through `layout`), [`TapeKeys`]. As on the GPU, a count above T is clamped and
/// recorded in `status`.
pub(crate) fn replay<A: Element, S: Element, P: Element, G: Element>(
    (threads, shape, layout): (usize, &GdnShape, GqaLayout),
    args: ReplayArgs<'_, A, S, P, G>,
) {
    let ReplayArgs {
        tape_delta,
        tape_k,
        tape_g,
        snapshot,
        accepted,
        state_out,
        mask,
        status,
    } = args;
    let (t_len, hv_n, dv_n, dk) = dims(shape);
    let head_len = dv_n * dk;
    if let Some(status) = status {
        for (flag, &a) in status.iter_mut().zip(accepted) {
            if a as usize > t_len {
                *flag = a;
            }
        }
    }
    let k_row = |b: usize, t: usize, hv: usize| match tape_k {
        TapeKeys::Expanded(k) => &k[shape.tape_k_row(b, t, hv)..][..dk],
        TapeKeys::Grouped(k) => &k[shape.qk_row(b, t, shape.key_head(layout, hv))..][..dk],
    };
    par_heads(threads, shape, state_out, |heads, out| {
        let mut kk = vec![0f32; t_len * dk];
        let mut gg = vec![0f32; t_len];
        // The live steps' deltas, `[Dv][live step]`: one row's deltas are contiguous.
        // (One slot per row at least, so that T = 0 still walks every row.)
        let stride = t_len.max(1);
        let mut dd = vec![0f32; dv_n * stride];
        for (head, out) in heads.zip(out.chunks_mut(head_len)) {
            let (b, hv) = (head / hv_n, head % hv_n);
            let mut n = 0;
            for t in 0..(accepted[b] as usize).min(t_len) {
                if !is_live(mask, shape.mask_index(b, t)) {
                    continue;
                }
                widen_into(&mut kk[n * dk..][..dk], k_row(b, t, hv));
                gg[n] = tape_g[shape.gate_index(b, t, hv)].to_f32();
                let ds = &tape_delta[shape.v_index(b, t, hv, 0)..][..dv_n];
                for (dv, x) in ds.iter().enumerate() {
                    dd[dv * stride + n] = x.to_f32();
                }
                n += 1;
            }
            let (kk, gg) = (&kk[..n * dk], &gg[..n]);
            let src = snapshot.map(|s| &s[shape.state_row(b, hv, 0)..][..head_len]);
            for (row, (dst_row, dd)) in out
                .chunks_exact_mut(dk)
                .zip(dd.chunks_exact(stride))
                .enumerate()
            {
                let src_row = src.map(|s| &s[row * dk..][..dk]);
                replay_row(src_row, dst_row, kk, gg, &dd[..n]);
            }
        }
    });
}

/// The tape's k as replay reads it.
#[derive(Clone, Copy)]
pub(crate) enum TapeKeys<'a, A> {
    /// `[B, T, Hv, Dk]`: expanded to value heads (`tape_k`).
    Expanded(&'a [A]),
    /// `[B, T, Hk, Dk]`: at key heads, as record read it (`tape_k_grouped`).
    Grouped(&'a [A]),
}

/// replay's operands (`ReplayOperands`' rows, each in its dtype; the table's `tape_k`
/// and `tape_k_grouped`, of which a call binds one, are [`TapeKeys`]).
pub(crate) struct ReplayArgs<'a, A, S, P, G> {
    pub tape_delta: &'a [P],
    pub tape_k: TapeKeys<'a, A>,
    pub tape_g: &'a [G],
    /// `None`: replay in place, from `state_out`.
    pub snapshot: Option<&'a [S]>,
    pub accepted: &'a [u32],
    pub state_out: &'a mut [S],
    pub mask: Option<&'a [u32]>,
    /// `None`: clamped counts are not flagged.
    pub status: Option<&'a mut [u32]>,
}

/// One row of replay: `dst = fold over steps i of (S = S*gg[i] + kk[i, :]*dd[i])`
/// starting from `src`, or from `dst` itself when there is no `src` (in place).
/// `kk` is `[steps][Dk]`.
#[inline(always)]
pub(crate) fn replay_row<S: Element>(
    src: Option<&[S]>,
    dst: &mut [S],
    kk: &[f32],
    gg: &[f32],
    dd: &[f32],
) {
    let dk = dst.len();
    let full = dk - dk % REPLAY_LANES;
    for (dst, c) in dst[..full]
        .chunks_exact_mut(REPLAY_LANES)
        .zip((0..full).step_by(REPLAY_LANES))
    {
        let mut acc = [0f32; REPLAY_LANES];
        let from: &[S] = match src {
            Some(src) => &src[c..c + REPLAY_LANES],
            None => dst,
        };
        for (a, x) in acc.iter_mut().zip(from) {
            *a = x.to_f32();
        }
        for ((k_t, &g), &d) in kk.chunks_exact(dk).zip(gg).zip(dd) {
            for (a, ki) in acc.iter_mut().zip(&k_t[c..c + REPLAY_LANES]) {
                *a = *a * g + ki * d;
            }
        }
        for (o, a) in dst.iter_mut().zip(&acc) {
            *o = S::from_f32(*a);
        }
    }
    for i in full..dk {
        let mut a = src.map_or(dst[i], |s| s[i]).to_f32();
        for ((k_t, &g), &d) in kk.chunks_exact(dk).zip(gg).zip(dd) {
            a = a * g + k_t[i] * d;
        }
        dst[i] = S::from_f32(a);
    }
}
