//! record's CPU twin (docs/SPEC.md "record"), line for line: arithmetic is f32 in the
//! SPEC's order (`S*g`, then `S + k*delta`), so replaying a f32 tape reproduces record's
//! state bit for bit. Packed sequences run one at a time on their own tokens and state,
//! so a sequence's results are, bit for bit, record's on that sequence alone. It
//! validates nothing: the host call checks lengths first.

use super::RecordInputs;
use crate::cpu::parallel::{dims, is_live, par_tasks, scatter_heads, widen_into, HeadOutputs};
use crate::dtype::Element;
use crate::error::Result;
use crate::shape::{GdnShape, GqaLayout, VarlenShape};

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
    (threads, shape, layout): (usize, &GdnShape, GqaLayout),
    args: RecordArgs<'_, A, S, P, G>,
) {
    let inputs = args.inputs;
    if let Some(tape_k) = args.tape_k_grouped {
        tape_k.copy_from_slice(inputs.k);
    }
    if let Some(tape_g) = args.tape_g {
        tape_g.copy_from_slice(inputs.g);
    }
    let (t_len, hv_n, dv_n, dk) = dims(shape);
    let head_len = dv_n * dk;
    // Without state_out, the heads are split the same way over nothing (each head's
    // final state is dropped).
    let mut no_state = Vec::new();
    let writes_state = args.state_out.is_some();
    let (out_state, out_len) = match args.state_out {
        Some(out) => (out, head_len),
        None => {
            no_state.resize(shape.batch() * hv_n, S::default());
            (&mut no_state[..], 1)
        }
    };
    let cost = (shape.batch() * hv_n * head_len).saturating_mul(t_len.max(1));
    let groups = par_tasks(threads, out_state, out_len, cost, |heads, out| {
        let mut work = HeadWork::new(shape, inputs);
        let mut results = Vec::with_capacity(heads.len());
        for (head, out) in heads.zip(out.chunks_mut(out_len)) {
            let (b, hv) = (head / hv_n, head % hv_n);
            work.gather_live_steps(layout, b, hv);
            let src = &args.state_in[shape.state_row(b, hv, 0)..][..head_len];
            let (y, delta) = work.advance_head(src, writes_state.then_some(out));
            results.push(HeadOutputs { head, y, delta });
        }
        results
    });
    scatter_heads(shape, groups.into_iter().flatten(), args.y, args.delta);
}

/// Each sequence of `shape` through record (docs/SPEC.md "record_varlen"). `args` hold
/// the packed tokens' operands and one state per sequence; lengths were checked.
pub(crate) fn record_varlen<A: Element, S: Element, P: Element, G: Element>(
    (threads, shape, layout): (usize, &VarlenShape, GqaLayout),
    args: RecordArgs<'_, A, S, P, G>,
) -> Result<()> {
    let (packed, i) = (shape.packed(), args.inputs);
    let RecordArgs {
        y,
        mut state_out,
        delta,
        mut tape_k_grouped,
        mut tape_g,
        ..
    } = args;
    for s in 0..shape.sequences() {
        let tokens = shape.sequence(s);
        let one = packed.with_steps(tokens.len())?;
        // The packed operands from the sequence's first token, and its state.
        let (qk, v, g) = (
            packed.qk_row(0, tokens.start, 0),
            packed.v_index(0, tokens.start, 0, 0),
            packed.gate_index(0, tokens.start, 0),
        );
        let m = packed.mask_index(0, tokens.start);
        let state = one.state_len() * s;
        let (qk_n, v_n, g_n, state_n) =
            (one.qk_len(), one.v_len(), one.gate_len(), one.state_len());
        let inputs = RecordInputs {
            q: &i.q[qk..][..qk_n],
            k: &i.k[qk..][..qk_n],
            v: &i.v[v..][..v_n],
            g: &i.g[g..][..g_n],
            beta: &i.beta[g..][..g_n],
            mask: i.mask.map(|mask| &mask[m..][..one.mask_len()]),
        };
        let one_args = RecordArgs {
            inputs,
            state_in: &args.state_in[state..][..state_n],
            y: &mut y[v..][..v_n],
            state_out: state_out.as_deref_mut().map(|o| &mut o[state..][..state_n]),
            delta: &mut delta[v..][..v_n],
            tape_k_grouped: tape_k_grouped.as_deref_mut().map(|o| &mut o[qk..][..qk_n]),
            tape_g: tape_g.as_deref_mut().map(|o| &mut o[g..][..g_n]),
        };
        record((threads, &one, layout), one_args);
    }
    Ok(())
}

/// One thread's working space for record's heads, reused from head to head.
struct HeadWork<'a, A, G> {
    shape: &'a GdnShape,
    inputs: RecordInputs<'a, A, G>,
    /// The current head's live steps.
    live: LiveSteps,
}

impl<'a, A: Element, G: Element> HeadWork<'a, A, G> {
    fn new(shape: &'a GdnShape, inputs: RecordInputs<'a, A, G>) -> Self {
        let (t_len, _, _, dk) = dims(shape);
        HeadWork {
            shape,
            inputs,
            live: LiveSteps {
                steps: Vec::with_capacity(t_len),
                kk: vec![0f32; t_len * dk],
                qq: vec![0f32; t_len * dk],
                dk,
            },
        }
    }

    /// Head `(b, hv)`'s live steps, their k and q widened once.
    fn gather_live_steps(&mut self, layout: GqaLayout, b: usize, hv: usize) {
        let (shape, inputs) = (self.shape, self.inputs);
        let (t_len, _, _, dk) = dims(shape);
        let hk = shape.key_head(layout, hv);
        let live = &mut self.live;
        live.steps.clear();
        for t in 0..t_len {
            if !is_live(inputs.mask, shape.mask_index(b, t)) {
                continue; // y and delta stay zero, S unchanged
            }
            let n = live.steps.len();
            let row = shape.qk_row(b, t, hk);
            widen_into(&mut live.kk[n * dk..][..dk], &inputs.k[row..][..dk]);
            widen_into(&mut live.qq[n * dk..][..dk], &inputs.q[row..][..dk]);
            let gi = shape.gate_index(b, t, hv);
            live.steps.push(RecordStep {
                t,
                g: inputs.g[gi].to_f32(),
                beta: inputs.beta[gi].to_f32(),
                v: shape.v_index(b, t, hv, 0),
            });
        }
    }

    /// Advance a head's state `src` through its live steps (gathered first), writing
    /// the final state to `out` when given: the head's y and delta, `[T][Dv]`.
    fn advance_head<S: Element, P: Element>(
        &mut self,
        src: &[S],
        mut out: Option<&mut [S]>,
    ) -> (Vec<A>, Vec<P>) {
        let (t_len, _, dv_n, _) = dims(self.shape);
        let mut ys = vec![A::default(); t_len * dv_n];
        let mut ds = vec![P::default(); t_len * dv_n];
        let full = dv_n - dv_n % RECORD_ROWS;
        let dk = self.live.dk;
        let mut block = vec![[0f32; RECORD_ROWS]; dk];
        for dv0 in (0..full).step_by(RECORD_ROWS) {
            let outs = (&mut ys[..], &mut ds[..]);
            self.advance_rows(&mut block, dv0, src, out.as_deref_mut(), outs);
        }
        let mut row = vec![[0f32; 1]; dk];
        for dv in full..dv_n {
            let outs = (&mut ys[..], &mut ds[..]);
            self.advance_rows(&mut row, dv, src, out.as_deref_mut(), outs);
        }
        (ys, ds)
    }

    /// Rows `dv0..dv0 + N` through every live step, one lane per row, in `block` (the
    /// rows transposed to `[Dk][N]`).
    fn advance_rows<const N: usize, S: Element, P: Element>(
        &self,
        block: &mut [[f32; N]],
        dv0: usize,
        src: &[S],
        out: Option<&mut [S]>,
        (ys, ds): (&mut [A], &mut [P]),
    ) {
        let (_, _, dv_n, dk) = dims(self.shape);
        let v = self.inputs.v;
        let rows = dv0 * dk..(dv0 + N) * dk;
        for (r, src_row) in src[rows.clone()].chunks_exact(dk).enumerate() {
            for (lanes, x) in block.iter_mut().zip(src_row) {
                lanes[r] = x.to_f32();
            }
        }
        for (st, k_t, q_t) in self.live.iter() {
            let mut kv = [0f32; N];
            for (lanes, &ki) in block.iter_mut().zip(k_t) {
                for (s, acc) in lanes.iter_mut().zip(&mut kv) {
                    *s *= st.g;
                    *acc += *s * ki;
                }
            }
            let vs = &v[st.v + dv0..][..N];
            let mut d = [0f32; N];
            for ((d, vi), kv) in d.iter_mut().zip(vs).zip(&kv) {
                *d = (vi.to_f32() - kv) * st.beta;
            }
            let mut out_y = [0f32; N];
            for ((lanes, &ki), &qi) in block.iter_mut().zip(k_t).zip(q_t) {
                for ((s, acc), di) in lanes.iter_mut().zip(&mut out_y).zip(&d) {
                    *s += ki * di; // S = S + k*delta
                    *acc += *s * qi;
                }
            }
            let at = st.t * dv_n + dv0;
            for (o, x) in ys[at..at + N].iter_mut().zip(&out_y) {
                *o = A::from_f32(*x);
            }
            for (o, x) in ds[at..at + N].iter_mut().zip(&d) {
                *o = P::from_f32(*x);
            }
        }
        if let Some(out) = out {
            for (r, out_row) in out[rows].chunks_exact_mut(dk).enumerate() {
                for (o, lanes) in out_row.iter_mut().zip(block.iter()) {
                    *o = S::from_f32(lanes[r]);
                }
            }
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

/// A head's live steps and their k and q widened to f32, `[steps][Dk]`.
struct LiveSteps {
    steps: Vec<RecordStep>,
    kk: Vec<f32>,
    qq: Vec<f32>,
    dk: usize,
}

impl LiveSteps {
    /// Each live step with its k and q rows.
    fn iter(&self) -> impl Iterator<Item = (&RecordStep, &[f32], &[f32])> {
        let (kk, qq) = (self.kk.chunks_exact(self.dk), self.qq.chunks_exact(self.dk));
        self.steps
            .iter()
            .zip(kk.zip(qq))
            .map(|(st, (k, q))| (st, k, q))
    }
}

/// One live step of a head in record: its index, gate, beta and where its v row starts.
struct RecordStep {
    t: usize,
    g: f32,
    beta: f32,
    v: usize,
}

/// A twin of record's steps taken several a reduction (wgsl/record_steps.wgsl,
/// `MULTI_STEP`), in f64 on one state row: the identity it computes against the SPEC's
/// step-by-step form, with zero gates, masked steps whose k and q are NaN, and a last
/// group cut short by the draft's end.
#[cfg(test)]
mod group_twin {
    use crate::op::record_chunked::cpu_fast::tests::Rng;

    /// One step of a row: k, q, v (the row's element), g, beta, live.
    struct Step {
        k: Vec<f64>,
        q: Vec<f64>,
        v: f64,
        g: f64,
        beta: f64,
        live: bool,
    }

    /// The SPEC's order: `S *= g; delta = (v - S.k) beta; S += k delta; y = S.q`; a
    /// masked step keeps S and gives 0, 0.
    fn by_step(row: &mut [f64], steps: &[Step]) -> Vec<(f64, f64)> {
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let mut out = Vec::new();
        for st in steps {
            if !st.live {
                out.push((0.0, 0.0));
                continue;
            }
            row.iter_mut().for_each(|s| *s *= st.g);
            let delta = (st.v - dot(row, &st.k)) * st.beta;
            row.iter_mut().zip(&st.k).for_each(|(s, k)| *s += k * delta);
            out.push((dot(row, &st.q), delta));
        }
        out
    }

    /// The kernel's groups of `m` steps: each group's dot products against the state it
    /// starts from, the workgroup's `mix_stage` and `step_coef` (the products of the
    /// group's gates, dead steps' as 1, and of its k and q with each other, 0 where a
    /// step is dead), the deltas in order, y, then the state once.
    fn by_group(row: &mut [f64], steps: &[Step], m: usize) -> Vec<(f64, f64)> {
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let mut out = Vec::new();
        for group in steps.chunks(m) {
            let n = group.len();
            let gate = |l: usize| {
                if l < n && group[l].live {
                    group[l].g
                } else {
                    1.0
                }
            };
            let live = |l: usize| l < n && group[l].live;
            // D_hi,lo: the gates of steps lo + 1 ..= hi.
            let decay = |hi: usize, lo: usize| (lo + 1..=hi).map(gate).product::<f64>();
            let through = |j: usize| (0..=j).map(gate).product::<f64>();
            // A dead step's k and q stand in as they are (NaN here): selected away.
            let kq = |a: usize, b: usize, with_k: bool| {
                let other = if with_k { &group[b].k } else { &group[b].q };
                let x = dot(&group[a].k, other);
                if live(a) && live(b) {
                    x
                } else {
                    0.0
                }
            };
            let sums: Vec<(f64, f64)> = group
                .iter()
                .map(|st| (dot(row, &st.k), dot(row, &st.q)))
                .collect();
            let mut deltas = vec![0.0; m];
            for j in 0..n {
                let st = &group[j];
                let mut x = (st.v - through(j) * sums[j].0) * st.beta;
                for (i, d) in deltas[..j].iter().enumerate() {
                    x -= st.beta * decay(j, i) * kq(j, i, true) * d;
                }
                deltas[j] = if live(j) { x } else { 0.0 };
            }
            for j in 0..n {
                let mut y = through(j) * sums[j].1;
                for (i, d) in deltas[..=j].iter().enumerate() {
                    y += decay(j, i) * kq(i, j, false) * d;
                }
                out.push((if live(j) { y } else { 0.0 }, deltas[j]));
            }
            let keep = through(m - 1);
            for (e, s) in row.iter_mut().enumerate() {
                let mut x = *s * keep;
                for (i, st) in group.iter().enumerate() {
                    if live(i) {
                        x += st.k[e] * (decay(m - 1, i) * deltas[i]);
                    }
                }
                *s = x;
            }
        }
        out
    }

    #[test]
    fn groups_of_steps_are_the_steps() {
        let mut rng = Rng(7);
        let dk = 24;
        for (case, m) in [(0, 2), (1, 4), (2, 8), (3, 4), (4, 8)] {
            for len in [1, 3, 4, 7, 8, 13] {
                let steps: Vec<Step> = (0..len)
                    .map(|t| {
                        let live = case < 3 || t % 3 != 1;
                        let nan = if live { 1.0 } else { f64::NAN };
                        let g = match (case, t % 4) {
                            (2, 0) | (4, 2) => 0.0,
                            _ => rng.range(0.3, 1.0),
                        };
                        Step {
                            k: rng.keys(1, dk, Some(1.0)).iter().map(|x| x * nan).collect(),
                            q: rng.keys(1, dk, None).iter().map(|x| x * nan).collect(),
                            v: rng.range(-1.0, 1.0),
                            g,
                            beta: rng.range(0.0, 1.0),
                            live,
                        }
                    })
                    .collect();
                let start: Vec<f64> = (0..dk).map(|_| rng.range(-1.0, 1.0)).collect();
                let (mut a, mut b) = (start.clone(), start);
                let want = by_step(&mut a, &steps);
                let got = by_group(&mut b, &steps, m);
                let what = format!("case {case}, M = {m}, T = {len}");
                for (t, (w, g)) in want.iter().zip(&got).enumerate() {
                    assert!(
                        (w.0 - g.0).abs() < 1e-12,
                        "{what}: y[{t}] {} against {}",
                        g.0,
                        w.0
                    );
                    assert!(
                        (w.1 - g.1).abs() < 1e-12,
                        "{what}: delta[{t}] {} against {}",
                        g.1,
                        w.1
                    );
                }
                for (e, (w, g)) in a.iter().zip(&b).enumerate() {
                    assert!((w - g).abs() < 1e-12, "{what}: state[{e}] {g} against {w}");
                }
                if case == 2 && len >= 8 {
                    // A zero gate cuts the past off exactly in both forms.
                    assert!(a
                        .iter()
                        .zip(&b)
                        .all(|(w, g)| w.is_finite() && g.is_finite()));
                }
            }
        }
    }
}
