#provides NORM_EPS, TAPS, layer_f32, conv_channels, gates_base, window_index, gate_rule
#requires GdnDims, load_layer
// A layer's raw inputs and packed parameters (docs/SPEC.md "record_layer"): the WGSL
// twin of src/shape.rs's LayerShape formulas and of the gates' rule, shared by
// record_layer's staging (layer_staging.wgsl) and the prologue pass.

// The L2 norm's epsilon (src/op/prologue/cpu.rs's NORM_EPS).
const NORM_EPS: f32 = 1e-6;
// The most conv taps a kernel holds (src/shape.rs's MAX_LAYER_TAPS): a kernel keeps a
// channel's weights and inputs right-aligned in arrays of this many, zero weights in
// front of the layer's K, so that every index is a constant.
const TAPS: u32 = 4u;

fn layer_f32(i: u32) -> f32 {
    return bitcast<f32>(load_layer(i));
}

// C: q's, k's, then v's channels.
fn conv_channels(d: GdnDims) -> u32 {
    return 2u * d.key_heads * d.key_dim + d.value_heads * d.value_dim;
}

// Where A_log starts in the parameters, after the conv's weight [C, K] and bias [C];
// dt_bias follows it, then q's scale and the norm switch.
fn gates_base(d: GdnDims) -> u32 {
    return conv_channels(d) * (d.conv_taps + 1u);
}

// Index of window[b, ch, s] (s = 0 the oldest of K - 1).
fn window_index(d: GdnDims, b: u32, ch: u32, s: u32) -> u32 {
    return (b * conv_channels(d) + ch) * (d.conv_taps - 1u) + s;
}

// (g, beta) from a, b and the head's exp(A_log), dt_bias: g = exp(-exp(A_log)
// softplus(a + dt_bias)) with softplus(x) = x above 20, beta = sigmoid(b).
fn gate_rule(ab: vec2<f32>, head: vec2<f32>) -> vec2<f32> {
    let x = ab.x + head.y;
    let softplus = select(log(1.0 + exp(x)), x, x > 20.0);
    return vec2<f32>(exp(-head.x * softplus), 1.0 / (1.0 + exp(-ab.y)));
}
