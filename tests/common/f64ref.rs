//! The one f64 reference of the tests: docs/SPEC.md's record, replay and repeat, written
//! from docs/SPEC.md alone (not from `src/cpu.rs`).
//!
//! Plain nested loops, f64 arithmetic and its own row-major index arithmetic: it reads
//! the dimensions off a `GdnShape` but calls none of deltatape's index methods, layout
//! mapping or `cpu` module. It takes the inputs after rounding to their storage dtypes,
//! widened to f64 (`widen`, `Inputs64`), and rounds nothing on the way, so the only
//! differences a backend can show against it are f32-vs-f64 arithmetic and the single
//! rounding of each output to its storage dtype.
#![allow(dead_code, clippy::needless_range_loop, clippy::too_many_arguments)]

use super::Typed;
use deltatape::{Element, GdnShape, GqaLayout, Recorded};

/// Widen any storage dtype to f64 (exact: every f16, bf16 and f32 is an f64).
pub fn widen<E: Element>(x: &[E]) -> Vec<f64> {
    x.iter().map(|v| v.to_f32() as f64).collect()
}

/// The dimensions as plain numbers, for the reference's own index arithmetic (and
/// `tests/conventions.rs`'s).
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub b: usize,
    pub t: usize,
    pub hk: usize,
    pub hv: usize,
    pub dk: usize,
    pub dv: usize,
}

impl Dims {
    pub fn of(s: &GdnShape) -> Self {
        Dims {
            b: s.batch(),
            t: s.steps(),
            hk: s.key_heads(),
            hv: s.value_heads(),
            dk: s.key_dim(),
            dv: s.value_dim(),
        }
    }

    /// mask / accepted-step index `[b, t]`.
    fn step(&self, b: usize, t: usize) -> usize {
        b * self.t + t
    }

    /// g / beta index `[b, t, hv]`.
    fn gate(&self, b: usize, t: usize, hv: usize) -> usize {
        self.step(b, t) * self.hv + hv
    }

    /// v / y / delta index `[b, t, hv, dv]`.
    fn value(&self, b: usize, t: usize, hv: usize, dv: usize) -> usize {
        self.gate(b, t, hv) * self.dv + dv
    }

    /// Start of the q / k row `[b, t, hk, :]`.
    fn key_row(&self, b: usize, t: usize, hk: usize) -> usize {
        (self.step(b, t) * self.hk + hk) * self.dk
    }

    /// Start of the tape k row `[b, t, hv, :]`.
    fn tape_k_row(&self, b: usize, t: usize, hv: usize) -> usize {
        self.gate(b, t, hv) * self.dk
    }

    /// Start of the state row `[b, hv, dv, :]`.
    fn state_row(&self, b: usize, hv: usize, dv: usize) -> usize {
        ((b * self.hv + hv) * self.dv + dv) * self.dk
    }
}

/// docs/SPEC.md, "GQA layout": the source head serving destination head `h`.
pub fn head(layout: GqaLayout, h: usize, src_heads: usize, dst_heads: usize) -> usize {
    match layout {
        GqaLayout::Blocked => h / (dst_heads / src_heads),
        GqaLayout::Tiled => h % src_heads,
    }
}

/// record's activations, widened to f64.
pub type Inputs64 = Typed<f64>;

impl Inputs64 {
    /// Widen record's activations from their storage dtypes (`A`; the gates `G`).
    pub fn widen<A: Element, G: Element>(q: &[A], k: &[A], v: &[A], g: &[G], beta: &[G]) -> Self {
        Typed::make([q, k, v], [g, beta], widen, widen)
    }
}

impl<A: Element, G: Element> Typed<A, G> {
    /// These activations, widened to f64 for the reference.
    pub fn wide(&self) -> Inputs64 {
        Inputs64::widen(&self.q, &self.k, &self.v, &self.g, &self.beta)
    }
}

/// record's outputs in f64.
#[derive(Clone, Debug)]
pub struct Record64 {
    pub y: Vec<f64>,
    pub state: Vec<f64>,
    pub delta: Vec<f64>,
}

/// docs/SPEC.md, "record", in f64. `steps`, when given, stops sequence `b` after its first
/// `steps[b]` steps: the state is the one after them, and y and delta past them stay 0
/// (the state record over that prefix alone reaches, as the rollback invariant wants).
pub fn record(
    shape: &GdnShape,
    layout: GqaLayout,
    x: &Inputs64,
    mask: Option<&[u32]>,
    state_in: &[f64],
    steps: Option<&[u32]>,
) -> Record64 {
    let d = Dims::of(shape);
    assert_eq!(x.q.len(), d.b * d.t * d.hk * d.dk, "q");
    assert_eq!(x.k.len(), d.b * d.t * d.hk * d.dk, "k");
    assert_eq!(x.v.len(), d.b * d.t * d.hv * d.dv, "v");
    assert_eq!(x.g.len(), d.b * d.t * d.hv, "g");
    assert_eq!(x.beta.len(), d.b * d.t * d.hv, "beta");
    assert_eq!(state_in.len(), d.b * d.hv * d.dv * d.dk, "state_in");
    if let Some(m) = mask {
        assert_eq!(m.len(), d.b * d.t, "mask");
    }
    if let Some(s) = steps {
        assert_eq!(s.len(), d.b, "steps");
    }
    let mut y = vec![0.0; d.b * d.t * d.hv * d.dv];
    let mut delta = vec![0.0; d.b * d.t * d.hv * d.dv];
    let mut state = state_in.to_vec();
    for b in 0..d.b {
        let t_end = steps.map_or(d.t, |s| s[b] as usize);
        assert!(t_end <= d.t, "steps[{b}] = {t_end} > T = {}", d.t);
        for hv in 0..d.hv {
            let hk = head(layout, hv, d.hk, d.hv);
            for dv in 0..d.dv {
                let s0 = d.state_row(b, hv, dv);
                let s = &mut state[s0..s0 + d.dk];
                for t in 0..t_end {
                    if mask.is_some_and(|m| m[d.step(b, t)] == 0) {
                        continue; // y, delta stay 0; S unchanged
                    }
                    let row = d.key_row(b, t, hk);
                    let gi = d.gate(b, t, hv);
                    let vi = d.value(b, t, hv, dv);
                    for i in 0..d.dk {
                        s[i] *= x.g[gi];
                    }
                    let mut kv = 0.0;
                    for i in 0..d.dk {
                        kv += s[i] * x.k[row + i];
                    }
                    let dl = (x.v[vi] - kv) * x.beta[gi];
                    for i in 0..d.dk {
                        s[i] += x.k[row + i] * dl;
                    }
                    let mut out = 0.0;
                    for i in 0..d.dk {
                        out += s[i] * x.q[row + i];
                    }
                    y[vi] = out;
                    delta[vi] = dl;
                }
            }
        }
    }
    Record64 { y, state, delta }
}

/// docs/SPEC.md, "replay", in f64: the tape (delta, k expanded to value heads, g) replayed
/// onto `snapshot` over each sequence's first `accepted[b]` steps.
pub fn replay(
    shape: &GdnShape,
    tape_delta: &[f64],
    tape_k: &[f64],
    tape_g: &[f64],
    snapshot: &[f64],
    accepted: &[u32],
    mask: Option<&[u32]>,
) -> Vec<f64> {
    let d = Dims::of(shape);
    assert_eq!(tape_delta.len(), d.b * d.t * d.hv * d.dv, "tape_delta");
    assert_eq!(tape_k.len(), d.b * d.t * d.hv * d.dk, "tape_k");
    assert_eq!(tape_g.len(), d.b * d.t * d.hv, "tape_g");
    assert_eq!(snapshot.len(), d.b * d.hv * d.dv * d.dk, "snapshot");
    assert_eq!(accepted.len(), d.b, "accepted");
    if let Some(m) = mask {
        assert_eq!(m.len(), d.b * d.t, "mask");
    }
    let mut state = snapshot.to_vec();
    for b in 0..d.b {
        assert!(accepted[b] as usize <= d.t);
        for hv in 0..d.hv {
            for dv in 0..d.dv {
                let s0 = d.state_row(b, hv, dv);
                for t in 0..accepted[b] as usize {
                    if mask.is_some_and(|m| m[d.step(b, t)] == 0) {
                        continue;
                    }
                    let gt = tape_g[d.gate(b, t, hv)];
                    let dl = tape_delta[d.value(b, t, hv, dv)];
                    let row = d.tape_k_row(b, t, hv);
                    for i in 0..d.dk {
                        state[s0 + i] = state[s0 + i] * gt + tape_k[row + i] * dl;
                    }
                }
            }
        }
    }
    state
}

/// docs/SPEC.md, "repeat": `dst[n, h, i] = src[n, hk(h), i]`, a copy (bit patterns kept).
pub fn repeat<E: Copy>(
    n: usize,
    src_heads: usize,
    dst_heads: usize,
    dim: usize,
    layout: GqaLayout,
    src: &[E],
) -> Vec<E> {
    assert_eq!(src.len(), n * src_heads * dim);
    let mut dst = Vec::with_capacity(n * dst_heads * dim);
    for r in 0..n {
        for h in 0..dst_heads {
            let hs = head(layout, h, src_heads, dst_heads);
            for i in 0..dim {
                dst.push(src[(r * src_heads + hs) * dim + i]);
            }
        }
    }
    dst
}

/// ||got - want|| / max(||want||, tiny) against an f64 reference; every value of `got`
/// must be finite.
pub fn rel_err64<E: Element>(got: &[E], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "length mismatch");
    let (mut num, mut den) = (0f64, 0f64);
    for (x, y) in got.iter().zip(want) {
        let x = x.to_f32() as f64;
        assert!(x.is_finite(), "non-finite output {x}");
        num += (x - y) * (x - y);
        den += y * y;
    }
    num.sqrt() / den.sqrt().max(1e-30)
}

/// Assert `got` matches the f64 reference `want` within `tol` (relative, in norm).
#[track_caller]
pub fn assert_close64<E: Element>(what: &str, got: &[E], want: &[f64], tol: f64) {
    let e = rel_err64(got, want);
    assert!(
        e <= tol,
        "{what}: relative error to f64 {e:.3e} > {tol:.1e}"
    );
}

/// Assert record's outputs `got` match the f64 reference's: y, state and delta each
/// within its storage dtype's tolerance (`A`, `S`, `P`).
#[track_caller]
pub fn assert_record_close64<A: Element, S: Element, P: Element>(
    what: &str,
    got: &Recorded<A, S, P>,
    want: &Record64,
) {
    let tol = |d: deltatape::DType| d.tolerance() as f64;
    assert_close64(&format!("{what}: record y"), &got.y, &want.y, tol(A::DTYPE));
    let state = format!("{what}: record state");
    assert_close64(&state, &got.state, &want.state, tol(S::DTYPE));
    let delta = format!("{what}: record delta");
    assert_close64(&delta, &got.delta, &want.delta, tol(P::DTYPE));
}
