//! What the CPU twins of the ops share: threads over tasks and over heads, widening,
//! masks, and the scatter of per-head outputs.

use crate::dtype::Element;
use crate::shape::GdnShape;
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
pub(crate) fn dims(shape: &GdnShape) -> (usize, usize, usize, usize) {
    let s = shape;
    (s.steps(), s.value_heads(), s.value_dim(), s.key_dim())
}

/// [`par_tasks`] over the heads `(b, hv)` of a state, each task one head's
/// `[Dv, Dk]` rows; the cost is the state's elements times the steps.
pub(crate) fn par_heads<S: Send, R: Send>(
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
pub(crate) fn widen_into<E: Element>(dst: &mut [f32], src: &[E]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s.to_f32();
    }
}

#[inline(always)]
pub(crate) fn is_live(mask: Option<&[u32]>, index: usize) -> bool {
    mask.is_none_or(|m| m[index] != 0)
}

/// One head's y and delta over all steps, `[T][Dv]`, scattered after the threads join.
pub(crate) struct HeadOutputs<A, P> {
    pub(crate) head: usize,
    pub(crate) y: Vec<A>,
    pub(crate) delta: Vec<P>,
}

/// Below this many element-steps of work per thread, spawning costs more than it saves.
const MIN_WORK_PER_THREAD: usize = 1 << 16;

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
