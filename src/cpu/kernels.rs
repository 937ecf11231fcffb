//! The CPU reference kernels: docs/SPEC.md's record, replay, repeat and conv_commit, line
//! for line.
//!
//! Each function is the CPU twin of the WGSL kernel of the same name: after the thread
//! count, the shape and the layout, one struct of the kernel's operands (`RecordArgs`,
//! ...: the rows of its operand table in `crate::operand`, each in its dtype), so a test
//! can swap one for the other one stage at a time. Arithmetic is f32 and follows the SPEC's order
//! (`S*g`, then `S + k*delta`), so on the CPU replaying a f32 tape reproduces record's
//! state bit for bit. Work is spread over threads by (sequence, value head), which
//! makes this backend a usable fallback device, not only an oracle.
//!
//! These functions validate nothing: the calls of `crate::ops` check lengths first.

use crate::dtype::Element;
use crate::ops::RecordInputs;
use crate::shape::{ConvShape, GdnShape, GqaLayout, RepeatShape};
use std::ops::Range;

/// Split `out` into consecutive chunks of `chunk_len` ("tasks") and run `work(first
/// task index, chunks)` on contiguous groups of tasks, one group per thread.
/// Returns the per-group results in task order. `cost` (about element-steps in all)
/// caps the threads so that each gets at least [`MIN_WORK_PER_THREAD`]; small calls
/// run inline on the caller's thread.
pub(crate) fn par_tasks<T: Send, R: Send>(
    threads: usize,
    out: &mut [T],
    chunk_len: usize,
    cost: usize,
    work: impl Fn(Range<usize>, &mut [T]) -> R + Sync,
) -> Vec<R> {
    let tasks = out.len().checked_div(chunk_len).unwrap_or(0);
    let threads = threads.min(tasks).min(cost / MIN_WORK_PER_THREAD).max(1);
    if threads == 1 {
        return vec![work(0..tasks, out)];
    }
    let per = tasks.div_ceil(threads);
    std::thread::scope(|scope| {
        let work = &work;
        let handles: Vec<_> = out
            .chunks_mut(per * chunk_len)
            .enumerate()
            .map(|(i, chunk)| {
                let first = i * per;
                let range = first..first + chunk.len() / chunk_len;
                scope.spawn(move || work(range, chunk))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}

/// (T, Hv, Dv, Dk).
fn dims(shape: &GdnShape) -> (usize, usize, usize, usize) {
    let s = shape;
    (s.steps(), s.value_heads(), s.value_dim(), s.key_dim())
}

/// [`par_tasks`] over the heads `(b, hv)` of a state, each task one head's
/// `[Dv, Dk]` rows; the cost is the state's elements times the steps.
fn par_heads<S: Send, R: Send>(
    threads: usize,
    shape: &GdnShape,
    state: &mut [S],
    work: impl Fn(Range<usize>, &mut [S]) -> R + Sync,
) -> Vec<R> {
    let cost = state.len().saturating_mul(shape.steps().max(1));
    let head_len = shape.value_dim() * shape.key_dim();
    par_tasks(threads, state, head_len, cost, work)
}

#[inline(always)]
fn widen_into<E: Element>(dst: &mut [f32], src: &[E]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s.to_f32();
    }
}

#[inline(always)]
fn is_live(mask: Option<&[u32]>, index: usize) -> bool {
    mask.is_none_or(|m| m[index] != 0)
}

/// One head's y and delta over all steps, `[T][Dv]`, scattered after the threads join.
pub(crate) struct HeadOutputs<A, P> {
    pub(crate) head: usize,
    pub(crate) y: Vec<A>,
    pub(crate) delta: Vec<P>,
}

/// State rows that record advances together, one SIMD lane per row: the dot products
/// over `Dk` run in their sequential order within each row, so the lanes change no
/// rounding, but their dependency chains overlap instead of queueing one after another.
const RECORD_ROWS: usize = 16;
/// Elements of one state row that replay keeps in registers across all its steps.
const REPLAY_LANES: usize = 32;
/// Below this many element-steps of work per thread, spawning costs more than it saves.
const MIN_WORK_PER_THREAD: usize = 1 << 16;

/// `gated_delta_step_record` (docs/SPEC.md, "record").
///
/// Per value head, the head's live steps' k and q are widened once; then rows are
/// advanced [`RECORD_ROWS`] at a time through every step with the block transposed to
/// `[Dk][rows]` in L1, so each arithmetic operation acts on one lane per row. Each row's
/// arithmetic is the SPEC's, in its order: `S *= g; kv += S*k` over `Dk` in order, then
/// `delta = (v - kv) * beta`, then `S = S + k*delta; y += S*q` over `Dk` in order. Rows
/// left over (`Dv % RECORD_ROWS`) take the same steps one row at a time.
pub(crate) fn record<A: Element, S: Element, P: Element, G: Element>(
    threads: usize,
    shape: &GdnShape,
    layout: GqaLayout,
    args: RecordArgs<'_, A, S, P, G>,
) {
    let RecordArgs {
        inputs:
            RecordInputs {
                q,
                k,
                v,
                g,
                beta,
                mask,
            },
        state_in,
        y,
        state_out,
        delta,
        tape_k_grouped,
        tape_g,
    } = args;
    if let Some(tape_k) = tape_k_grouped {
        tape_k.copy_from_slice(k);
    }
    if let Some(tape_g) = tape_g {
        tape_g.copy_from_slice(g);
    }
    let (t_len, hv_n, dv_n, dk) = dims(shape);
    let head_len = dv_n * dk;
    // Without state_out, the heads are split the same way over nothing (each head's
    // final state is dropped).
    let mut no_state = Vec::new();
    let writes_state = state_out.is_some();
    let (out_state, out_len) = match state_out {
        Some(out) => (out, head_len),
        None => {
            no_state.resize(shape.batch() * hv_n, S::default());
            (&mut no_state[..], 1)
        }
    };
    let cost = (shape.batch() * hv_n * head_len).saturating_mul(t_len.max(1));
    let groups = par_tasks(threads, out_state, out_len, cost, |heads, out| {
        let mut kk = vec![0f32; t_len * dk];
        let mut qq = vec![0f32; t_len * dk];
        let mut steps: Vec<RecordStep> = Vec::with_capacity(t_len);
        let mut block = vec![[0f32; RECORD_ROWS]; dk];
        let mut row = vec![0f32; dk];
        let mut results = Vec::with_capacity(heads.len());
        for (head, out) in heads.zip(out.chunks_mut(out_len)) {
            let (b, hv) = (head / hv_n, head % hv_n);
            let hk = shape.key_head(layout, hv);
            // The head's live steps, their k and q widened once.
            steps.clear();
            for t in 0..t_len {
                if !is_live(mask, shape.mask_index(b, t)) {
                    continue; // y and delta stay zero, S unchanged
                }
                let n = steps.len();
                widen_into(&mut kk[n * dk..][..dk], &k[shape.qk_row(b, t, hk)..][..dk]);
                widen_into(&mut qq[n * dk..][..dk], &q[shape.qk_row(b, t, hk)..][..dk]);
                let gi = shape.gate_index(b, t, hv);
                steps.push(RecordStep {
                    t,
                    g: g[gi].to_f32(),
                    beta: beta[gi].to_f32(),
                    v: shape.v_index(b, t, hv, 0),
                });
            }
            let (kk, qq) = (&kk[..steps.len() * dk], &qq[..steps.len() * dk]);
            let src = &state_in[shape.state_row(b, hv, 0)..][..head_len];
            let mut ys = vec![A::default(); t_len * dv_n];
            let mut ds = vec![P::default(); t_len * dv_n];
            let full = dv_n - dv_n % RECORD_ROWS;
            for dv0 in (0..full).step_by(RECORD_ROWS) {
                let rows = dv0 * dk..(dv0 + RECORD_ROWS) * dk;
                for (r, src_row) in src[rows.clone()].chunks_exact(dk).enumerate() {
                    for (lanes, x) in block.iter_mut().zip(src_row) {
                        lanes[r] = x.to_f32();
                    }
                }
                for (st, (k_t, q_t)) in steps
                    .iter()
                    .zip(kk.chunks_exact(dk).zip(qq.chunks_exact(dk)))
                {
                    let mut kv = [0f32; RECORD_ROWS];
                    for (lanes, &ki) in block.iter_mut().zip(k_t) {
                        for (s, acc) in lanes.iter_mut().zip(&mut kv) {
                            *s *= st.g;
                            *acc += *s * ki;
                        }
                    }
                    let vs = &v[st.v + dv0..][..RECORD_ROWS];
                    let mut d = [0f32; RECORD_ROWS];
                    for ((d, vi), kv) in d.iter_mut().zip(vs).zip(&kv) {
                        *d = (vi.to_f32() - kv) * st.beta;
                    }
                    let mut out_y = [0f32; RECORD_ROWS];
                    for ((lanes, &ki), &qi) in block.iter_mut().zip(k_t).zip(q_t) {
                        for ((s, acc), di) in lanes.iter_mut().zip(&mut out_y).zip(&d) {
                            *s += ki * di; // S = S + k*delta
                            *acc += *s * qi;
                        }
                    }
                    let at = st.t * dv_n + dv0;
                    for (o, x) in ys[at..at + RECORD_ROWS].iter_mut().zip(&out_y) {
                        *o = A::from_f32(*x);
                    }
                    for (o, x) in ds[at..at + RECORD_ROWS].iter_mut().zip(&d) {
                        *o = P::from_f32(*x);
                    }
                }
                if writes_state {
                    for (r, out_row) in out[rows].chunks_exact_mut(dk).enumerate() {
                        for (o, lanes) in out_row.iter_mut().zip(&block) {
                            *o = S::from_f32(lanes[r]);
                        }
                    }
                }
            }
            for dv in full..dv_n {
                widen_into(&mut row, &src[dv * dk..][..dk]);
                for (st, (k_t, q_t)) in steps
                    .iter()
                    .zip(kk.chunks_exact(dk).zip(qq.chunks_exact(dk)))
                {
                    let mut kv = 0f32;
                    for (si, ki) in row.iter_mut().zip(k_t) {
                        *si *= st.g;
                        kv += *si * ki;
                    }
                    let d = (v[st.v + dv].to_f32() - kv) * st.beta;
                    let mut out_y = 0f32;
                    for ((si, ki), qi) in row.iter_mut().zip(k_t).zip(q_t) {
                        *si += ki * d; // S = S + k*delta
                        out_y += *si * qi;
                    }
                    ys[st.t * dv_n + dv] = A::from_f32(out_y);
                    ds[st.t * dv_n + dv] = P::from_f32(d);
                }
                if writes_state {
                    for (o, si) in out[dv * dk..][..dk].iter_mut().zip(&row) {
                        *o = S::from_f32(*si);
                    }
                }
            }
            results.push(HeadOutputs {
                head,
                y: ys,
                delta: ds,
            });
        }
        results
    });
    scatter_heads(shape, groups.into_iter().flatten(), y, delta);
}

/// Each (b, hv) head's y and delta (`[T, Dv]` each) into the `[B, T, Hv, Dv]` outputs.
pub(crate) fn scatter_heads<A: Copy, P: Copy>(
    shape: &GdnShape,
    heads: impl IntoIterator<Item = HeadOutputs<A, P>>,
    y: &mut [A],
    delta: &mut [P],
) {
    let (hv_n, dv_n) = (shape.value_heads(), shape.value_dim());
    for head in heads {
        let (b, hv) = (head.head / hv_n, head.head % hv_n);
        for t in 0..shape.steps() {
            let at = shape.v_index(b, t, hv, 0);
            y[at..at + dv_n].copy_from_slice(&head.y[t * dv_n..][..dv_n]);
            delta[at..at + dv_n].copy_from_slice(&head.delta[t * dv_n..][..dv_n]);
        }
    }
}

/// record's operands (`RecordOperands`' rows, each in its dtype).
pub(crate) struct RecordArgs<'a, A, S, P, G> {
    /// q, k, v, g, beta and the step mask.
    pub inputs: RecordInputs<'a, A, G>,
    pub state_in: &'a [S],
    pub y: &'a mut [A],
    /// `None`: the final state is not written.
    pub state_out: Option<&'a mut [S]>,
    pub delta: &'a mut [P],
    /// `None`: the tape's copy of k is not written.
    pub tape_k_grouped: Option<&'a mut [A]>,
    /// `None`: the tape's copy of g is not written.
    pub tape_g: Option<&'a mut [G]>,
}

/// One live step of a head in record: its index, gate, beta and where its v row starts.
struct RecordStep {
    t: usize,
    g: f32,
    beta: f32,
    v: usize,
}

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
    threads: usize,
    shape: &GdnShape,
    layout: GqaLayout,
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

/// fold_record's operands (`FoldRecordOperands`' rows, each in its dtype).
pub(crate) struct FoldRecordArgs<'a, A, S, P, G> {
    /// q, k, v, g and beta; the mask must be `None` (fold_record's table has none: a
    /// masked draft replays the deferred commit, then records).
    pub inputs: RecordInputs<'a, A, G>,
    pub state: &'a mut [S],
    pub y: &'a mut [A],
    pub delta: &'a mut [P],
    pub tape_k_grouped: &'a mut [A],
    pub tape_g: &'a mut [G],
    pub pending_k_grouped: &'a [A],
    pub pending_g: &'a [G],
    pub accepted: &'a [u32],
    pub status: Option<&'a mut [u32]>,
}

/// fold_record (docs/SPEC.md): the deferred commit's replay of the pending tape
/// (`delta` as it holds on entry, `pending_k_grouped`, `pending_g`) onto `state` in
/// place, then record from the result, writing y and this draft's tape (`delta`,
/// `tape_k_grouped`, `tape_g`).
pub(crate) fn fold_record<A: Element, S: Element, P: Element, G: Element>(
    threads: usize,
    shape: &GdnShape,
    layout: GqaLayout,
    args: FoldRecordArgs<'_, A, S, P, G>,
) {
    let FoldRecordArgs {
        inputs,
        state,
        y,
        delta,
        tape_k_grouped,
        tape_g,
        pending_k_grouped,
        pending_g,
        accepted,
        status,
    } = args;
    debug_assert!(inputs.mask.is_none(), "fold_record takes no mask");
    let fold = ReplayArgs {
        tape_delta: &*delta,
        tape_k: TapeKeys::Grouped(pending_k_grouped),
        tape_g: pending_g,
        snapshot: None,
        accepted,
        state_out: &mut *state,
        mask: None,
        status,
    };
    replay(threads, shape, layout, fold);
    let draft = RecordArgs {
        inputs,
        state_in: state,
        y,
        state_out: None,
        delta,
        tape_k_grouped: Some(tape_k_grouped),
        tape_g: Some(tape_g),
    };
    record(threads, shape, layout, draft);
}

/// One row of replay: `dst = fold over steps i of (S = S*gg[i] + kk[i, :]*dd[i])`
/// starting from `src`, or from `dst` itself when there is no `src` (in place).
/// `kk` is `[steps][Dk]`.
#[inline(always)]
fn replay_row<S: Element>(src: Option<&[S]>, dst: &mut [S], kk: &[f32], gg: &[f32], dd: &[f32]) {
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
