//! The chunked (WY / UT) form of record (docs/SPEC.md "record"): the CPU twin of the
//! GPU's `chunk_wy` and `chunk_state` kernels (this folder).
//!
//! For one state row `s` (a row of Dk values of one value head), a chunk of `n <= C`
//! steps starting from `s0` is, with `G(i, j) = g[j+1] * ... * g[i]` for `j <= i`
//! (the decay between steps j and i, 1 on the diagonal) and `gam[i] = G(i, -1)`:
//!
//! ```text
//! delta[i] = beta[i] * (v[i] - gam[i] * k[i].s0 - sum_{j<i} G(i, j) (k[i].k[j]) delta[j])
//! ```
//!
//! so `(I + L) delta = beta * v - beta * gam * (K s0)` with the strictly lower
//! triangular `L[i][j] = beta[i] G(i, j) k[i].k[j]`. With `T = (I + L)^-1` (unit lower
//! triangular, applied by forward substitution), `U = T diag(beta) V` and
//! `W = T diag(beta gam) K`, the chunk's corrected values `delta = U - W s0` are
//! record's delta, and
//!
//! ```text
//! y[i]  = gam[i] q[i].s0 + sum_{j<=i} G(i, j) (q[i].k[j]) delta[j]
//! s_end = gam[n-1] s0 + sum_j G(n-1, j) delta[j] k[j]
//! ```
//!
//! Every `G(i, j)` is a running product over `(j, i]`, formed only for `j <= i`: never a
//! ratio of cumulative products (a zero gate would make it 0/0) nor for `j > i` (where
//! the inverse decay overflows). A masked step is a step with `g = 1`, `beta = 0` and
//! zero k and q (so its k never enters the state), and its y is 0: its delta is then 0
//! and the state passes it unchanged, as in the SPEC. All arithmetic is f32; each value
//! is rounded to its storage dtype once.

use crate::cpu::parallel::{dims, is_live, par_tasks, scatter_heads, widen_into, HeadOutputs};
use crate::dtype::Element;
use crate::op::record::cpu::RecordArgs;
use crate::op::record::RecordInputs;
use crate::shape::{GdnShape, GqaLayout};

/// One chunk's gates and the decays derived from them, for up to `C` steps.
pub(crate) struct ChunkDecay {
    /// `G(i, j)`, `[C][C]`, for `j <= i` (0 above the diagonal: never formed).
    pub ratio: Vec<f32>,
    /// `gam[i] = g[0] * ... * g[i]`: the decay of the chunk's initial state at step i.
    pub gam: Vec<f32>,
    /// `G(n - 1, j)`: the decay from step j to the chunk's last step.
    pub to_end: Vec<f32>,
}

impl ChunkDecay {
    /// The decays of a chunk's `g` (masked steps already 1), each a running product.
    pub(crate) fn new(g: &[f32], c: usize) -> Self {
        let n = g.len();
        let mut ratio = vec![0f32; c * c];
        for i in 0..n {
            let mut r = 1f32;
            for j in (0..=i).rev() {
                ratio[i * c + j] = r; // G(i, j)
                r *= g[j]; // G(i, j - 1) = G(i, j) * g[j]
            }
        }
        let mut gam = vec![0f32; n];
        let mut acc = 1f32;
        for (x, &gi) in gam.iter_mut().zip(g) {
            acc *= gi;
            *x = acc;
        }
        let to_end = (0..n).map(|j| ratio[(n - 1) * c + j]).collect();
        ChunkDecay { ratio, gam, to_end }
    }
}

/// Solve `(I + L) X = B` in place by forward substitution, rows of `width` values:
/// `x[i] = b[i] - sum_{j<i} L[i][j] x[j]`, `L` strictly lower triangular `[C][C]`.
pub(crate) fn forward_substitute(l: &[f32], c: usize, n: usize, x: &mut [f32], width: usize) {
    for i in 1..n {
        let (done, rest) = x.split_at_mut(i * width);
        let row = &mut rest[..width];
        for j in 0..i {
            let lij = l[i * c + j];
            if lij != 0.0 {
                for (xi, xj) in row.iter_mut().zip(&done[j * width..][..width]) {
                    *xi -= lij * xj;
                }
            }
        }
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// record in its chunked WY form, chunks of `chunk` steps: y, the state after the last
/// step and the tape's delta, as record's twin (`op::record::cpu::record`) computes them
/// (within the dtypes' tolerances: another f32 order).
pub(crate) fn record_chunked<A: Element, S: Element, P: Element, G: Element>(
    (threads, shape, layout): (usize, &GdnShape, GqaLayout),
    chunk: usize,
    args: RecordArgs<'_, A, S, P, G>,
) {
    let (inputs, state_in) = (args.inputs, args.state_in);
    let state_out = args.state_out.expect("the host call binds state_out");
    let (t_len, hv_n, dv_n, dk) = dims(shape);
    let c = chunk.max(1);
    let head_len = dv_n * dk;
    let cost = state_out.len().saturating_mul(t_len.max(1));
    let groups = par_tasks(threads, state_out, head_len, cost, |heads, out| {
        let mut work = ChunkWork::new(shape, inputs, c);
        let mut results = Vec::new();
        for (head, out) in heads.zip(out.chunks_mut(head_len.max(1))) {
            let (b, hv) = (head / hv_n, head % hv_n);
            let src = &state_in[shape.state_row(b, hv, 0)..][..head_len];
            let mut s: Vec<f32> = src.iter().map(|x| x.to_f32()).collect();
            let mut ys = vec![A::default(); t_len * dv_n];
            let mut ds = vec![P::default(); t_len * dv_n];
            for t0 in (0..t_len).step_by(c) {
                let steps = work.load_chunk(layout, b, hv, t0);
                work.advance_chunk(t0, &steps, &mut s, &mut ys, &mut ds);
            }
            for (o, x) in out.iter_mut().zip(&s) {
                *o = S::from_f32(*x);
            }
            results.push(HeadOutputs {
                head,
                y: ys,
                delta: ds,
            });
        }
        results
    });
    scatter_heads(shape, groups.into_iter().flatten(), args.y, args.delta);
}

/// One chunk's per-step gates: masked steps have `g = 1`, `beta = 0`.
struct ChunkSteps {
    gs: Vec<f32>,
    bs: Vec<f32>,
    live: Vec<bool>,
}

/// One thread's working space for the chunked record, reused from chunk to chunk.
struct ChunkWork<'a, A, G> {
    shape: &'a GdnShape,
    inputs: RecordInputs<'a, A, G>,
    /// The chunk length C.
    c: usize,
    /// The chunk's k, q (`[C][Dk]`) and v (`[C][Dv]`) in f32, zero at masked steps.
    kc: Vec<f32>,
    qc: Vec<f32>,
    vc: Vec<f32>,
    /// `L` (strictly lower) and `M = G o (Q K^T)` (lower), `[C][C]`.
    l: Vec<f32>,
    m: Vec<f32>,
    /// One state row's corrected values delta over the chunk.
    d: Vec<f32>,
}

impl<'a, A: Element, G: Element> ChunkWork<'a, A, G> {
    fn new(shape: &'a GdnShape, inputs: RecordInputs<'a, A, G>, c: usize) -> Self {
        let (_, _, dv_n, dk) = dims(shape);
        ChunkWork {
            shape,
            inputs,
            c,
            kc: vec![0f32; c * dk],
            qc: vec![0f32; c * dk],
            vc: vec![0f32; c * dv_n],
            l: vec![0f32; c * c],
            m: vec![0f32; c * c],
            d: vec![0f32; c],
        }
    }

    /// Widen head `(b, hv)`'s k, q and v of the chunk starting at step `t0` into the
    /// work space (zero at masked steps), and return its gates.
    fn load_chunk(&mut self, layout: GqaLayout, b: usize, hv: usize, t0: usize) -> ChunkSteps {
        let (shape, inputs) = (self.shape, self.inputs);
        let (t_len, _, dv_n, dk) = dims(shape);
        let hk = shape.key_head(layout, hv);
        let n = self.c.min(t_len - t0);
        let mut gs = vec![1f32; n];
        let mut bs = vec![0f32; n];
        let mut live = vec![false; n];
        for i in 0..n {
            let t = t0 + i;
            live[i] = is_live(inputs.mask, shape.mask_index(b, t));
            let (kr, qr) = (&mut self.kc[i * dk..][..dk], &mut self.qc[i * dk..][..dk]);
            let vr = &mut self.vc[i * dv_n..][..dv_n];
            if live[i] {
                let row = shape.qk_row(b, t, hk);
                widen_into(kr, &inputs.k[row..][..dk]);
                widen_into(qr, &inputs.q[row..][..dk]);
                widen_into(vr, &inputs.v[shape.v_index(b, t, hv, 0)..][..dv_n]);
                let gi = shape.gate_index(b, t, hv);
                gs[i] = inputs.g[gi].to_f32();
                bs[i] = inputs.beta[gi].to_f32();
            } else {
                kr.fill(0.0);
                qr.fill(0.0);
                vr.fill(0.0);
            }
        }
        ChunkSteps { gs, bs, live }
    }

    /// Advance a head's state `s` through the loaded chunk starting at step `t0`,
    /// writing the chunk's y and delta into the head's `ys` and `ds` (`[T][Dv]`).
    fn advance_chunk<P: Element>(
        &mut self,
        t0: usize,
        steps: &ChunkSteps,
        s: &mut [f32],
        ys: &mut [A],
        ds: &mut [P],
    ) {
        let decay = ChunkDecay::new(&steps.gs, self.c);
        self.fill_l_and_m(&decay, &steps.bs);
        let (w, u) = self.solve_w_and_u(&decay, &steps.bs);
        let (_, _, dv_n, dk) = dims(self.shape);
        let n = steps.gs.len();
        let last = decay.gam[n - 1];
        for dv in 0..dv_n {
            let row = &mut s[dv * dk..][..dk];
            // The chunk's corrected values of this row: delta = U - W s0.
            for i in 0..n {
                self.d[i] = u[i * dv_n + dv] - dot(&w[i * dk..][..dk], row);
            }
            for i in 0..n {
                let at = (t0 + i) * dv_n + dv;
                ds[at] = P::from_f32(self.d[i]);
                if steps.live[i] {
                    ys[at] = A::from_f32(self.y_at(&decay, i, row));
                }
            }
            for x in row.iter_mut() {
                *x *= last;
            }
            for j in 0..n {
                let f = decay.to_end[j] * self.d[j];
                if f != 0.0 {
                    for (x, kj) in row.iter_mut().zip(&self.kc[j * dk..][..dk]) {
                        *x += f * kj;
                    }
                }
            }
        }
    }

    /// `L` (strictly lower) and `M = G o (Q K^T)` (lower, diagonal included) of the
    /// loaded chunk.
    fn fill_l_and_m(&mut self, decay: &ChunkDecay, bs: &[f32]) {
        let (c, dk) = (self.c, dims(self.shape).3);
        let kc = &self.kc;
        for i in 0..bs.len() {
            for j in 0..=i {
                let r = decay.ratio[i * c + j];
                let kj = &kc[j * dk..][..dk];
                if j < i {
                    self.l[i * c + j] = bs[i] * r * dot(&kc[i * dk..][..dk], kj);
                }
                self.m[i * c + j] = r * dot(&self.qc[i * dk..][..dk], kj);
            }
        }
    }

    /// `W = T diag(beta gam) K` and `U = T diag(beta) V` of the loaded chunk, `L` filled.
    fn solve_w_and_u(&self, decay: &ChunkDecay, bs: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let (_, _, dv_n, dk) = dims(self.shape);
        let n = bs.len();
        let mut w = vec![0f32; n * dk];
        let mut u = vec![0f32; n * dv_n];
        for i in 0..n {
            let (wb, ub) = (bs[i] * decay.gam[i], bs[i]);
            for (o, x) in w[i * dk..][..dk].iter_mut().zip(&self.kc[i * dk..][..dk]) {
                *o = wb * x;
            }
            for (o, x) in u[i * dv_n..][..dv_n]
                .iter_mut()
                .zip(&self.vc[i * dv_n..][..dv_n])
            {
                *o = ub * x;
            }
        }
        forward_substitute(&self.l, self.c, n, &mut w, dk);
        forward_substitute(&self.l, self.c, n, &mut u, dv_n);
        (w, u)
    }

    /// y of the chunk's step `i` for the state row `s0` (its value at the chunk's
    /// start), the row's deltas in `d`.
    fn y_at(&self, decay: &ChunkDecay, i: usize, s0: &[f32]) -> f32 {
        let dk = s0.len();
        let mut acc = decay.gam[i] * dot(&self.qc[i * dk..][..dk], s0);
        for j in 0..=i {
            acc += self.m[i * self.c + j] * self.d[j];
        }
        acc
    }
}
