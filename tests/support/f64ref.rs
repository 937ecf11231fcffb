//! An f64 implementation of SPEC.md's record and replay, written from the SPEC alone
//! (not from `src/cpu.rs`), for the property and reliability tests. Inputs are widened
//! from their storage dtype; nothing is rounded on the way.
#![allow(dead_code)]

use deltatape::{Element, GdnShape, GqaLayout};

/// Widen any storage dtype to f64.
pub fn widen<E: Element>(x: &[E]) -> Vec<f64> {
    x.iter().map(|v| v.to_f32() as f64).collect()
}

/// record's outputs in f64.
#[derive(Clone, Debug)]
pub struct Record64 {
    pub y: Vec<f64>,
    pub state: Vec<f64>,
    pub delta: Vec<f64>,
}

/// SPEC.md "record", in f64. `steps` limits each sequence to its first `steps[b]`
/// steps (the state after them); y and delta past that stay 0.
#[allow(clippy::too_many_arguments)]
pub fn record(
    shape: &GdnShape,
    layout: GqaLayout,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    g: &[f64],
    beta: &[f64],
    mask: Option<&[u32]>,
    state_in: &[f64],
    steps: Option<&[u32]>,
) -> Record64 {
    let (bn, tn, hvn, dvn, dk) = (
        shape.batch(),
        shape.steps(),
        shape.value_heads(),
        shape.value_dim(),
        shape.key_dim(),
    );
    let mut out = Record64 {
        y: vec![0.0; shape.v_len()],
        state: state_in.to_vec(),
        delta: vec![0.0; shape.v_len()],
    };
    for b in 0..bn {
        let t_end = steps.map_or(tn, |s| s[b] as usize);
        for hv in 0..hvn {
            let hk = layout.key_head(hv, shape.key_heads(), hvn);
            for dv in 0..dvn {
                let row = shape.state_row(b, hv, dv);
                let s = &mut out.state[row..row + dk];
                for t in 0..t_end {
                    if mask.is_some_and(|m| m[b * tn + t] == 0) {
                        continue;
                    }
                    let kq = shape.qk_row(b, t, hk);
                    let gi = shape.gate_index(b, t, hv);
                    let vi = shape.v_index(b, t, hv, dv);
                    let mut kv = 0.0;
                    for i in 0..dk {
                        s[i] *= g[gi];
                        kv += s[i] * k[kq + i];
                    }
                    let d = (v[vi] - kv) * beta[gi];
                    let mut y = 0.0;
                    for i in 0..dk {
                        s[i] += k[kq + i] * d;
                        y += s[i] * q[kq + i];
                    }
                    out.y[vi] = y;
                    out.delta[vi] = d;
                }
            }
        }
    }
    out
}

/// SPEC.md "replay", in f64.
pub fn replay(
    shape: &GdnShape,
    delta: &[f64],
    tape_k: &[f64],
    tape_g: &[f64],
    snapshot: &[f64],
    accepted: &[u32],
    mask: Option<&[u32]>,
) -> Vec<f64> {
    let (tn, hvn, dvn, dk) = (
        shape.steps(),
        shape.value_heads(),
        shape.value_dim(),
        shape.key_dim(),
    );
    let mut s = snapshot.to_vec();
    for (b, &a) in accepted.iter().enumerate() {
        for hv in 0..hvn {
            for dv in 0..dvn {
                let row = shape.state_row(b, hv, dv);
                for t in 0..a as usize {
                    if mask.is_some_and(|m| m[b * tn + t] == 0) {
                        continue;
                    }
                    let gt = tape_g[shape.gate_index(b, t, hv)];
                    let d = delta[shape.v_index(b, t, hv, dv)];
                    let kr = shape.tape_k_row(b, t, hv);
                    for i in 0..dk {
                        s[row + i] = s[row + i] * gt + tape_k[kr + i] * d;
                    }
                }
            }
        }
    }
    s
}

/// ||a - b|| / max(||b||, tiny).
pub fn rel_err64<E: Element>(a: &[E], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    let (mut num, mut den) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        let x = x.to_f32() as f64;
        num += (x - y) * (x - y);
        den += y * y;
    }
    num.sqrt() / den.sqrt().max(1e-30)
}
