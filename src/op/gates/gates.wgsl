#if HAS_BF16
#import bf16
#endif
#import entry
#provides kernel_main, params, GatesParams
#requires load1_a, load1_b, load_layer, store2_g, store2_beta
// gates (SPEC.md "gates"): g = exp(-exp(A_log) softplus(a + dt_bias)), beta = sigmoid(b)
// for every element (b, t, hv) of a and b, A_log and dt_bias read from the layer's
// packed parameters. Each invocation computes two neighbouring elements and stores them
// together, so a 16-bit word has one writer; past an odd length the word's second half
// is written as 0 (for bf16) or left alone.

struct GatesParams {
    len: u32,         // B * T * Hv
    value_heads: u32,
    a_log_at: u32,    // A_log's first word in the layer's parameters; dt_bias follows
    workgroups: u32,
}

@group(0) @binding(0) var<uniform> params: GatesParams;

// g and beta of element i.
fn gates_at(i: u32) -> vec2<f32> {
    let hv = i % params.value_heads;
    let a_log = bitcast<f32>(load_layer(params.a_log_at + hv));
    let dt_bias = bitcast<f32>(load_layer(params.a_log_at + params.value_heads + hv));
    let x = load1_a(i) + dt_bias;
    let softplus = select(log(1.0 + exp(x)), x, x > 20.0);
    return vec2<f32>(exp(-exp(a_log) * softplus), 1.0 / (1.0 + exp(-load1_b(i))));
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let i = 2u * (wg * WG_SIZE + li);
    if i >= params.len {
        return;
    }
    let first = gates_at(i);
    if i + 1u < params.len {
        let second = gates_at(i + 1u);
        store2_g(i, first.x, second.x);
        store2_beta(i, first.y, second.y);
    } else {
#if GATE_BF16
        // The word's second half lies past the gates.
        store2_g(i, first.x, 0.0);
        store2_beta(i, first.y, 0.0);
#else
#requires store1_g, store1_beta
        store1_g(i, first.x);
        store1_beta(i, first.y);
#endif
    }
}
