//! The prologue's CPU twin (docs/SPEC.md "record_layer", "prologue"), which record's
//! raw forms' twins run first: in f32, each of q, k, v rounded to the activation dtype
//! and g, beta to the gates' once (as an engine that hands them to record stores them).
//! It validates nothing: the host calls check lengths first.

use super::PrologueOutputs;
use crate::dtype::Element;
use crate::error::Result;
use crate::op::gates::cpu::gate_values;
use crate::op::record::LayerInputs;
use crate::shape::{LayerField, LayerShape, VarlenLayerShape};

/// The L2 norm's epsilon (Hugging Face's and fla's `l2norm`: `x * rsqrt(sum(x^2) + eps)`).
pub(crate) const NORM_EPS: f32 = 1e-6;

/// `x * sigmoid(x)`.
pub(crate) fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// The prologue (docs/SPEC.md "record_layer"): the conv from `window` over `x`, SiLU,
/// the norms and q's scale, and the gates, from the packed parameters `layer`.
pub(crate) fn prologue<A: Element, G: Element>(
    shape: &LayerShape,
    layer: &[f32],
    inputs: &LayerInputs<'_, A, G>,
    window: &[A],
) -> PrologueOutputs<A, G> {
    let gdn = shape.gdn();
    let (b_n, t_n) = (gdn.batch(), gdn.steps());
    let (hk_n, hv_n, dk, dv) = (
        gdn.key_heads(),
        gdn.value_heads(),
        gdn.key_dim(),
        gdn.value_dim(),
    );
    let (c_n, k_n) = (shape.channels(), shape.kernel());
    let at = |f| shape.layer_at(f);
    let (q_scale, norm) = (
        layer[at(LayerField::QScale)],
        layer[at(LayerField::Norm)] != 0.0,
    );
    // The conv of channel c at step t: seq = window ++ x, taps t .. t + K - 1 of it.
    let conv = |b: usize, t: usize, c: usize| {
        let mut u = layer[at(LayerField::ConvBias) + c];
        for j in 0..k_n {
            let s = t + j;
            let input = if s < k_n - 1 {
                window[shape.window_index(b, c, s)]
            } else {
                inputs.x[shape.x_index(b, s - (k_n - 1), c)]
            };
            u += layer[c * k_n + j] * input.to_f32();
        }
        silu(u)
    };
    let mut out = PrologueOutputs::zeroed(gdn);
    let mut row = vec![0f32; dk];
    for b in 0..b_n {
        for t in 0..t_n {
            for hk in 0..hk_n {
                let at_row = gdn.qk_row(b, t, hk);
                let heads = [
                    (shape.q_channel(hk, 0), q_scale, &mut out.q),
                    (shape.k_channel(hk, 0), 1.0, &mut out.k),
                ];
                for (first, scale, dst) in heads {
                    for (i, r) in row.iter_mut().enumerate() {
                        *r = conv(b, t, first + i);
                    }
                    let inv = if norm {
                        1.0 / (row.iter().map(|x| x * x).sum::<f32>() + NORM_EPS).sqrt()
                    } else {
                        1.0
                    };
                    for (o, x) in dst[at_row..][..dk].iter_mut().zip(&row) {
                        *o = A::from_f32(x * (inv * scale));
                    }
                }
            }
            for hv in 0..hv_n {
                for j in 0..dv {
                    out.v[gdn.v_index(b, t, hv, j)] =
                        A::from_f32(conv(b, t, shape.v_channel(hv, j)));
                }
                let gi = gdn.gate_index(b, t, hv);
                let (a_log, dt_bias) = (
                    layer[at(LayerField::ALog) + hv],
                    layer[at(LayerField::DtBias) + hv],
                );
                let (a, b) = (inputs.a[gi].to_f32(), inputs.b[gi].to_f32());
                let (g, beta) = gate_values(a_log, dt_bias, a, b);
                (out.g[gi], out.beta[gi]) = (G::from_f32(g), G::from_f32(beta));
            }
        }
    }
    debug_assert_eq!(c_n, shape.v_channel(hv_n - 1, dv - 1) + 1);
    out
}

/// The packed form's prologue: each sequence's from its own window, as on its tokens
/// alone.
pub(crate) fn prologue_varlen<A: Element, G: Element>(
    shape: &VarlenLayerShape,
    layer: &[f32],
    inputs: &LayerInputs<'_, A, G>,
    window: &[A],
) -> Result<PrologueOutputs<A, G>> {
    let packed = shape.packed();
    let gdn = packed.gdn();
    let mut out = PrologueOutputs::zeroed(gdn);
    let (c, hv) = (packed.channels(), gdn.value_heads());
    let (qk_n, v_n) = (gdn.key_heads() * gdn.key_dim(), hv * gdn.value_dim());
    let win = c * (packed.kernel() - 1);
    for s in 0..shape.varlen().sequences() {
        let tokens = shape.varlen().sequence(s);
        let one = shape.sequence(s)?;
        let part = |per: usize| tokens.start * per..tokens.end * per;
        let seq = LayerInputs {
            x: &inputs.x[part(c)],
            a: &inputs.a[part(hv)],
            b: &inputs.b[part(hv)],
            mask: None,
        };
        let p = prologue(&one, layer, &seq, &window[s * win..][..win]);
        out.q[part(qk_n)].copy_from_slice(&p.q);
        out.k[part(qk_n)].copy_from_slice(&p.k);
        out.v[part(v_n)].copy_from_slice(&p.v);
        out.g[part(hv)].copy_from_slice(&p.g);
        out.beta[part(hv)].copy_from_slice(&p.beta);
    }
    Ok(out)
}
