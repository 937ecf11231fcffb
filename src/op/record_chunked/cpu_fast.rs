//! The CPU twin of record_chunked's fast path (`ChunkPrecision::FastF16`, C = 64): the
//! first pass as `chunk_prep` / `chunk_prep_coop` compute it (the decay-free solve, the
//! W and U products, every operand of the walk and the output pass as the f16 tiles of
//! `wgsl/chunk_tiles.wgsl`), then the walk and the output pass as `chunk_walk_coop` and
//! `chunk_out_coop` compute them. Values are rounded to f16 where the kernels round
//! them; a pair of f16 values (`hi_lo`) stands for the matrix-unit kernel's two-part
//! operands, where the first pass on vector units holds f32 ([`Form`]). Test
//! code: the oracle of the first pass's GPU tests and the fast path's precision study.
//! (The twin's sums run in another order than the kernels': they agree to f32's
//! rounding before each f16 rounding, so a stored f16 value may differ by one step.)
//!
//! The solve without decays. With `gam[i] = g[0] ... g[i]` and `Gam[i][j] = g[j+1] ...
//! g[i]` (`j <= i`), the gated matrix of `cpu.rs` is a diagonal similarity of the plain
//! one: `I + tril(diag(beta) (Gam o K K^T), -1) = D (I + tril(diag(beta) K K^T, -1)) D^-1`
//! with `D = diag(gam)`, so its inverse is `T = Gam o A0` with
//! `A0 = (I + tril(diag(beta) K K^T, -1))^-1`, from k and beta alone. Both sides are
//! polynomials in the gates, so the identity holds where gates are 0 too; `Gam` is formed
//! as running products (never a ratio of cumulative products). The first pass's factors
//! then are
//!
//! ```text
//! W = T diag(beta gam) K = diag(gam) A0 diag(beta) K      (Gam[i][l] gam[l] = gam[i])
//! U = T diag(beta) V     = (Gam o (A0 diag(beta))) V
//! ```
//!
//! A0 is not damped by the decays: its entries grow where keys are not normalised (about
//! 1 for unit keys, 17 at norm 3, 6e8 at norm 5 over a random chunk, Dk = 128), and the
//! matrix-unit kernel holds it as two f16 parts, so beyond f16's range it is clamped: the fast path's
//! domain is keys of moderate norm (docs/SPEC.md "record_chunked").

use crate::shape::{GdnShape, GqaLayout};
use half::f16;
use std::ops::{Add, Mul, Neg, Sub};

/// Steps per chunk of the fast path.
pub(crate) const C: usize = 64;
/// Key columns of the tiles (`TILE_DK`).
pub(crate) const TILE_DK: usize = 128;
const F16_MAX: f32 = 65504.0;

/// `x` as the kernels store it in f16: a finite value clamped into f16's range
/// (`to_f16_range`), then rounded to nearest even; infinities and NaN pass.
pub(crate) fn f16r(x: f32) -> f32 {
    let y = if x.is_finite() {
        x.clamp(-F16_MAX, F16_MAX)
    } else {
        x
    };
    f16::from_f32(y).to_f32()
}

/// The value a two-part f16 operand carries: `hi = f16r(x)`, `lo = f16r(x - hi)`.
pub(crate) fn hi_lo(x: f32) -> f32 {
    let hi = f16r(x);
    if !hi.is_finite() {
        return hi;
    }
    hi + f16r(x - hi)
}

/// The arithmetic the solves need, in f32 (the kernels') and f64 (the identity's test).
pub(crate) trait Real:
    Copy + PartialEq + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Neg<Output = Self>
{
    const ZERO: Self;
    const ONE: Self;
}

impl Real for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
}

impl Real for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
}

/// `(I + L)^-1` of a strictly lower triangular `L` (`[c][c]`, only `j < i < n` read), by
/// forward substitution column by column: `X[i][j] = -sum_{j<=s<i} L[i][s] X[s][j]`,
/// `X[j][j] = 1`. Unit lower triangular, `[c][c]`, 0 above the diagonal.
pub(crate) fn unit_lower_inverse<R: Real>(l: &[R], c: usize, n: usize) -> Vec<R> {
    let mut x = vec![R::ZERO; c * c];
    for j in 0..n {
        x[j * c + j] = R::ONE;
        for i in j + 1..n {
            let mut acc = R::ZERO;
            for s in j..i {
                acc = acc + l[i * c + s] * x[s * c + j];
            }
            x[i * c + j] = -acc;
        }
    }
    x
}

/// `Gam[i][j] = g[j+1] ... g[i]` for `j <= i < n` (`[c][c]`, 0 above the diagonal), as
/// running products down each column: `Gam[j][j] = 1`, `Gam[i][j] = Gam[i-1][j] g[i]`.
pub(crate) fn column_decays<R: Real>(g: &[R], c: usize, n: usize) -> Vec<R> {
    let mut gam = vec![R::ZERO; c * c];
    for j in 0..n {
        let mut r = R::ONE;
        gam[j * c + j] = r;
        for (i, &gi) in g.iter().enumerate().take(n).skip(j + 1) {
            r = r * gi;
            gam[i * c + j] = r;
        }
    }
    gam
}

/// The decay-free solve: `A0 = (I + tril(diag(beta) K K^T, -1))^-1` from the chunk's
/// Gram matrix `kk` (`[c][c]`) and beta alone.
pub(crate) fn decay_free_inverse<R: Real>(kk: &[R], beta: &[R], c: usize, n: usize) -> Vec<R> {
    let mut l = vec![R::ZERO; c * c];
    for i in 0..n {
        for j in 0..i {
            l[i * c + j] = beta[i] * kk[i * c + j];
        }
    }
    unit_lower_inverse(&l, c, n)
}

/// One chunk's inputs in f32, `C` steps: a dead step (masked, or past T) has `g = 1`,
/// `beta = 0` and zero k, q and v.
pub(crate) struct ChunkIn {
    /// `[C][dk]`.
    pub k: Vec<f32>,
    /// `[C][dk]`.
    pub q: Vec<f32>,
    /// `[C][dv]`.
    pub v: Vec<f32>,
    pub g: Vec<f32>,
    pub beta: Vec<f32>,
    pub dk: usize,
    pub dv: usize,
}

/// What the first pass writes for one chunk: the tiles' four matrices (f16 values, as
/// f32, in plain row-major order), U in f32 and the decays.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Prepped {
    /// W `[C][TILE_DK]`.
    pub w: Vec<f32>,
    /// gam Q `[C][TILE_DK]`.
    pub qg: Vec<f32>,
    /// (G_end K)^T `[TILE_DK][C]`.
    pub kt: Vec<f32>,
    /// M = Gam o (Q K^T), `[C][C]`, 0 above the diagonal.
    pub m: Vec<f32>,
    /// U `[C][dv]`.
    pub u: Vec<f32>,
    /// `gam[i]`, then `G(C-1, j)`, then `gam[C-1]` (`[3C]`, the rest 0).
    pub decay: Vec<f32>,
}

/// A0 as the first pass forms it: L0 = beta K K^T's strictly lower triangle held in two
/// f16 parts, its four 16 x 16 diagonal blocks inverted by forward substitution in f32,
/// then merged 16 -> 32 -> 64 as products of two-part operands with f32 sums:
/// `X = L0_21 A0_11`, `A0_21 = -A0_22 X`. Each block of A0 held in two parts.
pub(crate) fn a0_blocked(kk: &[f32], beta: &[f32]) -> Vec<f32> {
    let mut l = vec![0f32; C * C];
    for i in 0..C {
        for j in 0..i {
            l[i * C + j] = hi_lo(beta[i] * kk[i * C + j]);
        }
    }
    let mut a = vec![0f32; C * C];
    for b0 in (0..C).step_by(16) {
        for c in 0..16 {
            let mut x = [0f32; 16];
            for r in 0..16 {
                x[r] = if r < c {
                    0.0
                } else if r == c {
                    1.0
                } else {
                    -(0..r).fold(0f32, |acc, s| acc + l[(b0 + r) * C + b0 + s] * x[s])
                };
            }
            for r in 0..16 {
                a[(b0 + r) * C + b0 + c] = hi_lo(x[r]);
            }
        }
    }
    // Merge blocks of `n` steps at (r0, r0) and (r0 + n, r0 + n): the block below them.
    let merge = |a: &mut Vec<f32>, r0: usize, n: usize| {
        let mut x = vec![0f32; n * n];
        for i in 0..n {
            for j in 0..n {
                let s = (0..n).fold(0f32, |acc, k| {
                    acc + l[(r0 + n + i) * C + r0 + k] * a[(r0 + k) * C + r0 + j]
                });
                x[i * n + j] = hi_lo(s);
            }
        }
        for i in 0..n {
            for j in 0..n {
                let s = (0..n).fold(0f32, |acc, k| {
                    acc + a[(r0 + n + i) * C + r0 + n + k] * x[k * n + j]
                });
                a[(r0 + n + i) * C + r0 + j] = hi_lo(-s);
            }
        }
    };
    merge(&mut a, 0, 16);
    merge(&mut a, 32, 16);
    merge(&mut a, 0, 32);
    a
}

/// How a first pass holds its operands before the stored tiles: what its twin rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    /// `chunk_prep_coop` (matrix units take f16): A and its merges' operands in two f16
    /// parts ([`a0_blocked`]); k and q in the Gram products in two parts where `split`
    /// (f32 activations), else in one (bf16 and f16 activations, which f16 holds exactly
    /// within its range); k and v in W's and U's products in one.
    Matrix { split: bool },
    /// `chunk_prep` (vector units): all in f32; W and U by forward substitution down
    /// each column of the gated system (`(I + L)^-1 = Gam o A0`), no inverse formed (in
    /// another order than the kernel's blocks of four: they agree to f32's rounding).
    Vector,
}

/// `(I + L)^-1 diag(scale) M` for a strictly lower triangular `L` (`[C][C]`) and `M`
/// (`[C][cols]`), by forward substitution down each column, as `chunk_prep.wgsl` solves
/// for W and U (no inverse formed).
fn substitute(l: &[f32], m: &[f32], cols: usize, scale: impl Fn(usize) -> f32) -> Vec<f32> {
    let mut out = vec![0f32; C * cols];
    for c in 0..cols {
        for i in 0..C {
            let s = (0..i).fold(0f32, |s, j| s + l[i * C + j] * out[j * cols + c]);
            out[i * cols + c] = m[i * cols + c] * scale(i) - s;
        }
    }
    out
}

/// The first pass of the fast path for one chunk, its operands held as `form` says.
pub(crate) fn prep(x: &ChunkIn, form: Form) -> Prepped {
    let (dk, dv) = (x.dk, x.dv);
    type Round = fn(f32) -> f32;
    let same = |v: f32| v;
    let (gram, a_op, wu): (Round, Round, Round) = match form {
        Form::Matrix { split: true } => (hi_lo, hi_lo, f16r),
        Form::Matrix { split: false } => (f16r, hi_lo, f16r),
        Form::Vector => (same, same, same),
    };
    let k: Vec<f32> = x.k.iter().map(|&v| gram(v)).collect();
    let q: Vec<f32> = x.q.iter().map(|&v| gram(v)).collect();
    let k1: Vec<f32> = x.k.iter().map(|&v| wu(v)).collect();
    let v: Vec<f32> = x.v.iter().map(|&v| wu(v)).collect();
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).fold(0f32, |s, (x, y)| s + x * y);
    let mut kk = vec![0f32; C * C];
    let mut qk = vec![0f32; C * C];
    for i in 0..C {
        for j in 0..C {
            kk[i * C + j] = dot(&k[i * dk..][..dk], &k[j * dk..][..dk]);
            qk[i * C + j] = dot(&q[i * dk..][..dk], &k[j * dk..][..dk]);
        }
    }
    // gam[i] from the chunk's start, G(C-1, j) to its end: running products in order.
    let mut gam = vec![0f32; C];
    let mut acc = 1f32;
    for (o, &g) in gam.iter_mut().zip(&x.g) {
        acc *= g;
        *o = acc;
    }
    let to_end: Vec<f32> = (0..C)
        .map(|j| x.g[j + 1..].iter().fold(1f32, |r, &g| r * g))
        .collect();
    let gm = column_decays(&x.g, C, C);
    let (w_rows, u) = match form {
        Form::Matrix { .. } => {
            let a0 = a0_blocked(&kk, &x.beta);
            let a_w: Vec<f32> = (0..C * C).map(|e| a_op(a0[e] * x.beta[e % C])).collect();
            let a_u: Vec<f32> = (0..C * C).map(|e| a_op(gm[e] * a_w[e])).collect();
            let times = |a: &[f32], m: &[f32], cols: usize, scale: &dyn Fn(usize) -> f32| {
                let mut out = vec![0f32; C * cols];
                for i in 0..C {
                    for c in 0..cols {
                        let s = (0..=i).fold(0f32, |s, l| s + a[i * C + l] * m[l * cols + c]);
                        out[i * cols + c] = scale(i) * s;
                    }
                }
                out
            };
            (
                times(&a_w, &k1, dk, &|i| gam[i]),
                times(&a_u, &v, dv, &|_| 1.0),
            )
        }
        Form::Vector => {
            // The gated system (I + L) [W | U] = [diag(beta gam) K | diag(beta) V],
            // L = tril(diag(beta) (Gam o K K^T), -1).
            let l: Vec<f32> = (0..C * C)
                .map(|e| match e % C < e / C {
                    true => gm[e] * (x.beta[e / C] * kk[e]),
                    false => 0.0,
                })
                .collect();
            (
                substitute(&l, &k1, dk, |i| gam[i] * x.beta[i]),
                substitute(&l, &v, dv, |i| x.beta[i]),
            )
        }
    };

    let mut w = vec![0f32; C * TILE_DK];
    let mut qg = vec![0f32; C * TILE_DK];
    let mut kt = vec![0f32; TILE_DK * C];
    for i in 0..C {
        for c in 0..dk {
            w[i * TILE_DK + c] = f16r(w_rows[i * dk + c]);
            qg[i * TILE_DK + c] = f16r(gam[i] * x.q[i * dk + c]);
            // A zero decay adds nothing, whatever k is.
            if to_end[i] != 0.0 {
                kt[c * C + i] = f16r(to_end[i] * x.k[i * dk + c]);
            }
        }
    }
    let m = (0..C * C)
        .map(|e| {
            if e % C <= e / C {
                f16r(gm[e] * qk[e])
            } else {
                0.0
            }
        })
        .collect();
    let mut decay = vec![0f32; 3 * C];
    decay[..C].copy_from_slice(&gam);
    decay[C..2 * C].copy_from_slice(&to_end);
    decay[2 * C] = gam[C - 1];
    Prepped {
        w,
        qg,
        kt,
        m,
        u,
        decay,
    }
}

/// The walk and the output pass over one head's chunks, as the cooperative kernels
/// compute them: per chunk, with `s16 = f16(S^T)` at its start,
/// `delta = U - W s16`, `y = QG s16 + M f16(delta)`, `S^T = gam_C S^T + KT f16(delta)`
/// (S^T in f32 throughout). `s`: the head's state `[dv][dk]`, updated; `y` and `delta`:
/// `[T][dv]` for this head.
pub(crate) fn walk_and_out(
    chunks: &[Prepped],
    s: &mut [f32],
    dims: (usize, usize, usize),
    y: &mut [f32],
    delta: &mut [f32],
) {
    let (t_len, dk, dv) = dims;
    let mut st = vec![0f32; TILE_DK * dv];
    for c in 0..dk {
        for d in 0..dv {
            st[c * dv + d] = s[d * dk + c];
        }
    }
    for (n, p) in chunks.iter().enumerate() {
        let s16: Vec<f32> = st.iter().map(|&x| f16r(x)).collect();
        let mut d16 = vec![0f32; C * dv];
        for i in 0..C {
            for d in 0..dv {
                let mut ws = 0f32;
                for c in 0..TILE_DK {
                    ws += p.w[i * TILE_DK + c] * s16[c * dv + d];
                }
                let x = p.u[i * dv + d] - ws;
                d16[i * dv + d] = f16r(x);
                let t = n * C + i;
                if t < t_len {
                    delta[t * dv + d] = x;
                }
            }
        }
        for i in 0..C {
            let t = n * C + i;
            if t >= t_len {
                break;
            }
            for d in 0..dv {
                let mut acc = 0f32;
                for c in 0..TILE_DK {
                    acc += p.qg[i * TILE_DK + c] * s16[c * dv + d];
                }
                for j in 0..C {
                    acc += p.m[i * C + j] * d16[j * dv + d];
                }
                y[t * dv + d] = acc;
            }
        }
        let last = p.decay[2 * C];
        for c in 0..TILE_DK {
            for d in 0..dv {
                let mut acc = last * st[c * dv + d];
                for j in 0..C {
                    acc += p.kt[c * C + j] * d16[j * dv + d];
                }
                st[c * dv + d] = acc;
            }
        }
    }
    for c in 0..dk {
        for d in 0..dv {
            s[d * dk + c] = st[c * dv + d];
        }
    }
}

/// f32 inputs of record (docs/SPEC.md "record"), as the fast path's twin takes them.
pub(crate) struct Inputs<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub g: &'a [f32],
    pub beta: &'a [f32],
    pub mask: Option<&'a [u32]>,
}

/// Head `(b, hv)`'s chunk starting at step `t0`, widened, dead steps as the kernels
/// make them.
pub(crate) fn chunk_in(
    shape: &GdnShape,
    layout: GqaLayout,
    x: &Inputs<'_>,
    (b, hv, t0): (usize, usize, usize),
) -> ChunkIn {
    let (dk, dv) = (shape.key_dim(), shape.value_dim());
    let hk = shape.key_head(layout, hv);
    let mut c = ChunkIn {
        k: vec![0f32; C * dk],
        q: vec![0f32; C * dk],
        v: vec![0f32; C * dv],
        g: vec![1f32; C],
        beta: vec![0f32; C],
        dk,
        dv,
    };
    for i in 0..C {
        let t = t0 + i;
        let live = t < shape.steps() && x.mask.is_none_or(|m| m[shape.mask_index(b, t)] != 0);
        if !live {
            continue;
        }
        let row = shape.qk_row(b, t, hk);
        c.k[i * dk..][..dk].copy_from_slice(&x.k[row..][..dk]);
        c.q[i * dk..][..dk].copy_from_slice(&x.q[row..][..dk]);
        c.v[i * dv..][..dv].copy_from_slice(&x.v[shape.v_index(b, t, hv, 0)..][..dv]);
        let gi = shape.gate_index(b, t, hv);
        c.g[i] = x.g[gi];
        c.beta[i] = x.beta[gi];
    }
    c
}

/// record through the fast path's twin: (y, the final state, delta), in f32 before
/// their rounding to the output dtypes, the first pass in `form`.
pub(crate) fn record_fast(
    shape: &GdnShape,
    layout: GqaLayout,
    x: &Inputs<'_>,
    state: &[f32],
    form: Form,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (t_len, hv_n, dv, dk) = (
        shape.steps(),
        shape.value_heads(),
        shape.value_dim(),
        shape.key_dim(),
    );
    let mut y = vec![0f32; shape.v_len()];
    let mut delta = vec![0f32; shape.v_len()];
    let mut s_out = state.to_vec();
    for b in 0..shape.batch() {
        for hv in 0..hv_n {
            let chunks: Vec<Prepped> = (0..t_len.div_ceil(C))
                .map(|n| prep(&chunk_in(shape, layout, x, (b, hv, n * C)), form))
                .collect();
            let s = &mut s_out[shape.state_row(b, hv, 0)..][..dv * dk];
            let mut yh = vec![0f32; t_len * dv];
            let mut dh = vec![0f32; t_len * dv];
            walk_and_out(&chunks, s, (t_len, dk, dv), &mut yh, &mut dh);
            for t in 0..t_len {
                let at = shape.v_index(b, t, hv, 0);
                y[at..at + dv].copy_from_slice(&yh[t * dv..][..dv]);
                delta[at..at + dv].copy_from_slice(&dh[t * dv..][..dv]);
            }
        }
    }
    (y, s_out, delta)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{CpuBackend, RecordInputs, Recorded};

    /// SplitMix64: reproducible draws.
    pub(crate) struct Rng(pub u64);

    impl Rng {
        pub(crate) fn next(&mut self) -> f64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        }
        pub(crate) fn range(&mut self, lo: f64, hi: f64) -> f64 {
            lo + (hi - lo) * self.next()
        }
        /// `rows` rows of `dim` values in [-1, 1], each scaled to L2 norm `norm` (`None`:
        /// as drawn).
        pub(crate) fn keys(&mut self, rows: usize, dim: usize, norm: Option<f64>) -> Vec<f64> {
            let mut k: Vec<f64> = (0..rows * dim).map(|_| self.range(-1.0, 1.0)).collect();
            if let Some(norm) = norm {
                for row in k.chunks_mut(dim) {
                    let n = row.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
                    row.iter_mut().for_each(|x| *x *= norm / n);
                }
            }
            k
        }
    }

    /// The gates of a chunk of `n` steps: random in [0.5, 1], some exactly 0, all 1,
    /// or some vanishing (1e-30: their products underflow).
    fn gates(rng: &mut Rng, n: usize, kind: &str) -> Vec<f64> {
        (0..n)
            .map(|i| match kind {
                "zero" if i % 5 == 2 => 0.0,
                "one" => 1.0,
                "vanishing" if i % 3 == 0 => 1e-30,
                _ => rng.range(0.5, 1.0),
            })
            .collect()
    }

    /// In f64 over random chunks the decay-free solve `Gam o A0` is the gated solve
    /// `(I + tril(diag(beta) (Gam o K K^T), -1))^-1` (cpu.rs's, by forward
    /// substitution) to ~1e-12 relative: zero gates, gates of 1 and vanishing gates
    /// included, unit keys and unnormalised ones (A0 then grows; the gated T does not).
    #[test]
    fn decay_free_solve_is_the_gated_solve_in_f64() {
        let (c, dk) = (64, 128);
        let mut rng = Rng(7);
        for n in [64, 37, 1] {
            for norm in [Some(1.0), Some(3.0), Some(5.0), None] {
                for kind in ["random", "zero", "one", "vanishing"] {
                    let k = rng.keys(n, dk, norm);
                    let beta: Vec<f64> = (0..n).map(|_| rng.range(0.05, 1.0)).collect();
                    let g = gates(&mut rng, n, kind);
                    let mut kk = vec![0f64; c * c];
                    for i in 0..n {
                        for j in 0..n {
                            kk[i * c + j] = (0..dk).map(|x| k[i * dk + x] * k[j * dk + x]).sum();
                        }
                    }
                    let gam = column_decays(&g, c, n);
                    // The gated solve: L[i][j] = beta[i] Gam[i][j] k[i].k[j].
                    let mut l = vec![0f64; c * c];
                    for i in 0..n {
                        for j in 0..i {
                            l[i * c + j] = beta[i] * gam[i * c + j] * kk[i * c + j];
                        }
                    }
                    let want = unit_lower_inverse(&l, c, n);
                    let a0 = decay_free_inverse(&kk, &beta, c, n);
                    let scale = want.iter().fold(1f64, |m, x| m.max(x.abs()));
                    let err = (0..c * c)
                        .map(|e| (gam[e] * a0[e] - want[e]).abs())
                        .fold(0f64, f64::max)
                        / scale;
                    let a0_max = a0.iter().fold(0f64, |m, x| m.max(x.abs()));
                    eprintln!("n {n} key norm {norm:?} gates {kind}: max |A0| {a0_max:.1e}, max |T| {scale:.1e}, |Gam o A0 - T| / max |T| {err:.1e}");
                    assert!(err <= 1e-12, "{err:e}");
                    // Zero gates stay exact: T is 0 across them.
                    if kind == "zero" {
                        for i in 0..n {
                            for j in 0..i {
                                if (j + 1..=i).any(|x| g[x] == 0.0) {
                                    assert_eq!(gam[i * c + j] * a0[i * c + j], 0.0);
                                    assert_eq!(want[i * c + j], 0.0);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Draws as the crate's tests make them: unit keys (or of norm `norm`), q scaled by
    /// 1 / sqrt(Dk), gates in `g_range`, beta in [0.05, 1].
    pub(crate) struct Draw {
        pub q: Vec<f32>,
        pub k: Vec<f32>,
        pub v: Vec<f32>,
        pub g: Vec<f32>,
        pub beta: Vec<f32>,
        pub state: Vec<f32>,
    }

    pub(crate) fn draw(shape: &GdnShape, seed: u64, norm: f64, g_range: (f64, f64)) -> Draw {
        let mut rng = Rng(seed);
        let dk = shape.key_dim();
        let rows = shape.qk_len() / dk;
        let f = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect::<Vec<f32>>();
        let k = f(rng.keys(rows, dk, Some(norm)));
        let s = 1.0 / (dk as f64).sqrt();
        let mut r = |n: usize, lo: f64, hi: f64| f((0..n).map(|_| rng.range(lo, hi)).collect());
        Draw {
            q: r(shape.qk_len(), -s, s),
            k,
            v: r(shape.v_len(), -1.0, 1.0),
            g: r(shape.gate_len(), g_range.0, g_range.1),
            beta: r(shape.gate_len(), 0.05, 1.0),
            state: r(shape.state_len(), -0.5, 0.5),
        }
    }

    /// The mask the crate's tests use: every fifth step of each sequence dead.
    pub(crate) fn mask(shape: &GdnShape) -> Vec<u32> {
        (0..shape.mask_len())
            .map(|i| u32::from(i % 5 != 3))
            .collect()
    }

    fn rel(got: &[f32], want: &[f32]) -> f64 {
        let (mut num, mut den) = (0f64, 0f64);
        for (&x, &y) in got.iter().zip(want) {
            num += (x as f64 - y as f64).powi(2);
            den += (y as f64).powi(2);
        }
        (num / den.max(f64::MIN_POSITIVE)).sqrt()
    }

    /// The fast path's twin against the CPU's record: the largest relative error of
    /// y, state and delta. `bf16`: the inputs rounded to bf16 first (one f16 part each
    /// on matrix units); `vector`: the first pass on vector units, else on matrix units.
    fn fast_vs_record(
        shape: &GdnShape,
        layout: GqaLayout,
        d: &Draw,
        mask: Option<&[u32]>,
        (bf16, vector): (bool, bool),
    ) -> [f64; 3] {
        let form = match vector {
            true => Form::Vector,
            false => Form::Matrix { split: !bf16 },
        };
        let round = |v: &[f32]| -> Vec<f32> {
            if bf16 {
                v.iter()
                    .map(|&x| half::bf16::from_f32(x).to_f32())
                    .collect()
            } else {
                v.to_vec()
            }
        };
        let (q, k, v) = (round(&d.q), round(&d.k), round(&d.v));
        let x = Inputs {
            q: &q,
            k: &k,
            v: &v,
            g: &d.g,
            beta: &d.beta,
            mask,
        };
        let inputs = RecordInputs {
            q: &q,
            k: &k,
            v: &v,
            g: &d.g,
            beta: &d.beta,
            mask,
        };
        let want: Recorded<f32, f32, f32> = CpuBackend::default()
            .record(shape, layout, &inputs, &d.state)
            .unwrap();
        let (y, s, delta) = record_fast(shape, layout, &x, &d.state, form);
        [
            rel(&y, &want.y),
            rel(&s, &want.state),
            rel(&delta, &want.delta),
        ]
    }

    /// The fast path's precision by design, on the CPU: its twin (every rounding to f16
    /// where the kernels make it, the decay-free solve) within the 1e-3 bound of
    /// docs/SPEC.md at T around the chunk and over 4096 steps, masks, both layouts,
    /// f32 (two-part operands) and bf16 inputs on matrix units and both on vector units
    /// (f32), and the gates of the hidden cases.
    #[test]
    fn fast_twin_is_within_the_fast_bound() {
        let mut largest = 0f64;
        for t in [1, 63, 64, 65, 197, 1024] {
            for (layout, masked) in [(GqaLayout::Blocked, false), (GqaLayout::Tiled, true)] {
                let shape = GdnShape::new(1, t, 1, 2, 128, 128).unwrap();
                let d = draw(&shape, t as u64, 1.0, (0.5, 1.0));
                let m = mask(&shape);
                let mask = masked.then_some(&m[..]);
                for (bf16, vector) in [(false, false), (true, false), (false, true), (true, true)] {
                    let e = fast_vs_record(&shape, layout, &d, mask, (bf16, vector));
                    eprintln!("twin T {t} {layout:?} mask {masked} bf16 {bf16} vector {vector}: y {:.2e} state {:.2e} delta {:.2e}", e[0], e[1], e[2]);
                    for x in e {
                        assert!(x <= 1e-3, "{x:e}");
                        largest = largest.max(x);
                    }
                }
            }
        }
        // Gates: vanishing, zero, one, strong (0.05 to 0.3).
        let shape = GdnShape::new(1, 150, 1, 2, 128, 128).unwrap();
        for (what, range) in [("strong", (0.05, 0.3)), ("one", (1.0, 1.0))] {
            let d = draw(&shape, 3, 1.0, range);
            let e = fast_vs_record(&shape, GqaLayout::Blocked, &d, None, (false, false));
            eprintln!(
                "twin {what} gates: y {:.2e} state {:.2e} delta {:.2e}",
                e[0], e[1], e[2]
            );
            e.iter().for_each(|&x| assert!(x <= 1e-3, "{what}: {x:e}"));
        }
        let mut d = draw(&shape, 4, 1.0, (0.5, 1.0));
        for (i, g) in d.g.iter_mut().enumerate() {
            if i % 5 == 2 {
                *g = 0.0;
            } else if i % 7 == 3 {
                *g = 1e-30;
            }
        }
        let e = fast_vs_record(&shape, GqaLayout::Blocked, &d, None, (false, false));
        eprintln!(
            "twin zero and vanishing gates: y {:.2e} state {:.2e} delta {:.2e}",
            e[0], e[1], e[2]
        );
        e.iter()
            .for_each(|&x| assert!(x <= 1e-3, "zero gates: {x:e}"));
        eprintln!("twin: largest relative error {largest:.2e}");
    }

    /// The fast path's domain: keys of larger norm make A0 grow (the decays do not damp
    /// it; the kernels hold it in f16's range). Within the bound up to norm 3 (A0 to
    /// about 1e2), and at norm 5 where strong decays damp what A0 loses; at norm 5 with
    /// gates near 1 (A0 about 1e9) out of it, and finite.
    #[test]
    fn fast_twin_domain_by_key_norm() {
        let shape = GdnShape::new(1, 256, 1, 1, 128, 128).unwrap();
        for norm in [1.0, 1.4, 2.0, 3.0, 5.0] {
            for range in [(0.5, 1.0), (0.05, 0.3)] {
                let d = draw(&shape, 9, norm, range);
                let e = fast_vs_record(&shape, GqaLayout::Blocked, &d, None, (false, false));
                eprintln!(
                    "twin key norm {norm} gates {range:?}: y {:.2e} state {:.2e} delta {:.2e}",
                    e[0], e[1], e[2]
                );
                assert!(e.iter().all(|x| x.is_finite()));
                if norm <= 3.0 || range.1 < 0.5 {
                    e.iter()
                        .for_each(|&x| assert!(x <= 1e-3, "norm {norm}: {x:e}"));
                } else {
                    assert!(e[0] > 1e-3, "norm {norm}: the domain moved: {e:?}");
                }
            }
        }
    }
}
