//! record's CPU twin (docs/SPEC.md "record"), line for line: arithmetic is f32 in the
//! SPEC's order (`S*g`, then `S + k*delta`), so replaying a f32 tape reproduces record's
//! state bit for bit. It validates nothing: the host call checks lengths first.

use super::RecordInputs;
use crate::cpu::parallel::{dims, is_live, par_tasks, scatter_heads, widen_into, HeadOutputs};
use crate::dtype::Element;
use crate::shape::{GdnShape, GqaLayout};

/// State rows that record advances together, one SIMD lane per row: the dot products
/// over `Dk` run in their sequential order within each row, so the lanes change no
/// rounding, but their dependency chains overlap instead of queueing one after another.
const RECORD_ROWS: usize = 16;

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
