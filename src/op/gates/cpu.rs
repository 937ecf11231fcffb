//! gates' CPU twin (docs/SPEC.md "gates"); record_layer's prologue computes its gates
//! with the same rule.

use crate::dtype::Element;
use crate::shape::{LayerField, LayerShape};

/// `(g, beta)` of one element: `g = exp(-exp(a_log) softplus(a + dt_bias))` (softplus is
/// `x` itself above 20, as torch's), `beta = sigmoid(b)`.
pub(crate) fn gate_values(a_log: f32, dt_bias: f32, a: f32, b: f32) -> (f32, f32) {
    let x = a + dt_bias;
    let softplus = if x > 20.0 { x } else { x.exp().ln_1p() };
    ((-(a_log.exp() * softplus)).exp(), 1.0 / (1.0 + (-b).exp()))
}

/// g and beta of every element of `a` and `b` (`[B, T, Hv]`), from the packed
/// parameters `layer`, rounded to `G`.
pub(crate) fn gates<G: Element>(
    shape: &LayerShape,
    layer: &[f32],
    (a, b): (&[G], &[G]),
    (g, beta): (&mut [G], &mut [G]),
) {
    let hv_n = shape.gdn().value_heads();
    let (a_log, dt_bias) = (
        &layer[shape.layer_at(LayerField::ALog)..][..hv_n],
        &layer[shape.layer_at(LayerField::DtBias)..][..hv_n],
    );
    let rows =
        (a.chunks(hv_n).zip(b.chunks(hv_n))).zip(g.chunks_mut(hv_n).zip(beta.chunks_mut(hv_n)));
    for ((a, b), (g, beta)) in rows {
        for hv in 0..hv_n {
            let (gv, bv) = gate_values(a_log[hv], dt_bias[hv], a[hv].to_f32(), b[hv].to_f32());
            (g[hv], beta[hv]) = (G::from_f32(gv), G::from_f32(bv));
        }
    }
}
