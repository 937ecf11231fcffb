#import layer_params
#provides fetch_chunk, stage_chunk
#requires k_stage, q_stage, row_stage, gate_stage, row_partials, STAGED, params, GdnDims
#requires load1_x, load1_window, load_layer, load1_a, load1_b, token, qk_row, gate_index, first_value_head
#if HAS_MASK
#requires load_mask, mask_index
#endif
#if HAS_TAPE_K_GROUPED
#requires store_tape_k_grouped
#endif
#if HAS_TAPE_G
#if GATE_BF16
#requires store2_tape_g
#else
#requires store1_tape_g
#endif
#endif
#if HAS_BF16
#requires bf16_bits
#endif
// record_layer's staging (docs/SPEC.md "record_layer"): each chunk of CHUNK steps'
// q, k, v and gates computed from the raw inputs into record's workgroup stages
// (record_steps.wgsl), in place of record_staging.wgsl's loads. The prologue, per step:
// the causal conv of each channel from the layer's window and x, SiLU, q's and k's L2
// norms and q's scale, g = exp(-exp(A_log) softplus(a + dt_bias)), beta = sigmoid(b);
// q, k, v rounded to the activation dtype and the gates to theirs, as stored, so that
// record and a replay of the tape see the same values. The index formulas of x, the
// window and the packed parameters are src/shape.rs's (LayerShape).
//
// Each invocation owns channels for the whole draft: groups of 4 of q's and k's (the
// workgroup's key head: 2 STAGED groups) and one of v's (a row of the workgroup's).
// It keeps their conv weights and their last K - 1 inputs in registers, so a step's
// conv reads one new input a channel, and those are fetched a chunk ahead (the next_*
// registers), as record_staging.wgsl fetches q and k. Weights and inputs are kept
// right-aligned in arrays of TAPS (layer_params.wgsl), zero weights in front, so every
// index is a constant.

// q's and k's channel groups; an invocation owns QK_OWNED of them and V_OWNED of v's
// rows (defines: KernelKey::defines).
const QK_GROUPS: u32 = 2u * STAGED;
// Invocations that sum one staged step's norms (CHUNK and WG_SIZE are powers of two,
// CHUNK at most WG_SIZE).
const NORM_LANES: u32 = WG_SIZE / CHUNK;

// Each staged step's inverse norms of k and of q (q's times its scale).
var<workgroup> norm_stage: array<vec2<f32>, CHUNK>;

var<private> qk_weights: array<array<vec4<f32>, TAPS>, QK_OWNED>;
var<private> qk_bias: array<vec4<f32>, QK_OWNED>;
var<private> qk_inputs: array<array<vec4<f32>, TAPS>, QK_OWNED>; // [TAPS - 1]: unused
var<private> next_qk: array<array<vec4<f32>, CHUNK>, QK_OWNED>;
var<private> v_weights: array<array<f32, TAPS>, V_OWNED>;
var<private> v_bias: array<f32, V_OWNED>;
var<private> v_inputs: array<array<f32, TAPS>, V_OWNED>;
var<private> next_v: array<array<f32, CHUNK>, V_OWNED>;
// This head's exp(A_log) and dt_bias; the next chunk's a and b (invocation li: step li).
var<private> head_gate: vec2<f32>;
var<private> next_ab: vec2<f32>;
#if HAS_MASK
var<private> next_live: u32;
#endif

// Channel e of q/k group g of key head hk (q's groups first), and whether it exists.
fn qk_channel(d: GdnDims, hk: u32, g: u32, e: u32) -> vec2<u32> {
    let col = (g % STAGED) * 4u + e;
    let ch = (g / STAGED) * d.key_heads * d.key_dim + hk * d.key_dim + min(col, d.key_dim - 1u);
    return vec2<u32>(ch, select(0u, 1u, col < d.key_dim));
}

// Channel of the workgroup's v row r (the head's last row past Dv).
fn v_channel(d: GdnDims, hv: u32, row_base: u32, r: u32) -> u32 {
    return 2u * d.key_heads * d.key_dim + hv * d.value_dim + min(row_base + r, d.value_dim - 1u);
}

// Tap j of channel ch, right-aligned in TAPS (0 in front of the first of K).
fn weight_at(d: GdnDims, ch: u32, j: u32) -> f32 {
    let first = TAPS - d.conv_taps;
    let tap = select(0u, j - first, j >= first);
    return select(0.0, layer_f32(ch * d.conv_taps + tap), j >= first);
}

// Input j of the window before the draft, right-aligned in TAPS - 1 (0 in front).
fn window_at(d: GdnDims, b: u32, ch: u32, j: u32) -> f32 {
    let first = TAPS - d.conv_taps;
    let s = select(0u, j - first, j >= first);
    return select(0.0, load1_window(window_index(d, b, ch, s)), j >= first);
}

fn x_at(d: GdnDims, b: u32, t: u32, ch: u32) -> f32 {
    return load1_x(token(d, b, t) * conv_channels(d) + ch);
}

// The owned channels' weights and window, and the head's gate constants: once.
fn load_layer_constants(d: GdnDims, b: u32, hv: u32, hk: u32, row_base: u32, li: u32) {
    let taps = d.conv_taps;
    #unroll
    for (var o = 0u; o < QK_OWNED; o++) {
        let g = li + o * WG_SIZE;
        if g < QK_GROUPS {
            for (var e = 0u; e < 4u; e++) {
                let ch = qk_channel(d, hk, g, e);
                let on = ch.y != 0u;
                qk_bias[o][e] = select(0.0, layer_f32(conv_channels(d) * taps + ch.x), on);
                for (var j = 0u; j < TAPS; j++) {
                    qk_weights[o][j][e] = select(0.0, weight_at(d, ch.x, j), on);
                    if j + 1u < TAPS {
                        qk_inputs[o][j][e] = window_at(d, b, ch.x, j);
                    }
                }
            }
        }
    }
    #unroll
    for (var o = 0u; o < V_OWNED; o++) {
        let r = li + o * WG_SIZE;
        if r < ROWS {
            let ch = v_channel(d, hv, row_base, r);
            v_bias[o] = layer_f32(conv_channels(d) * taps + ch);
            for (var j = 0u; j < TAPS; j++) {
                v_weights[o][j] = weight_at(d, ch, j);
                if j + 1u < TAPS {
                    v_inputs[o][j] = window_at(d, b, ch, j);
                }
            }
        }
    }
    let base = gates_base(d);
    head_gate = vec2<f32>(exp(layer_f32(base + hv)), layer_f32(base + d.value_heads + hv));
}

// Issue the global loads of the chunk of steps t0 .. t0 + CHUNK (t0 < T): each owned
// channel's new input per step, and step li's a, b (and mask).
fn fetch_chunk(d: GdnDims, b: u32, hv: u32, hk: u32, row_base: u32, t0: u32, li: u32) {
    if t0 == 0u {
        load_layer_constants(d, b, hv, hk, row_base, li);
    }
    let n = min(CHUNK, d.steps - t0);
    #unroll
    for (var o = 0u; o < QK_OWNED; o++) {
        let g = li + o * WG_SIZE;
        if g < QK_GROUPS {
            #unroll
            for (var c = 0u; c < CHUNK; c++) {
                if c < n {
                    for (var e = 0u; e < 4u; e++) {
                        next_qk[o][c][e] = x_at(d, b, t0 + c, qk_channel(d, hk, g, e).x);
                    }
                }
            }
        }
    }
    #unroll
    for (var o = 0u; o < V_OWNED; o++) {
        let r = li + o * WG_SIZE;
        if r < ROWS {
            let ch = v_channel(d, hv, row_base, r);
            #unroll
            for (var c = 0u; c < CHUNK; c++) {
                if c < n {
                    next_v[o][c] = x_at(d, b, t0 + c, ch);
                }
            }
        }
    }
    if li < n {
        let gi = gate_index(d, b, t0 + li, hv);
        next_ab = vec2<f32>(load1_a(gi), load1_b(gi));
#if HAS_MASK
        next_live = load_mask(mask_index(d, b, t0 + li));
#endif
    }
}

fn round_act(x: f32) -> f32 {
#if ACT_BF16
    return bitcast<f32>(bf16_bits(x) << 16u);
#else
#if ACT_F16
    return f32(f16(x));
#else
    return x;
#endif
#endif
}

fn round_act4(x: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(round_act(x.x), round_act(x.y), round_act(x.z), round_act(x.w));
}

fn round_gate(x: f32) -> f32 {
#if GATE_BF16
    return bitcast<f32>(bf16_bits(x) << 16u);
#else
#if GATE_F16
    return f32(f16(x));
#else
    return x;
#endif
#endif
}

fn silu4(u: vec4<f32>) -> vec4<f32> {
    return u / (1.0 + exp(-u));
}

// g and beta from a, b and the head's exp(A_log), dt_bias, rounded as the gates' dtype
// stores them.
fn gates_of(ab: vec2<f32>, head: vec2<f32>) -> vec2<f32> {
    let gates = gate_rule(ab, head);
    return vec2<f32>(round_gate(gates.x), round_gate(gates.y));
}

#if HAS_TAPE_G
#if GATE_BF16
// The gate of element gi, loaded here (the other half of a bf16 word of the tape's g).
fn gate_at(d: GdnDims, gi: u32) -> f32 {
    let hv = gi % d.value_heads;
    let base = gates_base(d);
    let head = vec2<f32>(exp(layer_f32(base + hv)), layer_f32(base + d.value_heads + hv));
    return gates_of(vec2<f32>(load1_a(gi), 0.0), head).x;
}
#endif
#endif

// The prologue of the fetched chunk t0 .. t0 + CHUNK into the stages, and the tape's
// copies of k and g (one writer each, as record_staging.wgsl's). Slots past the
// draft's last step hold values nobody reads.
fn stage_chunk(d: GdnDims, b: u32, hv: u32, hk: u32, row_base: u32, t0: u32, li: u32, sg: u32) {
    let n = min(CHUNK, d.steps - t0);
    // q and k after the conv and SiLU, not yet normalised; each owned group's inputs
    // move on by the chunk's steps.
    #unroll
    for (var o = 0u; o < QK_OWNED; o++) {
        let g = li + o * WG_SIZE;
        if g < QK_GROUPS {
            #unroll
            for (var c = 0u; c < CHUNK; c++) {
                let x = next_qk[o][c];
                var u = qk_bias[o] + qk_weights[o][TAPS - 1u] * x;
                for (var j = 0u; j < TAPS - 1u; j++) {
                    u += qk_weights[o][j] * qk_inputs[o][j];
                }
                if c < n {
                    for (var j = 0u; j < TAPS - 2u; j++) {
                        qk_inputs[o][j] = qk_inputs[o][j + 1u];
                    }
                    qk_inputs[o][TAPS - 2u] = x;
                }
                let i = c * STAGED + g % STAGED;
                if g < STAGED {
                    q_stage[i] = silu4(u);
                } else {
                    k_stage[i] = silu4(u);
                }
            }
        }
    }
    #unroll
    for (var o = 0u; o < V_OWNED; o++) {
        let r = li + o * WG_SIZE;
        if r < ROWS {
            #unroll
            for (var c = 0u; c < CHUNK; c++) {
                let x = next_v[o][c];
                var u = v_bias[o] + v_weights[o][TAPS - 1u] * x;
                for (var j = 0u; j < TAPS - 1u; j++) {
                    u += v_weights[o][j] * v_inputs[o][j];
                }
                if c < n {
                    for (var j = 0u; j < TAPS - 2u; j++) {
                        v_inputs[o][j] = v_inputs[o][j + 1u];
                    }
                    v_inputs[o][TAPS - 2u] = x;
                }
                row_stage[c * ROWS + r] = round_act(u / (1.0 + exp(-u)));
            }
        }
    }
    if li < CHUNK {
        let gates = gates_of(next_ab, head_gate);
#if HAS_MASK
        let live = next_live != 0u;
#else
        let live = true;
#endif
        gate_stage[li] = vec4<f32>(select(1.0, gates.x, live), gates.y, select(0.0, 1.0, live), 0.0);
#if HAS_TAPE_G
        if row_base == 0u && li < n {
            let gi = gate_index(d, b, t0 + li, hv);
#if GATE_BF16
            // A bf16 word holds two gates, maybe of two heads: its even element's
            // writer writes both halves.
            if (gi & 1u) == 0u {
                store2_tape_g(gi, gates.x, gate_at(d, gi + 1u));
            }
#else
            store1_tape_g(gi, gates.x);
#endif
        }
#endif
    }
    workgroupBarrier();
    // Each step's norms: NORM_LANES invocations a step, each summing every
    // NORM_LANES-th vec4 of the step's k and q, their sums added by a butterfly where
    // the step's lanes lie in one subgroup, else through workgroup memory (row_sum3's,
    // idle while a chunk is staged).
    let c = li / NORM_LANES;
    let p = li % NORM_LANES;
    var sums = vec2<f32>(0.0);
    for (var m = p; m < STAGED; m += NORM_LANES) {
        let kk = k_stage[c * STAGED + m];
        let qq = q_stage[c * STAGED + m];
        sums += vec2<f32>(dot(kk, kk), dot(qq, qq));
    }
    var in_subgroup = false;
#if SUBGROUP
    in_subgroup = NORM_LANES <= sg;
    if in_subgroup {
        for (var o = 1u; o < NORM_LANES; o = o << 1u) {
            sums += subgroupShuffleXor(sums, o);
        }
    }
#endif
    if !in_subgroup {
        row_partials[li] = vec4<f32>(sums, 0.0, 0.0);
        workgroupBarrier();
        var total = vec2<f32>(0.0);
        for (var j = 0u; j < NORM_LANES; j++) {
            total += row_partials[li - p + j].xy;
        }
        sums = total;
    }
    if p == 0u {
        let base = gates_base(d) + 2u * d.value_heads;
        let norm = load_layer(base + 1u) != 0u;
        let inv = select(vec2<f32>(1.0), inverseSqrt(sums + NORM_EPS), norm);
        norm_stage[c] = inv * vec2<f32>(1.0, layer_f32(base));
    }
    workgroupBarrier();
#if HAS_TAPE_K_GROUPED
    let k_writer = row_base == 0u && hv == first_value_head(params.gqa_layout, hk, d.key_heads, d.value_heads);
#endif
    #unroll
    for (var j = 0u; j < KQ_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i < CHUNK * STAGED {
            let c = i / STAGED;
            let inv = norm_stage[c];
            let kk = round_act4(k_stage[i] * inv.x);
            k_stage[i] = kk;
            q_stage[i] = round_act4(q_stage[i] * inv.y);
#if HAS_TAPE_K_GROUPED
            if k_writer && c < n {
                store_tape_k_grouped(qk_row(d, b, t0 + c, hk), (i % STAGED) * 4u, d.key_dim, kk);
            }
#endif
        }
    }
}
