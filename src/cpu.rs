//! The CPU reference backend: SPEC.md's record, replay and repeat, line for line.
//!
//! Each function is the CPU twin of the WGSL kernel of the same name: the same
//! arguments in the same order as the kernel's bindings, so a test can swap one for
//! the other one stage at a time. Arithmetic is f32 and follows the SPEC's order
//! (`S*g`, then `S + k*delta`), so on the CPU replaying a f32 tape reproduces record's
//! state bit for bit. Work is spread over threads by (sequence, value head), which
//! makes this backend a usable fallback device, not only an oracle.
//!
//! These functions validate nothing: [`crate::Backend`] checks lengths first.

use crate::dtype::Element;
use crate::shape::{GdnShape, GqaLayout, RepeatShape};
use std::ops::Range;

/// Threads to use: the machine's parallelism, or `DELTATAPE_CPU_THREADS` when set.
fn thread_count() -> usize {
    std::env::var("DELTATAPE_CPU_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Split `out` into consecutive chunks of `chunk_len` ("tasks") and run `work(first
/// task index, chunks)` on contiguous groups of tasks, one group per thread.
/// Returns the per-group results in task order.
fn par_tasks<T: Send, R: Send>(
    out: &mut [T],
    chunk_len: usize,
    work: impl Fn(Range<usize>, &mut [T]) -> R + Sync,
) -> Vec<R> {
    let tasks = if chunk_len == 0 {
        0
    } else {
        out.len() / chunk_len
    };
    let threads = thread_count().min(tasks).max(1);
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
struct HeadOutputs<A, P> {
    head: usize,
    y: Vec<A>,
    delta: Vec<P>,
}

/// `gated_delta_step_record` (SPEC.md, "record").
#[allow(clippy::too_many_arguments)]
pub fn record<A: Element, S: Element, P: Element>(
    shape: &GdnShape,
    layout: GqaLayout,
    q: &[A],
    k: &[A],
    v: &[A],
    g: &[A],
    beta: &[A],
    mask: Option<&[u32]>,
    state_in: &[S],
    y: &mut [A],
    state_out: &mut [S],
    delta: &mut [P],
) {
    let (t_len, hv_n, dv_n, dk) = (
        shape.steps(),
        shape.value_heads(),
        shape.value_dim(),
        shape.key_dim(),
    );
    let head_len = dv_n * dk;
    let groups = par_tasks(state_out, head_len, |heads, out| {
        let mut s = vec![0f32; head_len];
        let mut kk = vec![0f32; dk];
        let mut qq = vec![0f32; dk];
        let mut results = Vec::with_capacity(heads.len());
        for (head, out) in heads.zip(out.chunks_mut(head_len)) {
            let (b, hv) = (head / hv_n, head % hv_n);
            let hk = shape.key_head(layout, hv);
            widen_into(&mut s, &state_in[shape.state_row(b, hv, 0)..][..head_len]);
            let mut ys = vec![A::default(); t_len * dv_n];
            let mut ds = vec![P::default(); t_len * dv_n];
            for t in 0..t_len {
                if !is_live(mask, shape.mask_index(b, t)) {
                    continue; // y and delta stay zero, S unchanged
                }
                widen_into(&mut kk, &k[shape.qk_row(b, t, hk)..][..dk]);
                widen_into(&mut qq, &q[shape.qk_row(b, t, hk)..][..dk]);
                let gi = shape.gate_index(b, t, hv);
                let (gt, bt) = (g[gi].to_f32(), beta[gi].to_f32());
                for dv in 0..dv_n {
                    let row = &mut s[dv * dk..][..dk];
                    let mut kv = 0f32;
                    for (si, ki) in row.iter_mut().zip(&kk) {
                        *si *= gt;
                        kv += *si * ki;
                    }
                    let d = (v[shape.v_index(b, t, hv, dv)].to_f32() - kv) * bt;
                    let mut out_y = 0f32;
                    for ((si, ki), qi) in row.iter_mut().zip(&kk).zip(&qq) {
                        *si = *si + ki * d;
                        out_y += *si * qi;
                    }
                    ys[t * dv_n + dv] = A::from_f32(out_y);
                    ds[t * dv_n + dv] = P::from_f32(d);
                }
            }
            for (o, si) in out.iter_mut().zip(&s) {
                *o = S::from_f32(*si);
            }
            results.push(HeadOutputs {
                head,
                y: ys,
                delta: ds,
            });
        }
        results
    });
    for head in groups.into_iter().flatten() {
        let (b, hv) = (head.head / hv_n, head.head % hv_n);
        for t in 0..t_len {
            let at = shape.v_index(b, t, hv, 0);
            y[at..at + dv_n].copy_from_slice(&head.y[t * dv_n..][..dv_n]);
            delta[at..at + dv_n].copy_from_slice(&head.delta[t * dv_n..][..dv_n]);
        }
    }
}

/// `state_replay` (SPEC.md, "replay"): fold the first `accepted[b]` steps of the tape
/// onto the snapshot.
#[allow(clippy::too_many_arguments)]
pub fn replay<A: Element, S: Element, P: Element>(
    shape: &GdnShape,
    tape_delta: &[P],
    tape_k: &[A],
    tape_g: &[A],
    snapshot: &[S],
    mask: Option<&[u32]>,
    accepted: &[u32],
    state_out: &mut [S],
) {
    let (hv_n, dv_n, dk) = (shape.value_heads(), shape.value_dim(), shape.key_dim());
    let head_len = dv_n * dk;
    par_tasks(state_out, head_len, |heads, out| {
        let mut s = vec![0f32; head_len];
        let mut kk = vec![0f32; dk];
        for (head, out) in heads.zip(out.chunks_mut(head_len)) {
            let (b, hv) = (head / hv_n, head % hv_n);
            widen_into(&mut s, &snapshot[shape.state_row(b, hv, 0)..][..head_len]);
            for t in 0..accepted[b] as usize {
                if !is_live(mask, shape.mask_index(b, t)) {
                    continue;
                }
                widen_into(&mut kk, &tape_k[shape.tape_k_row(b, t, hv)..][..dk]);
                let gt = tape_g[shape.gate_index(b, t, hv)].to_f32();
                for dv in 0..dv_n {
                    let d = tape_delta[shape.v_index(b, t, hv, dv)].to_f32();
                    for (si, ki) in s[dv * dk..][..dk].iter_mut().zip(&kk) {
                        *si = *si * gt + ki * d;
                    }
                }
            }
            for (o, si) in out.iter_mut().zip(&s) {
                *o = S::from_f32(*si);
            }
        }
    });
}

/// `repeat` (SPEC.md, "repeat"): `dst[n, h, i] = src[n, hk(h), i]`.
pub fn repeat<E: Element>(shape: &RepeatShape, layout: GqaLayout, src: &[E], dst: &mut [E]) {
    let (h_n, k) = (shape.dst_heads(), shape.dim());
    par_tasks(dst, h_n * k, |rows, out| {
        for (n, out) in rows.zip(out.chunks_mut(h_n * k)) {
            for h in 0..h_n {
                let from = shape.src_index(layout, n, h, 0);
                out[h * k..][..k].copy_from_slice(&src[from..from + k]);
            }
        }
    });
}
