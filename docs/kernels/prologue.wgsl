// deltatape kernel prologue.f32.f32.f32.workgroup.l1r64g1t1c1
const HAS_X: bool = true;
const HAS_WINDOW: bool = true;
const HAS_LAYER: bool = true;
const HAS_A: bool = true;
const HAS_B: bool = true;
const HAS_Q: bool = true;
const HAS_K: bool = true;
const HAS_V: bool = true;
const HAS_G: bool = true;
const HAS_BETA: bool = true;
const WG_SIZE: u32 = 64u;
const VEC4: bool = false;
const HAS_BF16: bool = false;
const SUBGROUP: bool = false;
const ACT_BF16: bool = false;
const ACT_F16: bool = false;
const STATE_BF16: bool = false;
const STATE_F16: bool = false;
const TAPE_BF16: bool = false;
const GATE_BF16: bool = false;
const GATE_F16: bool = false;
const HAS_OFFSETS: bool = false;
const LANES: u32 = 1u;
const ROWS: u32 = 64u;
const GROUPS: u32 = 1u;
const RPT: u32 = 1u;
const CHUNK: u32 = 1u;

@group(0) @binding(1) var<storage, read> x_buf: array<f32>;
fn load1_x(i: u32) -> f32 {
    let x = x_buf[i];
    return x;
}

@group(0) @binding(2) var<storage, read> window_buf: array<f32>;
fn load1_window(i: u32) -> f32 {
    let x = window_buf[i];
    return x;
}

@group(0) @binding(3) var<storage, read> layer_buf: array<u32>;
fn load_layer(i: u32) -> u32 {
    return layer_buf[i];
}

@group(0) @binding(4) var<storage, read> a_buf: array<f32>;
fn load1_a(i: u32) -> f32 {
    let x = a_buf[i];
    return x;
}

@group(0) @binding(5) var<storage, read> b_buf: array<f32>;
fn load1_b(i: u32) -> f32 {
    let x = b_buf[i];
    return x;
}

@group(0) @binding(6) var<storage, read_write> q_buf: array<f32>;
fn load1_q(i: u32) -> f32 {
    let x = q_buf[i];
    return x;
}
fn store1_q(i: u32, v: f32) {
    q_buf[i] = v;
}
fn store2_q(i: u32, a: f32, b: f32) {
    q_buf[i] = a;
    q_buf[i + 1u] = b;
}

@group(0) @binding(7) var<storage, read_write> k_buf: array<f32>;
fn load1_k(i: u32) -> f32 {
    let x = k_buf[i];
    return x;
}
fn store1_k(i: u32, v: f32) {
    k_buf[i] = v;
}
fn store2_k(i: u32, a: f32, b: f32) {
    k_buf[i] = a;
    k_buf[i + 1u] = b;
}

@group(0) @binding(8) var<storage, read_write> v_buf: array<f32>;
fn load1_v(i: u32) -> f32 {
    let x = v_buf[i];
    return x;
}
fn store1_v(i: u32, v: f32) {
    v_buf[i] = v;
}
fn store2_v(i: u32, a: f32, b: f32) {
    v_buf[i] = a;
    v_buf[i + 1u] = b;
}

@group(0) @binding(9) var<storage, read_write> g_buf: array<f32>;
fn load1_g(i: u32) -> f32 {
    let x = g_buf[i];
    return x;
}
fn store1_g(i: u32, v: f32) {
    g_buf[i] = v;
}
fn store2_g(i: u32, a: f32, b: f32) {
    g_buf[i] = a;
    g_buf[i + 1u] = b;
}

@group(0) @binding(10) var<storage, read_write> beta_buf: array<f32>;
fn load1_beta(i: u32) -> f32 {
    let x = beta_buf[i];
    return x;
}
fn store1_beta(i: u32, v: f32) {
    beta_buf[i] = v;
}
fn store2_beta(i: u32, a: f32, b: f32) {
    beta_buf[i] = a;
    beta_buf[i + 1u] = b;
}


// Entry point for kernels that use no subgroup operations (and for devices without
// Features::SUBGROUP). Large grids are folded into two dimensions; `wg` is the linear
// workgroup index.

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(local_invocation_index) li: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    kernel_main(li, wid.x + wid.y * nwg.x, 0u);
}

// Index formulas of SPEC.md: the WGSL twin of src/shape.rs (row-major, last index
// contiguous). The GPU tests against the CPU reference keep the two in step.

struct GdnDims {
    batch: u32,
    steps: u32,
    key_heads: u32,
    value_heads: u32,
    key_dim: u32,
    value_dim: u32,
    // record_varlen: the sequence's first packed token (wgsl/packed_sequences.wgsl
    // sets it per workgroup); 0 in the parameters.
    first_token: u32,
    // record_layer: the conv's taps K (wgsl/layer_staging.wgsl); 0 for the other ops.
    conv_taps: u32,
}

// Parameters of record and replay. One workgroup serves ROWS rows (dv) of one
// (b, hv) head; `row_blocks` workgroups cover a head's Dv rows.
struct GdnParams {
    dims: GdnDims,
    gqa_layout: u32,  // 0 = blocked, 1 = tiled
    row_blocks: u32,  // ceil(Dv / ROWS)
    workgroups: u32,  // batch * value_heads * row_blocks
    _pad: u32,
}

// The key head serving value head `hv`: blocked hv / (Hv / Hk), tiled hv % Hk.
fn key_head(gqa_layout: u32, hv: u32, key_heads: u32, value_heads: u32) -> u32 {
    return select(hv / (value_heads / key_heads), hv % key_heads, gqa_layout == 1u);
}

// The first value head that key head `hk` serves (the inverse of key_head's grouping):
// blocked hk * (Hv / Hk), tiled hk.
fn first_value_head(gqa_layout: u32, hk: u32, key_heads: u32, value_heads: u32) -> u32 {
    return select(hk * (value_heads / key_heads), hk, gqa_layout == 1u);
}

// The token of step t of sequence b: b * T + t, or with packed sequences of their own
// lengths (record_varlen, HAS_OFFSETS) the sequence's first token plus t.
fn token(d: GdnDims, b: u32, t: u32) -> u32 {
    return b * d.steps + t;
}

// Start of q[b, t, hk, :] and k[b, t, hk, :] (and of the tape's k at key heads).
fn qk_row(d: GdnDims, b: u32, t: u32, hk: u32) -> u32 {
    return (token(d, b, t) * d.key_heads + hk) * d.key_dim;
}

// Index of v[b, t, hv, dv], y[...] and the tape's delta[...].
fn v_index(d: GdnDims, b: u32, t: u32, hv: u32, dv: u32) -> u32 {
    return (token(d, b, t) * d.value_heads + hv) * d.value_dim + dv;
}

// Index of g[b, t, hv], beta[...] and the tape's g[...].
fn gate_index(d: GdnDims, b: u32, t: u32, hv: u32) -> u32 {
    return token(d, b, t) * d.value_heads + hv;
}

// Index of mask[b, t].
fn mask_index(d: GdnDims, b: u32, t: u32) -> u32 {
    return token(d, b, t);
}

// Start of state[b, hv, dv, :].
fn state_row(d: GdnDims, b: u32, hv: u32, dv: u32) -> u32 {
    return ((b * d.value_heads + hv) * d.value_dim + dv) * d.key_dim;
}

// Start of the tape's k[b, t, hv, :].
fn tape_k_row(d: GdnDims, b: u32, t: u32, hv: u32) -> u32 {
    return (token(d, b, t) * d.value_heads + hv) * d.key_dim;
}

// The state rows one invocation of record / replay holds. Workgroup wg serves ROWS rows
// of head (b, hv), from dv = row_base; LANES lanes share a row and an invocation holds
// the local rows first_row + rr, rr < RPT. Lane `lane` keeps the columns
// lane_col(m, lane) .. + 4 of each, m < GROUPS.
struct RowTile {
    b: u32,
    hv: u32,
    lane: u32,
    row_base: u32,
    first_row: u32,
}

fn row_tile(d: GdnDims, row_blocks: u32, wg: u32, li: u32) -> RowTile {
    let head = wg / row_blocks;
    return RowTile(head / d.value_heads, head % d.value_heads, li % LANES, (wg % row_blocks) * ROWS, (li / LANES) * RPT);
}

fn lane_col(m: u32, lane: u32) -> u32 {
    return (m * LANES + lane) * 4u;
}

// A layer's raw inputs and packed parameters (docs/SPEC.md "record_layer"): the WGSL
// twin of src/shape.rs's LayerShape formulas and of the gates' rule, shared by
// record_layer's staging (layer_staging.wgsl) and the prologue pass.

// The L2 norm's epsilon (src/op/prologue/cpu.rs's NORM_EPS).
const NORM_EPS: f32 = 1e-6;

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
    store1_g(gi, first.x);
    store1_beta(gi, first.y);
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
    if lone {
        switch which {
            case 0u: { store1_q(i, pair.x); }
            case 1u: { store1_k(i, pair.x); }
            default: { store1_v(i, pair.x); }
        }
        return;
    }
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
