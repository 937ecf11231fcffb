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

use crate::cpu::parallel::{scatter_heads, HeadOutputs};
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

/// One head's outputs, `[T][Dv]`, scattered after the threads join.
/// record in its chunked WY form, chunks of `chunk` steps: y, the state after the last
/// step and the tape's delta, as `kernels::record` computes them (within the dtypes'
/// tolerances: another f32 order).
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_chunked<A: Element, S: Element, P: Element, G: Element>(
    threads: usize,
    shape: &GdnShape,
    layout: GqaLayout,
    chunk: usize,
    args: RecordArgs<'_, A, S, P, G>,
) {
    let RecordArgs {
        inputs,
        state_in,
        y,
        state_out,
        delta,
        ..
    } = args;
    let state_out = state_out.expect("the host call binds state_out");
    let RecordInputs {
        q,
        k,
        v,
        g,
        beta,
        mask,
    } = inputs;
    let (t_len, hv_n, dv_n, dk) = (
        shape.steps(),
        shape.value_heads(),
        shape.value_dim(),
        shape.key_dim(),
    );
    let c = chunk.max(1);
    let head_len = dv_n * dk;
    let cost = state_out.len().saturating_mul(t_len.max(1));
    let groups =
        crate::cpu::parallel::par_tasks(threads, state_out, head_len, cost, |heads, out| {
            let mut results = Vec::new();
            let (mut kc, mut qc) = (vec![0f32; c * dk], vec![0f32; c * dk]);
            let mut vc = vec![0f32; c * dv_n];
            let mut l = vec![0f32; c * c];
            let mut m = vec![0f32; c * c];
            let mut d = vec![0f32; c];
            for (head, out) in heads.zip(out.chunks_mut(head_len.max(1))) {
                let (b, hv) = (head / hv_n, head % hv_n);
                let hk = shape.key_head(layout, hv);
                let src = &state_in[shape.state_row(b, hv, 0)..][..head_len];
                let mut s: Vec<f32> = src.iter().map(|x| x.to_f32()).collect();
                let mut ys = vec![A::default(); t_len * dv_n];
                let mut ds = vec![P::default(); t_len * dv_n];
                for t0 in (0..t_len).step_by(c) {
                    let n = c.min(t_len - t0);
                    let mut gs = vec![1f32; n];
                    let mut bs = vec![0f32; n];
                    let mut live = vec![false; n];
                    for i in 0..n {
                        let t = t0 + i;
                        live[i] = mask.is_none_or(|mk| mk[shape.mask_index(b, t)] != 0);
                        let (kr, qr) = (&mut kc[i * dk..][..dk], &mut qc[i * dk..][..dk]);
                        let vr = &mut vc[i * dv_n..][..dv_n];
                        if live[i] {
                            let row = shape.qk_row(b, t, hk);
                            kr.iter_mut()
                                .zip(&k[row..][..dk])
                                .for_each(|(o, x)| *o = x.to_f32());
                            qr.iter_mut()
                                .zip(&q[row..][..dk])
                                .for_each(|(o, x)| *o = x.to_f32());
                            let at = shape.v_index(b, t, hv, 0);
                            vr.iter_mut()
                                .zip(&v[at..][..dv_n])
                                .for_each(|(o, x)| *o = x.to_f32());
                            let gi = shape.gate_index(b, t, hv);
                            gs[i] = g[gi].to_f32();
                            bs[i] = beta[gi].to_f32();
                        } else {
                            kr.fill(0.0);
                            qr.fill(0.0);
                            vr.fill(0.0);
                        }
                    }
                    let decay = ChunkDecay::new(&gs, c);
                    // L (strictly lower) and M = G o (Q K^T) (lower, diagonal included).
                    for i in 0..n {
                        for j in 0..=i {
                            let r = decay.ratio[i * c + j];
                            let kj = &kc[j * dk..][..dk];
                            if j < i {
                                l[i * c + j] = bs[i] * r * dot(&kc[i * dk..][..dk], kj);
                            }
                            m[i * c + j] = r * dot(&qc[i * dk..][..dk], kj);
                        }
                    }
                    // W = T diag(beta gam) K and U = T diag(beta) V.
                    let mut w = vec![0f32; n * dk];
                    let mut u = vec![0f32; n * dv_n];
                    for i in 0..n {
                        let (wb, ub) = (bs[i] * decay.gam[i], bs[i]);
                        for (o, x) in w[i * dk..][..dk].iter_mut().zip(&kc[i * dk..][..dk]) {
                            *o = wb * x;
                        }
                        for (o, x) in u[i * dv_n..][..dv_n]
                            .iter_mut()
                            .zip(&vc[i * dv_n..][..dv_n])
                        {
                            *o = ub * x;
                        }
                    }
                    forward_substitute(&l, c, n, &mut w, dk);
                    forward_substitute(&l, c, n, &mut u, dv_n);
                    let last = decay.gam[n - 1];
                    for dv in 0..dv_n {
                        let row = &mut s[dv * dk..][..dk];
                        for i in 0..n {
                            d[i] = u[i * dv_n + dv] - dot(&w[i * dk..][..dk], row);
                        }
                        for i in 0..n {
                            let at = (t0 + i) * dv_n + dv;
                            ds[at] = P::from_f32(d[i]);
                            if live[i] {
                                let mut acc = decay.gam[i] * dot(&qc[i * dk..][..dk], row);
                                for j in 0..=i {
                                    acc += m[i * c + j] * d[j];
                                }
                                ys[at] = A::from_f32(acc);
                            }
                        }
                        for x in row.iter_mut() {
                            *x *= last;
                        }
                        for j in 0..n {
                            let f = decay.to_end[j] * d[j];
                            if f != 0.0 {
                                for (x, kj) in row.iter_mut().zip(&kc[j * dk..][..dk]) {
                                    *x += f * kj;
                                }
                            }
                        }
                    }
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
    scatter_heads(shape, groups.into_iter().flatten(), y, delta);
}
