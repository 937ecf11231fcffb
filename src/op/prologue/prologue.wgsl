#if HAS_BF16
#import bf16
#endif
#import entry
#import shape
#import layer_params
#provides kernel_main, params, PrologueParams
#requires load1_x, load1_window, load1_a, load1_b, store2_q, store2_k, store2_v, store2_g, store2_beta
// prologue (SPEC.md "prologue"): record_layer's prologue as a pass of its own. For each
// token and channel c, the causal conv over seq = window[b, c, :] ++ x[b, :, c], SiLU;
// q's and k's heads normalised (q's scaled); the gates from a and b. q, k, v rounded to
// the activation dtype and g, beta to the gates' by their stores, once.
//
// Workgroup wg serves one (token, slot): slots 0 .. Hk are q's heads, Hk .. 2 Hk k's
// (a head's channels are the slot's Dk from slot * Dk), then one a value head (its Dv
// channels and that (token, head)'s g and beta). Each invocation owns channel pairs
// (2 p, 2 p + 1), p = li, li + WG_SIZE, ...: a 16-bit pair is one word, and with an even
// Dk and Dv (the host checks it for bf16) no word holds two slots' values. A head's
// norm sums its squares through workgroup memory, then each invocation computes its
// channels again (cheaper than keeping up to MAX_KEY_DIM / WG_SIZE pairs in registers,
// and the same bits) and stores them scaled.

struct PrologueParams {
    dims: GdnDims,    // first_token 0; conv_taps K
    slots: u32,       // 2 Hk + Hv
    workgroups: u32,  // tokens * slots
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: PrologueParams;

var<workgroup> sums: array<f32, WG_SIZE>;

// SiLU of the conv of channel ch at step t of sequence b.
fn conv_silu(d: GdnDims, b: u32, t: u32, ch: u32) -> f32 {
    let taps = d.conv_taps;
    let c_n = conv_channels(d);
    var u = layer_f32(c_n * taps + ch);
    for (var j = 0u; j < taps; j++) {
        // seq[t + j]: the window's below K - 1, x's from there.
        let s = t + j;
        var input: f32;
        if s + 1u < taps {
            input = load1_window(window_index(d, b, ch, s));
        } else {
            input = load1_x(token(d, b, s + 1u - taps) * c_n + ch);
        }
        u += layer_f32(ch * taps + j) * input;
    }
    return u / (1.0 + exp(-u));
}

// g and beta of gate element gi (its head gi % Hv), unrounded.
fn gates_at(d: GdnDims, gi: u32) -> vec2<f32> {
    let hv = gi % d.value_heads;
    let base = gates_base(d);
    let head = vec2<f32>(exp(layer_f32(base + hv)), layer_f32(base + d.value_heads + hv));
    return gate_rule(vec2<f32>(load1_a(gi), load1_b(gi)), head);
}

// The gates of element gi, written by one invocation: a bf16 word's even element's
// writer writes both halves (the second 0 past the last element).
fn store_gates(d: GdnDims, gi: u32) {
    let first = gates_at(d, gi);
#if GATE_BF16
    if (gi & 1u) == 0u {
        let len = d.batch * d.steps * d.value_heads;
        var second = vec2<f32>(0.0);
        if gi + 1u < len {
            second = gates_at(d, gi + 1u);
        }
        store2_g(gi, first.x, second.x);
        store2_beta(gi, first.y, second.y);
    }
#else
#requires store1_g, store1_beta
    store1_g(gi, first.x);
    store1_beta(gi, first.y);
#endif
}

// Channels 2 p and 2 p + 1 of a slot of `width` channels from `first`: their values,
// the second 0 past the slot's end.
fn pair_at(d: GdnDims, b: u32, t: u32, first: u32, width: u32, p: u32) -> vec2<f32> {
    let e = 2u * p;
    var pair = vec2<f32>(conv_silu(d, b, t, first + e), 0.0);
    if e + 1u < width {
        pair.y = conv_silu(d, b, t, first + e + 1u);
    }
    return pair;
}

// Store a pair at index i of q, k or v (`which` 0, 1, 2); a lone last value (odd
// width, 32- or 16-bit floats only) alone.
fn store_pair(which: u32, i: u32, pair: vec2<f32>, lone: bool) {
#if !HAS_BF16
#requires store1_q, store1_k, store1_v
    if lone {
        switch which {
            case 0u: { store1_q(i, pair.x); }
            case 1u: { store1_k(i, pair.x); }
            default: { store1_v(i, pair.x); }
        }
        return;
    }
#endif
    switch which {
        case 0u: { store2_q(i, pair.x, pair.y); }
        case 1u: { store2_k(i, pair.x, pair.y); }
        default: { store2_v(i, pair.x, pair.y); }
    }
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let d = params.dims;
    let token_at = wg / params.slots;
    let slot = wg % params.slots;
    let b = token_at / d.steps;
    let t = token_at % d.steps;
    let qk_slots = 2u * d.key_heads;
    let is_qk = slot < qk_slots;
    let width = select(d.value_dim, d.key_dim, is_qk);
    let first = select(qk_slots * d.key_dim + (slot - qk_slots) * d.value_dim, slot * d.key_dim, is_qk);
    let pairs = (width + 1u) / 2u;
    let trips = (pairs + WG_SIZE - 1u) / WG_SIZE;
    var scale = 1.0;
    if is_qk {
        // The norm: every invocation's sum of squares, then a halving tree.
        var own = 0.0;
        for (var j = 0u; j < trips; j++) {
            let p = li + j * WG_SIZE;
            if p < pairs {
                let pair = pair_at(d, b, t, first, width, p);
                own += dot(pair, pair);
            }
        }
        sums[li] = own;
        workgroupBarrier();
        for (var half = WG_SIZE / 2u; half > 0u; half = half >> 1u) {
            if li < half {
                sums[li] += sums[li + half];
            }
            workgroupBarrier();
        }
        let base = gates_base(d) + 2u * d.value_heads;
        let norm = load_layer(base + 1u) != 0u;
        let q_scale = select(1.0, layer_f32(base), slot < d.key_heads);
        let inv = select(1.0, inverseSqrt(sums[0] + NORM_EPS), norm);
        scale = inv * q_scale;
    }
    let which = select(2u, select(1u, 0u, slot < d.key_heads), is_qk);
    var row = v_index(d, b, t, slot - qk_slots, 0u);
    if is_qk {
        row = qk_row(d, b, t, slot % d.key_heads);
    }
    for (var j = 0u; j < trips; j++) {
        let p = li + j * WG_SIZE;
        if p < pairs {
            let pair = pair_at(d, b, t, first, width, p) * scale;
            store_pair(which, row + 2u * p, pair, 2u * p + 1u == width);
        }
    }
    if !is_qk && li == 0u {
        store_gates(d, gate_index(d, b, t, slot - qk_slots));
    }
}
