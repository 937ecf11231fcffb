//! Other libraries' GatedDeltaNet conventions, each converted to this crate's
//! (docs/CONVENTIONS.md): one test per row of its table.
//!
//! Each test
//! 1. draws inputs the way that library receives them (its layouts, its gate space, its
//!    state layout, its head order), from a small seeded generator;
//! 2. runs that library's recurrent rule, written here in f64 in *its* convention (what
//!    its reference / kernel computes, read from its source: the file is named on each
//!    reference function);
//! 3. converts the inputs with the small conversion functions below (the ones
//!    docs/CONVENTIONS.md names), runs `Backend::cpu().record`, converts y and the state back, and requires a
//!    relative error below 1e-5 (the crate computes in f32);
//! 4. shows that the conversion matters: leaving out one of its steps (the exp of g, the
//!    state transposition, the q scale) or using the other GQA layout misses by a wide
//!    margin, so each test can fail.
//!
//! Shapes are small but real-like: B = 2, T = 5, Hk = 2, Hv = 4 (Hk != Hv so the GQA
//! layout matters), Dk = 8, Dv = 6 (Dk != Dv, so a state layout mix-up cannot hide
//! behind a square matrix; ggml's op needs Dk = Dv, so its test uses 8 and 8).
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

mod common;

use common::f64ref::Dims;
use common::Rng;
use deltatape::{Backend, GdnShape, GqaLayout, Recorded};

// ---------------------------------------------------------------------------------
// Conversion functions: other conventions -> this crate's (docs/CONVENTIONS.md's table).
// ---------------------------------------------------------------------------------

/// `g` in log space (fla, vLLM, SGLang, Hugging Face, ggml) -> the decay itself:
/// `g_here = exp(g_theirs)`.
pub fn exp_gate(g_log: &[f32]) -> Vec<f32> {
    g_log.iter().map(|&g| (g as f64).exp() as f32).collect()
}

/// The L2 normalisation that Hugging Face's rule and fla's kernel apply to q and k when
/// `use_qk_l2norm_in_kernel=True` (`x / sqrt(sum(x^2) + 1e-6)` per head row of `dim`),
/// times `scale` (`1/sqrt(Dk)` for q, 1 for k). Here the caller does it.
pub fn l2norm_scale(x: &[f32], dim: usize, scale: f64) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(dim) {
        let ss: f64 = row.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let inv = scale / (ss + 1e-6).sqrt();
        out.extend(row.iter().map(|&v| ((v as f64) * inv) as f32));
    }
    out
}

/// q times `scale` (`1/sqrt(Dk)`): for libraries that take q already normalised but
/// scale it inside their rule (ggml's `ggml_gated_delta_net`, fla without in-kernel
/// L2 norm).
pub fn scale(x: &[f32], scale: f64) -> Vec<f32> {
    x.iter().map(|&v| ((v as f64) * scale) as f32).collect()
}

/// A state stored `[N, Hv, Dk, Dv]` (Hugging Face, fla's default, vLLM) <-> this crate's
/// `[N, Hv, Dv, Dk]`: transpose the last two axes. `rows` x `cols` is the source's
/// trailing matrix; call with (Dk, Dv) on the way in and (Dv, Dk) on the way back.
pub fn swap_last_two(state: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; state.len()];
    for (src, dst) in state.chunks(rows * cols).zip(out.chunks_mut(rows * cols)) {
        for r in 0..rows {
            for c in 0..cols {
                dst[c * rows + r] = src[r * cols + c];
            }
        }
    }
    out
}

/// mlx-lm's `gated_delta_update` takes the raw gate inputs and computes, before its
/// kernel: `beta = sigmoid(b)`, `g = exp(-exp(A_log) * softplus(a + dt_bias))`
/// (`compute_g`). `a`, `b`: `[B, T, Hv]`; `a_log`, `dt_bias`: `[Hv]`. Returns `(g, beta)`
/// in this crate's convention (the same as mlx-lm's kernel's).
pub fn mlx_gates(a: &[f32], b: &[f32], a_log: &[f32], dt_bias: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let hv = a_log.len();
    let g = a
        .iter()
        .enumerate()
        .map(|(i, &a)| mlx_decay(a, a_log[i % hv], dt_bias[i % hv]) as f32)
        .collect();
    let beta = b.iter().map(|&b| sigmoid(b as f64) as f32).collect();
    (g, beta)
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `softplus(x) = log(1 + exp(x))` (mlx's `nn.softplus` is `logaddexp(x, 0)`).
fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

/// mlx-lm's `compute_g`, per element, in f64.
fn mlx_decay(a: f32, a_log: f32, dt_bias: f32) -> f64 {
    (-(a_log as f64).exp() * softplus(a as f64 + dt_bias as f64)).exp()
}

// ---------------------------------------------------------------------------------
// Shapes, inputs, the crate's call and the comparison.
// ---------------------------------------------------------------------------------

const DIMS: Dims = Dims {
    b: 2,
    t: 5,
    hk: 2,
    hv: 4,
    dk: 8,
    dv: 6,
};

impl Dims {
    fn qk(&self) -> usize {
        self.b * self.t * self.hk * self.dk
    }
    fn v(&self) -> usize {
        self.b * self.t * self.hv * self.dv
    }
    fn gates(&self) -> usize {
        self.b * self.t * self.hv
    }
    fn state(&self) -> usize {
        self.b * self.hv * self.dv * self.dk
    }
    fn group(&self) -> usize {
        self.hv / self.hk
    }
}

/// Inputs in the common "log-space g, raw q/k" form most libraries take.
struct Draw {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    /// Log space, in [-0.7, -0.01): decays of 0.5 to 0.99.
    g_log: Vec<f32>,
    /// Already sigmoid'ed.
    beta: Vec<f32>,
    /// In the library's own state layout (any order: it is random).
    state: Vec<f32>,
}

fn draw(d: Dims, seed: u64) -> Draw {
    let mut r = Rng::new(seed);
    Draw {
        q: r.vec(d.qk(), -1.0, 1.0),
        k: r.vec(d.qk(), -1.0, 1.0),
        v: r.vec(d.v(), -1.0, 1.0),
        g_log: r.vec(d.gates(), -0.7, -0.01),
        beta: r.vec(d.gates(), 0.05, 0.95),
        state: r.vec(d.state(), -0.5, 0.5),
    }
}

/// Inputs already in this crate's convention.
struct Ours {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    beta: Vec<f32>,
    state: Vec<f32>,
    mask: Option<Vec<u32>>,
}

/// `Backend::cpu().record` in f32: `(y [B, T, Hv, Dv], state [B, Hv, Dv, Dk])`.
fn record(d: Dims, layout: GqaLayout, x: &Ours) -> (Vec<f32>, Vec<f32>) {
    let shape = GdnShape::new(d.b, d.t, d.hk, d.hv, d.dk, d.dv).unwrap();
    let inputs = record_inputs!(x, x.mask.as_deref());
    let out: Recorded<f32, f32, f32> = Backend::cpu()
        .record(&shape, layout, &inputs, &x.state)
        .unwrap();
    (out.y, out.state)
}

/// `max |want - got| / max |want|`.
fn rel_err(want: &[f64], got: &[f32]) -> f64 {
    assert_eq!(want.len(), got.len());
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    let diff = want
        .iter()
        .zip(got)
        .fold(0.0f64, |m, (w, g)| m.max((w - *g as f64).abs()));
    diff / scale.max(1e-30)
}

const TOL: f64 = 1e-5;
/// A left-out conversion step must miss by at least this much.
const FAR: f64 = 1e-2;

/// y and state both match the library's reference.
fn assert_matches(what: &str, want: &(Vec<f64>, Vec<f64>), got: &(Vec<f32>, Vec<f32>)) {
    let (ey, es) = (rel_err(&want.0, &got.0), rel_err(&want.1, &got.1));
    eprintln!("{what}: y rel err {ey:.2e}, state rel err {es:.2e}");
    assert!(
        ey < TOL && es < TOL,
        "{what}: y rel err {ey:e}, state rel err {es:e} (tolerance {TOL:e})"
    );
}

/// A wrong conversion: y or the state misses by a wide margin.
fn assert_misses(what: &str, want: &(Vec<f64>, Vec<f64>), got: &(Vec<f32>, Vec<f32>)) {
    let (ey, es) = (rel_err(&want.0, &got.0), rel_err(&want.1, &got.1));
    eprintln!("{what} (must miss): y rel err {ey:.2e}, state rel err {es:.2e}");
    assert!(
        ey.max(es) > FAR,
        "{what} should miss the reference, but y rel err {ey:e}, state rel err {es:e}"
    );
}

fn widen(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

// ---------------------------------------------------------------------------------
// Hugging Face transformers: Qwen3NextGatedDeltaNet + torch_recurrent_gated_delta_rule
// ---------------------------------------------------------------------------------

/// `Qwen3NextGatedDeltaNet.forward` (huggingface/transformers,
/// src/transformers/models/qwen3_next/modeling_qwen3_next.py): q and k come out of the
/// projection with Hk heads `[B, T, Hk, Dk]` and are `repeat_interleave`d to Hv heads
/// (value head `hv` reads key head `hv / (Hv/Hk)`: Blocked) before the rule.
fn repeat_interleave(x: &[f32], d: Dims) -> Vec<f32> {
    let mut out = Vec::with_capacity(d.b * d.t * d.hv * d.dk);
    for bt in 0..d.b * d.t {
        for hv in 0..d.hv {
            let hk = hv / d.group();
            let at = (bt * d.hk + hk) * d.dk;
            out.extend_from_slice(&x[at..at + d.dk]);
        }
    }
    out
}

/// `torch_recurrent_gated_delta_rule(query, key, value, g, beta, initial_state,
/// output_final_state=True, use_qk_l2norm_in_kernel=True)` in f64: inputs
/// `[B, T, H, D]` (H = Hv after the repeat), g in log space `[B, T, H]`, beta already
/// sigmoid'ed; it L2-normalises q and k (`x * rsqrt(sum(x^2) + 1e-6)`), transposes to
/// `[B, H, T, D]`, scales q by `1/sqrt(Dk)`, and keeps the state `[B, H, Dk, Dv]`.
/// Returns `(core_attn_out [B, T, H, Dv], last_recurrent_state [B, H, Dk, Dv])`.
fn hf_recurrent(
    query: &[f32],
    key: &[f32],
    value: &[f32],
    g: &[f32],
    beta: &[f32],
    initial_state: &[f32],
    d: Dims,
) -> (Vec<f64>, Vec<f64>) {
    let (bsz, t_len, h, dk, dv) = (d.b, d.t, d.hv, d.dk, d.dv);
    let l2 = |x: &[f32]| -> Vec<f64> {
        let mut out = Vec::with_capacity(x.len());
        for row in x.chunks(dk) {
            let ss: f64 = row.iter().map(|&v| (v as f64).powi(2)).sum();
            let inv = 1.0 / (ss + 1e-6).sqrt();
            out.extend(row.iter().map(|&v| v as f64 * inv));
        }
        out
    };
    // [B, T, H, D] -> [B, H, T, D]
    let to_bhtd = |x: &[f64], dim: usize| -> Vec<f64> {
        let mut out = vec![0.0; x.len()];
        for b in 0..bsz {
            for t in 0..t_len {
                for hh in 0..h {
                    for i in 0..dim {
                        out[((b * h + hh) * t_len + t) * dim + i] =
                            x[((b * t_len + t) * h + hh) * dim + i];
                    }
                }
            }
        }
        out
    };
    let scale = 1.0 / (dk as f64).sqrt();
    let q: Vec<f64> = to_bhtd(&l2(query), dk).iter().map(|x| x * scale).collect();
    let k = to_bhtd(&l2(key), dk);
    let v = to_bhtd(&widen(value), dv);
    let gg = to_bhtd(&widen(g), 1);
    let bb = to_bhtd(&widen(beta), 1);

    let mut state = widen(initial_state); // [B, H, Dk, Dv]
    let mut out = vec![0.0; bsz * h * t_len * dv]; // [B, H, T, Dv]
    for b in 0..bsz {
        for hh in 0..h {
            let bh = b * h + hh;
            let s = &mut state[bh * dk * dv..(bh + 1) * dk * dv];
            for t in 0..t_len {
                let q_t = &q[(bh * t_len + t) * dk..][..dk];
                let k_t = &k[(bh * t_len + t) * dk..][..dk];
                let v_t = &v[(bh * t_len + t) * dv..][..dv];
                let g_t = gg[bh * t_len + t].exp();
                let beta_t = bb[bh * t_len + t];
                s.iter_mut().for_each(|x| *x *= g_t);
                for j in 0..dv {
                    let kv_mem: f64 = (0..dk).map(|i| s[i * dv + j] * k_t[i]).sum();
                    let delta = (v_t[j] - kv_mem) * beta_t;
                    for i in 0..dk {
                        s[i * dv + j] += k_t[i] * delta;
                    }
                }
                for j in 0..dv {
                    out[(bh * t_len + t) * dv + j] = (0..dk).map(|i| s[i * dv + j] * q_t[i]).sum();
                }
            }
        }
    }
    // core_attn_out.transpose(1, 2): [B, H, T, Dv] -> [B, T, H, Dv]
    let mut y = vec![0.0; out.len()];
    for b in 0..bsz {
        for hh in 0..h {
            for t in 0..t_len {
                for j in 0..dv {
                    y[((b * t_len + t) * h + hh) * dv + j] =
                        out[((b * h + hh) * t_len + t) * dv + j];
                }
            }
        }
    }
    (y, state)
}

/// Hugging Face -> here: q, k at Hk heads (before `repeat_interleave`), L2-normalised by
/// the caller and q scaled by `1/sqrt(Dk)`; `g = exp(g)`; beta as is; the state's last
/// two axes swapped; Blocked.
fn hf_to_ours(x: &Draw, d: Dims) -> Ours {
    Ours {
        q: l2norm_scale(&x.q, d.dk, 1.0 / (d.dk as f64).sqrt()),
        k: l2norm_scale(&x.k, d.dk, 1.0),
        v: x.v.clone(),
        g: exp_gate(&x.g_log),
        beta: x.beta.clone(),
        state: swap_last_two(&x.state, d.dk, d.dv),
        mask: None,
    }
}

#[test]
fn hugging_face_transformers_qwen3_next() {
    let d = DIMS;
    let x = draw(d, 0x4855_4747);
    // HF's state is [B, Hv, Dk, Dv]: `x.state` is read in that layout.
    let want = hf_recurrent(
        &repeat_interleave(&x.q, d),
        &repeat_interleave(&x.k, d),
        &x.v,
        &x.g_log,
        &x.beta,
        &x.state,
        d,
    );
    let ours = hf_to_ours(&x, d);
    let (y, state) = record(d, GqaLayout::Blocked, &ours);
    // y comes back in HF's layout [B, T, Hv, Dv]; the state goes back to [B, Hv, Dk, Dv].
    let got = (y, swap_last_two(&state, d.dv, d.dk));
    assert_matches("transformers", &want, &got);

    // Each step of the conversion matters.
    let (y, state) = record(d, GqaLayout::Blocked, &ours);
    assert_misses("state not transposed back", &want, &(y, state));
    let raw_state = Ours {
        state: x.state.clone(),
        ..hf_to_ours(&x, d)
    };
    let (y, state) = record(d, GqaLayout::Blocked, &raw_state);
    assert_misses(
        "state not transposed in",
        &want,
        &(y, swap_last_two(&state, d.dv, d.dk)),
    );
    let log_g = Ours {
        g: x.g_log.clone(),
        ..hf_to_ours(&x, d)
    };
    let (y, state) = record(d, GqaLayout::Blocked, &log_g);
    assert_misses(
        "g left in log space",
        &want,
        &(y, swap_last_two(&state, d.dv, d.dk)),
    );
    let unscaled = Ours {
        q: l2norm_scale(&x.q, d.dk, 1.0),
        ..hf_to_ours(&x, d)
    };
    let (y, state) = record(d, GqaLayout::Blocked, &unscaled);
    assert_misses(
        "q not scaled",
        &want,
        &(y, swap_last_two(&state, d.dv, d.dk)),
    );
    let (y, state) = record(d, GqaLayout::Tiled, &ours);
    assert_misses(
        "Tiled layout",
        &want,
        &(y, swap_last_two(&state, d.dv, d.dk)),
    );
}

// ---------------------------------------------------------------------------------
// fla / vLLM / SGLang: fused_recurrent_gated_delta_rule
// ---------------------------------------------------------------------------------

/// `fused_recurrent_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state,
/// output_final_state=True, use_qk_l2norm_in_kernel, state_v_first)` in f64, as its
/// Triton kernel computes (fla-org/flash-linear-attention,
/// fla/ops/gated_delta_rule/fused_recurrent.py; vLLM's copy
/// vllm/model_executor/layers/fla/ops/fused_recurrent.py; SGLang's
/// python/sglang/srt/layers/attention/fla/fused_recurrent.py): q, k `[B, T, H, K]` with
/// H = Hk, v `[B, T, HV, V]`, g in log space and beta `[B, T, HV]`; value head `i_hv`
/// reads key head `i_hv // (HV // H)` (Blocked); `scale` defaults to `K^-0.5` and
/// multiplies q inside; with `use_qk_l2norm_in_kernel` it first divides q and k by
/// `sqrt(sum(x^2) + 1e-6)`. The state is `[N, HV, K, V]`, or `[N, HV, V, K]` with
/// `state_v_first=True` (fla >= 0.5.1; SGLang's copy always). Returns `(o [B, T, HV, V],
/// final_state)` in the same state layout as the initial one.
fn fla_fused_recurrent(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    h0: &[f32],
    d: Dims,
    use_qk_l2norm_in_kernel: bool,
    state_v_first: bool,
) -> (Vec<f64>, Vec<f64>) {
    let (h, hv_n, kk, vv, t_len) = (d.hk, d.hv, d.dk, d.dv, d.t);
    let scale = (kk as f64).powf(-0.5);
    let at = |i_k: usize, i_v: usize| {
        if state_v_first {
            i_v * kk + i_k
        } else {
            i_k * vv + i_v
        }
    };
    let mut o = vec![0.0; d.v()];
    let mut ht = vec![0.0; d.state()];
    for i_n in 0..d.b {
        for i_hv in 0..hv_n {
            let i_h = i_hv / (hv_n / h);
            let i_nh = i_n * hv_n + i_hv;
            let mut b_h = widen(&h0[i_nh * kk * vv..(i_nh + 1) * kk * vv]);
            for t in 0..t_len {
                let bos = i_n * t_len + t;
                let mut b_q = widen(&q[(bos * h + i_h) * kk..][..kk]);
                let mut b_k = widen(&k[(bos * h + i_h) * kk..][..kk]);
                let mut b_v = widen(&v[(bos * hv_n + i_hv) * vv..][..vv]);
                if use_qk_l2norm_in_kernel {
                    let nq = (dot(&b_q, &b_q) + 1e-6).sqrt();
                    let nk = (dot(&b_k, &b_k) + 1e-6).sqrt();
                    b_q.iter_mut().for_each(|x| *x /= nq);
                    b_k.iter_mut().for_each(|x| *x /= nk);
                }
                b_q.iter_mut().for_each(|x| *x *= scale);
                let b_g = (g[bos * hv_n + i_hv] as f64).exp();
                b_h.iter_mut().for_each(|x| *x *= b_g);
                let b_beta = beta[bos * hv_n + i_hv] as f64;
                for j in 0..vv {
                    let kv: f64 = (0..kk).map(|i| b_h[at(i, j)] * b_k[i]).sum();
                    b_v[j] = (b_v[j] - kv) * b_beta;
                }
                for i in 0..kk {
                    for j in 0..vv {
                        b_h[at(i, j)] += b_k[i] * b_v[j];
                    }
                }
                for j in 0..vv {
                    o[(bos * hv_n + i_hv) * vv + j] = (0..kk).map(|i| b_h[at(i, j)] * b_q[i]).sum();
                }
            }
            ht[i_nh * kk * vv..(i_nh + 1) * kk * vv].copy_from_slice(&b_h);
        }
    }
    (o, ht)
}

/// fla / vLLM / SGLang -> here: with `use_qk_l2norm_in_kernel` the caller now does the
/// L2 norm; either way q takes the kernel's default `scale = 1/sqrt(K)`; `g = exp(g)`;
/// beta as is; a K-first state (`[N, HV, K, V]`: fla's default, vLLM) has its last two
/// axes swapped, a V-first one (`state_v_first=True`, SGLang) is already this crate's;
/// Blocked.
fn fla_to_ours(x: &Draw, d: Dims, l2norm_in_kernel: bool, state_v_first: bool) -> Ours {
    let s = 1.0 / (d.dk as f64).sqrt();
    let (q, k) = if l2norm_in_kernel {
        (l2norm_scale(&x.q, d.dk, s), l2norm_scale(&x.k, d.dk, 1.0))
    } else {
        (scale(&x.q, s), x.k.clone())
    };
    let state = if state_v_first {
        x.state.clone()
    } else {
        swap_last_two(&x.state, d.dk, d.dv)
    };
    Ours {
        q,
        k,
        v: x.v.clone(),
        g: exp_gate(&x.g_log),
        beta: x.beta.clone(),
        state,
        mask: None,
    }
}

/// The crate's state back to fla's layout.
fn state_to_fla(state: Vec<f32>, d: Dims, state_v_first: bool) -> Vec<f32> {
    if state_v_first {
        state
    } else {
        swap_last_two(&state, d.dv, d.dk)
    }
}

#[test]
fn fla_vllm_sglang_fused_recurrent() {
    let d = DIMS;
    for l2 in [true, false] {
        for v_first in [false, true] {
            let what = format!("fla (use_qk_l2norm_in_kernel={l2}, state_v_first={v_first})");
            let mut x = draw(d, 0xf1a0 + 2 * l2 as u64 + v_first as u64);
            if !l2 {
                // Without the in-kernel norm the caller hands unit-norm k (fla's example).
                x.k = l2norm_scale(&x.k, d.dk, 1.0);
            }
            let want = fla_fused_recurrent(
                &x.q, &x.k, &x.v, &x.g_log, &x.beta, &x.state, d, l2, v_first,
            );
            let ours = fla_to_ours(&x, d, l2, v_first);
            let (y, state) = record(d, GqaLayout::Blocked, &ours);
            assert_matches(&what, &want, &(y, state_to_fla(state, d, v_first)));

            // The state layout flag decides the transposition: the other choice misses.
            let wrong = Ours {
                state: fla_to_ours(&x, d, l2, !v_first).state,
                ..fla_to_ours(&x, d, l2, v_first)
            };
            let (y, state) = record(d, GqaLayout::Blocked, &wrong);
            assert_misses(
                &format!("{what}, wrong state layout"),
                &want,
                &(y, state_to_fla(state, d, !v_first)),
            );
            let log_g = Ours {
                g: x.g_log.clone(),
                ..fla_to_ours(&x, d, l2, v_first)
            };
            let (y, state) = record(d, GqaLayout::Blocked, &log_g);
            assert_misses(
                &format!("{what}, g in log space"),
                &want,
                &(y, state_to_fla(state, d, v_first)),
            );
            let (y, state) = record(d, GqaLayout::Tiled, &ours);
            assert_misses(
                &format!("{what}, Tiled"),
                &want,
                &(y, state_to_fla(state, d, v_first)),
            );
        }
    }
}

// ---------------------------------------------------------------------------------
// mlx-lm: gated_delta_update (qwen3_next.py, gated_delta.py)
// ---------------------------------------------------------------------------------

/// What `Qwen3NextGatedDeltaNet.__call__` (ml-explore/mlx-lm, mlx_lm/models/qwen3_next.py)
/// does to q and k before `gated_delta_update`: `inv_scale = Dk^-0.5`,
/// `q = inv_scale^2 * rms_norm(q, eps=1e-6)`, `k = inv_scale * rms_norm(k, eps=1e-6)`
/// (no weight), i.e. about `l2norm(q) / sqrt(Dk)` and `l2norm(k)`: already this crate's
/// convention, so it is part of the draw, not of the conversion.
fn mlx_layer_qk(x: &[f32], dk: usize, pow: i32) -> Vec<f32> {
    let inv_scale = (dk as f64).powf(-0.5);
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(dk) {
        let ms: f64 = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / dk as f64;
        let r = 1.0 / (ms + 1e-6).sqrt();
        out.extend(
            row.iter()
                .map(|&v| (inv_scale.powi(pow) * v as f64 * r) as f32),
        );
    }
    out
}

/// `gated_delta_update(q, k, v, a, b, A_log, dt_bias, state, mask)` in f64, as its Metal
/// kernel computes (ml-explore/mlx-lm, mlx_lm/models/gated_delta.py): `beta =
/// sigmoid(b)`, `g = exp(-exp(A_log) * softplus(a + dt_bias))`, then per step with q, k
/// `[B, T, Hk, Dk]`, v `[B, T, Hv, Dv]`, state `[B, Hv, Dv, Dk]`, key head
/// `hv / (Hv / Hk)` (Blocked); a masked step (`mask[b, t] == 0`) writes y = 0 and keeps
/// the state. Returns `(y [B, T, Hv, Dv], state [B, Hv, Dv, Dk])`.
fn mlx_gated_delta_update(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    a: &[f32],
    b: &[f32],
    a_log: &[f32],
    dt_bias: &[f32],
    state: &[f32],
    mask: &[u32],
    d: Dims,
) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0; d.v()];
    let mut out = widen(state);
    for bi in 0..d.b {
        for hv in 0..d.hv {
            let hk = hv / (d.hv / d.hk);
            let n = bi * d.hv + hv;
            for dv in 0..d.dv {
                let s = &mut out[(n * d.dv + dv) * d.dk..][..d.dk];
                for t in 0..d.t {
                    if mask[bi * d.t + t] == 0 {
                        continue; // y stays 0
                    }
                    let gi = (bi * d.t + t) * d.hv + hv;
                    let g = mlx_decay(a[gi], a_log[hv], dt_bias[hv]);
                    let beta = sigmoid(b[gi] as f64);
                    let kk = widen(&k[((bi * d.t + t) * d.hk + hk) * d.dk..][..d.dk]);
                    let qq = widen(&q[((bi * d.t + t) * d.hk + hk) * d.dk..][..d.dk]);
                    s.iter_mut().for_each(|x| *x *= g);
                    let delta =
                        (v[((bi * d.t + t) * d.hv + hv) * d.dv + dv] as f64 - dot(s, &kk)) * beta;
                    s.iter_mut().zip(&kk).for_each(|(x, k)| *x += k * delta);
                    y[((bi * d.t + t) * d.hv + hv) * d.dv + dv] = dot(s, &qq);
                }
            }
        }
    }
    (y, out)
}

#[test]
fn mlx_lm_gated_delta_update() {
    let d = DIMS;
    let x = draw(d, 0x6d6c78);
    let mut r = Rng::new(0x6d6c78 + 1);
    // The raw gate inputs mlx-lm's layer hands to gated_delta_update.
    let a = r.vec(d.gates(), -3.0, 3.0);
    let b = r.vec(d.gates(), -3.0, 3.0);
    let a_log = r.vec(d.hv, -2.0, 0.5);
    let dt_bias = r.vec(d.hv, -1.0, 1.0);
    // A padding mask like create_ssm_mask's: sequence 1 starts two steps late.
    let mask: Vec<u32> = (0..d.b * d.t)
        .map(|i| u32::from(i / d.t == 0 || i % d.t >= 2))
        .collect();
    let q = mlx_layer_qk(&x.q, d.dk, 2);
    let k = mlx_layer_qk(&x.k, d.dk, 1);
    let want = mlx_gated_delta_update(&q, &k, &x.v, &a, &b, &a_log, &dt_bias, &x.state, &mask, d);

    let (g, beta) = mlx_gates(&a, &b, &a_log, &dt_bias);
    let ours = Ours {
        q,
        k,
        v: x.v.clone(),
        g,
        beta,
        state: x.state.clone(),
        mask: Some(mask),
    };
    let got = record(d, GqaLayout::Blocked, &ours);
    assert_matches("mlx-lm", &want, &got);

    // Each step of the conversion matters.
    let log_g: Vec<f32> = a
        .iter()
        .enumerate()
        .map(|(i, &a)| mlx_decay(a, a_log[i % d.hv], dt_bias[i % d.hv]).ln() as f32)
        .collect();
    let wrong = Ours {
        g: log_g,
        ..ours_clone(&ours)
    };
    assert_misses(
        "mlx-lm, g in log space",
        &want,
        &record(d, GqaLayout::Blocked, &wrong),
    );
    let raw_b = Ours {
        beta: b.clone(),
        ..ours_clone(&ours)
    };
    assert_misses(
        "mlx-lm, beta not sigmoid'ed",
        &want,
        &record(d, GqaLayout::Blocked, &raw_b),
    );
    let flipped = Ours {
        state: swap_last_two(&x.state, d.dv, d.dk),
        ..ours_clone(&ours)
    };
    let (y, state) = record(d, GqaLayout::Blocked, &flipped);
    assert_misses(
        "mlx-lm, state transposed",
        &want,
        &(y, swap_last_two(&state, d.dk, d.dv)),
    );
    assert_misses("mlx-lm, Tiled", &want, &record(d, GqaLayout::Tiled, &ours));
}

fn ours_clone(x: &Ours) -> Ours {
    Ours {
        q: x.q.clone(),
        k: x.k.clone(),
        v: x.v.clone(),
        g: x.g.clone(),
        beta: x.beta.clone(),
        state: x.state.clone(),
        mask: x.mask.clone(),
    }
}

// ---------------------------------------------------------------------------------
// llama.cpp: ggml_gated_delta_net (GGUF with V heads in tiled order)
// ---------------------------------------------------------------------------------

/// The converter's `_reorder_v_heads` (llama.cpp, `_LinearAttentionVReorderBase`, used
/// for Qwen3.5 / 3.6): V heads grouped by key head in Hugging Face's order
/// `[K0: v0..v(r-1), K1: ...]` are stored tiled, `[K0 v0, K1 v0, ..., K0 v1, ...]`, so
/// that GGUF value head `j * Hk + k` is Hugging Face head `k * r + j`. Every per-V-head
/// tensor (v's projection, a, b, A_log, dt_bias, ...) is reordered alike, so g, beta, v
/// and the state all arrive in GGUF order. Reorders `[N, Hv, width]` rows.
fn reorder_v_heads(x: &[f32], d: Dims, width: usize) -> Vec<f32> {
    let r = d.group();
    let mut out = vec![0.0; x.len()];
    for (src, dst) in x.chunks(d.hv * width).zip(out.chunks_mut(d.hv * width)) {
        for k in 0..d.hk {
            for j in 0..r {
                let (to, from) = ((j * d.hk + k) * width, (k * r + j) * width);
                dst[to..to + width].copy_from_slice(&src[from..from + width]);
            }
        }
    }
    out
}

/// `ggml_gated_delta_net(ctx, q, k, v, g, beta, state, 1)` in f64, as the CPU op computes
/// it (ggml-org/llama.cpp, ggml/src/ggml-cpu/ops.cpp,
/// `ggml_compute_forward_gated_delta_net_one_chunk`). ggml lists dims innermost first:
/// q, k `ne = [S_k, H_k, n_tokens, n_seqs]` = row-major `[B, T, Hk, Dk]`; v `[B, T, Hv,
/// Dv]`; g (log space, the op takes `expf`) and beta (sigmoid'ed by the graph) `[B, T,
/// Hv]`; state `ne = [S_v, S_v, H_v, n_seqs]` with `s[j * S_v + i] = S[i][j]` (i over
/// k, j over v) = row-major `[B, Hv, Dv, Dk]`; value head `iv1` reads key head
/// `iv1 % H_k` (Tiled); the output is scaled by `1/sqrt(S_v)` (= q scaled). q and k
/// arrive L2-normalised (`ggml_l2_norm` in the graph). Needs `S_k == S_v`.
fn ggml_gated_delta_net(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    state: &[f32],
    d: Dims,
) -> (Vec<f64>, Vec<f64>) {
    assert_eq!(d.dk, d.dv, "ggml_gated_delta_net needs S_k == S_v");
    let (sv, h, hk) = (d.dv, d.hv, d.hk);
    let scale = 1.0 / (sv as f64).sqrt();
    let mut attn = vec![0.0; d.v()];
    let mut s_out = widen(state);
    for iv3 in 0..d.b {
        for iv1 in 0..h {
            let iq1 = iv1 % hk;
            let s = &mut s_out[(iv3 * h + iv1) * sv * sv..][..sv * sv];
            for t in 0..d.t {
                let q_d = widen(&q[((iv3 * d.t + t) * hk + iq1) * sv..][..sv]);
                let k_d = widen(&k[((iv3 * d.t + t) * hk + iq1) * sv..][..sv]);
                let v_d = &v[((iv3 * d.t + t) * h + iv1) * sv..][..sv];
                let beta_val = beta[(iv3 * d.t + t) * h + iv1] as f64;
                let gexp = (g[(iv3 * d.t + t) * h + iv1] as f64).exp();
                s.iter_mut().for_each(|x| *x *= gexp);
                let mut delta = vec![0.0; sv];
                for j in 0..sv {
                    delta[j] = (v_d[j] as f64 - dot(&s[j * sv..(j + 1) * sv], &k_d)) * beta_val;
                }
                for j in 0..sv {
                    for i in 0..sv {
                        s[j * sv + i] += delta[j] * k_d[i];
                    }
                }
                for j in 0..sv {
                    attn[((iv3 * d.t + t) * h + iv1) * sv + j] =
                        dot(&s[j * sv..(j + 1) * sv], &q_d) * scale;
                }
            }
        }
    }
    (attn, s_out)
}

/// llama.cpp -> here: q (already L2-normalised by the graph) scaled by `1/sqrt(Dk)`,
/// k as is, `g = exp(g)`, beta as is, the state as is (ggml's `[S_v, S_v, H_v, n_seqs]`
/// is this crate's `[B, Hv, Dv, Dk]`), Tiled (the GGUF's V-head order).
fn ggml_to_ours(q: &[f32], k: &[f32], x: &Draw, d: Dims) -> Ours {
    Ours {
        q: scale(q, 1.0 / (d.dk as f64).sqrt()),
        k: k.to_vec(),
        v: x.v.clone(),
        g: exp_gate(&x.g_log),
        beta: x.beta.clone(),
        state: x.state.clone(),
        mask: None,
    }
}

#[test]
fn llama_cpp_ggml_gated_delta_net() {
    let d = Dims { dv: 8, ..DIMS };
    // Drawn in Hugging Face's head order, then stored the way the GGUF converter does.
    let hf = draw(d, 0x6767_6d6c);
    let x = Draw {
        v: reorder_v_heads(&hf.v, d, d.dv),
        g_log: reorder_v_heads(&hf.g_log, d, 1),
        beta: reorder_v_heads(&hf.beta, d, 1),
        state: reorder_v_heads(&hf.state, d, d.dv * d.dk),
        q: hf.q.clone(),
        k: hf.k.clone(),
    };
    let q = l2norm_scale(&x.q, d.dk, 1.0);
    let k = l2norm_scale(&x.k, d.dk, 1.0);
    let want = ggml_gated_delta_net(&q, &k, &x.v, &x.g_log, &x.beta, &x.state, d);
    let ours = ggml_to_ours(&q, &k, &x, d);
    let got = record(d, GqaLayout::Tiled, &ours);
    assert_matches("llama.cpp", &want, &got);

    // The same computation in Hugging Face's head order is Blocked: y and the state
    // are the GGUF ones with the V heads put back.
    let hf_order = Ours {
        v: hf.v.clone(),
        g: exp_gate(&hf.g_log),
        beta: hf.beta.clone(),
        state: hf.state.clone(),
        ..ggml_to_ours(&q, &k, &x, d)
    };
    let (y, state) = record(d, GqaLayout::Blocked, &hf_order);
    let back = (
        reorder_v_heads(&y, d, d.dv),
        reorder_v_heads(&state, d, d.dv * d.dk),
    );
    assert_matches("llama.cpp in Hugging Face head order", &want, &back);

    // Each step of the conversion matters; with Dk == Dv a transposed state has the
    // right size and is silently wrong.
    assert_misses(
        "llama.cpp, Blocked",
        &want,
        &record(d, GqaLayout::Blocked, &ours),
    );
    let unscaled = Ours {
        q: q.clone(),
        ..ggml_to_ours(&q, &k, &x, d)
    };
    assert_misses(
        "llama.cpp, q not scaled",
        &want,
        &record(d, GqaLayout::Tiled, &unscaled),
    );
    let log_g = Ours {
        g: x.g_log.clone(),
        ..ggml_to_ours(&q, &k, &x, d)
    };
    assert_misses(
        "llama.cpp, g in log space",
        &want,
        &record(d, GqaLayout::Tiled, &log_g),
    );
    let flipped = Ours {
        state: swap_last_two(&x.state, d.dk, d.dv),
        ..ggml_to_ours(&q, &k, &x, d)
    };
    let (y, state) = record(d, GqaLayout::Tiled, &flipped);
    assert_misses(
        "llama.cpp, state transposed",
        &want,
        &(y, swap_last_two(&state, d.dv, d.dk)),
    );
}
