// deltatape kernel prologue_varlen.f32.f32.f32.workgroup.l1r64g1t1c1
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
const HAS_SEQUENCES: bool = true;
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
const TOKENS: u32 = 8u;
const QK_PAIRS: u32 = 2u;
const PACKED: bool = true;

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

@group(0) @binding(11) var<storage, read> sequences_buf: array<u32>;
fn load_sequences(i: u32) -> u32 {
    return sequences_buf[i];
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

// prologue (SPEC.md "prologue"): record_layer's prologue as a pass of its own. For each
// token and channel c, the causal conv over seq = window[b, c, :] ++ x[b, :, c], SiLU;
// q's and k's heads normalised (q's scaled); the gates from a and b. q, k, v rounded to
// the activation dtype and g, beta to the gates' by their stores, once.
//
// Workgroup wg serves one slot of a block, TOKENS consecutive tokens of one sequence
// (PACKED: sequences of their own lengths, each from its own window; the sequence table
// gives the offsets and each sequence's first block): slots
// 0 .. Hk are q's heads, Hk .. 2 Hk k's (a head's channels are the slot's Dk from
// slot * Dk), then one a value head (its Dv channels, and the tokens' g and beta). Each
// invocation owns channel pairs (2 p, 2 p + 1), p = li, li + WG_SIZE, ...: a 16-bit
// pair is one word, and with an even Dk and Dv (the host checks it for bf16) no word
// holds two slots' values. It keeps a pair's weights and last K - 1 inputs in
// registers, so each token's conv reads one new input a channel. A head's norms (one a
// token) are summed through workgroup memory while its values wait in registers
// (QK_PAIRS pairs an invocation cover MAX_KEY_DIM).

struct PrologueParams {
    dims: GdnDims,    // PACKED: batch S, steps 0; first_token 0; conv_taps K
    slots: u32,       // 2 Hk + Hv
    blocks: u32,      // ceil(T / TOKENS): a sequence's blocks; PACKED: every sequence's
    workgroups: u32,  // slots * blocks (* B padded)
    gate_len: u32,    // g's elements: every token's Hv
}

// A block: its sequence (the window's index), the global token of the sequence's step 0,
// the sequence's length and the block's first step.
struct Block {
    seq: u32,
    first: u32,
    len: u32,
    t0: u32,
}

// Block `index` (padded: B blocks a sequence in order; PACKED: found in the table's
// first blocks, the last sequence whose first block is at most `index`).
fn block_at(d: GdnDims, index: u32) -> Block {
    var blk: Block;
    let s_n = d.batch;
    var lo = 0u;
    var hi = s_n;
    for (var i = 0u; i < 32u; i++) {
        if hi - lo > 1u {
            let mid = (lo + hi) / 2u;
            if load_sequences(s_n + 1u + mid) <= index {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    }
    blk.seq = lo;
    blk.first = load_sequences(lo);
    blk.len = load_sequences(lo + 1u) - blk.first;
    blk.t0 = (index - load_sequences(s_n + 1u + lo)) * TOKENS;
    return blk;
}

@group(0) @binding(0) var<uniform> params: PrologueParams;

// Invocations that add up one token's partial norms.
const NORM_LANES: u32 = WG_SIZE / TOKENS;

// Each token's partial sums of squares, one an invocation; then NORM_LANES sums a token.
var<workgroup> partial: array<f32, TOKENS * WG_SIZE>;
// Each token's scale: its inverse norm times q's scale.
var<workgroup> token_scale: array<f32, TOKENS>;

// One channel pair's conv: weights and inputs right-aligned in TAPS, the second channel
// all zeros where the slot's width is odd and the pair is its last.
struct PairConv {
    weights: array<vec2<f32>, TAPS>,
    bias: vec2<f32>,
    // The pair's inputs before the next token, [TAPS - 1] unused.
    inputs: array<vec2<f32>, TAPS>,
}

// Input `pos` of channel ch's sequence in `blk`: x's step pos where pos >= 0, else the
// window's value pos from its end (-1 the newest); 0 before the window.
fn seq_at(d: GdnDims, blk: Block, pos: i32, ch: u32) -> f32 {
    if pos >= 0 {
        return load1_x((blk.first + u32(pos)) * conv_channels(d) + ch);
    }
    let s = i32(d.conv_taps) - 1 + pos;
    if s < 0 {
        return 0.0;
    }
    return load1_window(window_index(d, blk.seq, ch, u32(s)));
}

// The conv of channels ch, ch + 1 (`two`: the second exists) from the block's first step.
fn pair_conv(d: GdnDims, blk: Block, ch: u32, two: bool) -> PairConv {
    var pc: PairConv;
    let c_n = conv_channels(d);
    let first = TAPS - d.conv_taps;
    pc.bias = vec2<f32>(layer_f32(c_n * d.conv_taps + ch), 0.0);
    if two {
        pc.bias.y = layer_f32(c_n * d.conv_taps + ch + 1u);
    }
    for (var j = 0u; j < TAPS; j++) {
        if j >= first {
            let tap = j - first;
            pc.weights[j] = vec2<f32>(layer_f32(ch * d.conv_taps + tap), 0.0);
            if two {
                pc.weights[j].y = layer_f32((ch + 1u) * d.conv_taps + tap);
            }
        }
        if j + 1u < TAPS {
            // The input j of the first token's taps: step t0 - (TAPS - 1) + j.
            let pos = i32(blk.t0) + i32(j) - i32(TAPS - 1u);
            pc.inputs[j] = vec2<f32>(seq_at(d, blk, pos, ch), 0.0);
            if two {
                pc.inputs[j].y = seq_at(d, blk, pos, ch + 1u);
            }
        }
    }
    return pc;
}

// SiLU of the pair's conv at the next token, whose input is x; the inputs move on.
fn conv_step(pc: ptr<function, PairConv>, x: vec2<f32>) -> vec2<f32> {
    var u = (*pc).bias + (*pc).weights[TAPS - 1u] * x;
    for (var j = 0u; j < TAPS - 1u; j++) {
        u += (*pc).weights[j] * (*pc).inputs[j];
    }
    for (var j = 0u; j < TAPS - 2u; j++) {
        (*pc).inputs[j] = (*pc).inputs[j + 1u];
    }
    (*pc).inputs[TAPS - 2u] = x;
    return u / (1.0 + exp(-u));
}

// The pair's input at step t of the block's sequence (0 past its end).
fn x_pair(d: GdnDims, blk: Block, t: u32, ch: u32, two: bool) -> vec2<f32> {
    var x = vec2<f32>(0.0);
    if t < blk.len {
        let row = (blk.first + t) * conv_channels(d) + ch;
        x.x = load1_x(row);
        if two {
            x.y = load1_x(row + 1u);
        }
    }
    return x;
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

// Store a pair at index i of q, k or v (`which` 0, 1, 2); the second value only where
// it exists (`two`: bf16 never has a lone value, the host refuses odd widths). Ifs, not
// a switch (tests/dawn.rs: no kernel uses one).
fn store_pair(which: u32, i: u32, pair: vec2<f32>, two: bool) {
    if !two {
        if which == 0u {
            store1_q(i, pair.x);
        } else if which == 1u {
            store1_k(i, pair.x);
        } else {
            store1_v(i, pair.x);
        }
        return;
    }
    if which == 0u {
        store2_q(i, pair.x, pair.y);
    } else if which == 1u {
        store2_k(i, pair.x, pair.y);
    } else {
        store2_v(i, pair.x, pair.y);
    }
}

// q's or k's head `slot` over the block's tokens: conv and SiLU into registers, each
// token's norm through workgroup memory, then the scaled values stored.
fn qk_head(d: GdnDims, blk: Block, slot: u32, li: u32) {
    let first = slot * d.key_dim;
    let pairs = (d.key_dim + 1u) / 2u;
    // The index formulas of shape.wgsl at the block's global token (sequence 0 of a
    // padded batch whose step is the token).
    let row_of = qk_row(d, 0u, blk.first + blk.t0, slot % d.key_heads);
    let row_stride = d.key_heads * d.key_dim;  // from one token's q (k) to the next's
    var values: array<array<vec2<f32>, TOKENS>, QK_PAIRS>;
    var own: array<f32, TOKENS>;
    {
        let o = 0u;
        let p = li + o * WG_SIZE;
        if p < pairs {
            let two = 2u * p + 1u < d.key_dim;
            var pc = pair_conv(d, blk, first + 2u * p, two);
            {
                let c = 0u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                values[o][c] = s;
                own[c] += dot(s, s);
            }
            {
                let c = 1u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                values[o][c] = s;
                own[c] += dot(s, s);
            }
            {
                let c = 2u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                values[o][c] = s;
                own[c] += dot(s, s);
            }
            {
                let c = 3u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                values[o][c] = s;
                own[c] += dot(s, s);
            }
            {
                let c = 4u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                values[o][c] = s;
                own[c] += dot(s, s);
            }
            {
                let c = 5u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                values[o][c] = s;
                own[c] += dot(s, s);
            }
            {
                let c = 6u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                values[o][c] = s;
                own[c] += dot(s, s);
            }
            {
                let c = 7u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                values[o][c] = s;
                own[c] += dot(s, s);
            }
        }
    }
    {
        let o = 1u;
        let p = li + o * WG_SIZE;
        if p < pairs {
            let two = 2u * p + 1u < d.key_dim;
            var pc = pair_conv(d, blk, first + 2u * p, two);
            {
                let c = 0u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                values[o][c] = s;
                own[c] += dot(s, s);
            }
            {
                let c = 1u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                values[o][c] = s;
                own[c] += dot(s, s);
            }
            {
                let c = 2u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                values[o][c] = s;
                own[c] += dot(s, s);
            }
            {
                let c = 3u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                values[o][c] = s;
                own[c] += dot(s, s);
            }
            {
                let c = 4u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                values[o][c] = s;
                own[c] += dot(s, s);
            }
            {
                let c = 5u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                values[o][c] = s;
                own[c] += dot(s, s);
            }
            {
                let c = 6u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                values[o][c] = s;
                own[c] += dot(s, s);
            }
            {
                let c = 7u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                values[o][c] = s;
                own[c] += dot(s, s);
            }
        }
    }
    {
        let c = 0u;
        partial[c * WG_SIZE + li] = own[c];
    }
    {
        let c = 1u;
        partial[c * WG_SIZE + li] = own[c];
    }
    {
        let c = 2u;
        partial[c * WG_SIZE + li] = own[c];
    }
    {
        let c = 3u;
        partial[c * WG_SIZE + li] = own[c];
    }
    {
        let c = 4u;
        partial[c * WG_SIZE + li] = own[c];
    }
    {
        let c = 5u;
        partial[c * WG_SIZE + li] = own[c];
    }
    {
        let c = 6u;
        partial[c * WG_SIZE + li] = own[c];
    }
    {
        let c = 7u;
        partial[c * WG_SIZE + li] = own[c];
    }
    workgroupBarrier();
    // Lane li adds up part li % NORM_LANES of token li / NORM_LANES's partials.
    let token_of = li / NORM_LANES;
    var sum = 0.0;
    for (var m = li % NORM_LANES; m < WG_SIZE; m += NORM_LANES) {
        sum += partial[token_of * WG_SIZE + m];
    }
    workgroupBarrier();
    partial[li] = sum;
    workgroupBarrier();
    if li < TOKENS {
        var total = 0.0;
        for (var m = 0u; m < NORM_LANES; m++) {
            total += partial[li * NORM_LANES + m];
        }
        let base = gates_base(d) + 2u * d.value_heads;
        let norm = load_layer(base + 1u) != 0u;
        let q_scale = select(1.0, layer_f32(base), slot < d.key_heads);
        token_scale[li] = select(1.0, inverseSqrt(total + NORM_EPS), norm) * q_scale;
    }
    workgroupBarrier();
    let which = select(1u, 0u, slot < d.key_heads);
    {
        let o = 0u;
        let p = li + o * WG_SIZE;
        if p < pairs {
            {
                let c = 0u;
                if blk.t0 + c < blk.len {
                    let two = 2u * p + 1u < d.key_dim;
                    let i = row_of + c * row_stride + 2u * p;
                    store_pair(which, i, values[o][c] * token_scale[c], two);
                }
            }
            {
                let c = 1u;
                if blk.t0 + c < blk.len {
                    let two = 2u * p + 1u < d.key_dim;
                    let i = row_of + c * row_stride + 2u * p;
                    store_pair(which, i, values[o][c] * token_scale[c], two);
                }
            }
            {
                let c = 2u;
                if blk.t0 + c < blk.len {
                    let two = 2u * p + 1u < d.key_dim;
                    let i = row_of + c * row_stride + 2u * p;
                    store_pair(which, i, values[o][c] * token_scale[c], two);
                }
            }
            {
                let c = 3u;
                if blk.t0 + c < blk.len {
                    let two = 2u * p + 1u < d.key_dim;
                    let i = row_of + c * row_stride + 2u * p;
                    store_pair(which, i, values[o][c] * token_scale[c], two);
                }
            }
            {
                let c = 4u;
                if blk.t0 + c < blk.len {
                    let two = 2u * p + 1u < d.key_dim;
                    let i = row_of + c * row_stride + 2u * p;
                    store_pair(which, i, values[o][c] * token_scale[c], two);
                }
            }
            {
                let c = 5u;
                if blk.t0 + c < blk.len {
                    let two = 2u * p + 1u < d.key_dim;
                    let i = row_of + c * row_stride + 2u * p;
                    store_pair(which, i, values[o][c] * token_scale[c], two);
                }
            }
            {
                let c = 6u;
                if blk.t0 + c < blk.len {
                    let two = 2u * p + 1u < d.key_dim;
                    let i = row_of + c * row_stride + 2u * p;
                    store_pair(which, i, values[o][c] * token_scale[c], two);
                }
            }
            {
                let c = 7u;
                if blk.t0 + c < blk.len {
                    let two = 2u * p + 1u < d.key_dim;
                    let i = row_of + c * row_stride + 2u * p;
                    store_pair(which, i, values[o][c] * token_scale[c], two);
                }
            }
        }
    }
    {
        let o = 1u;
        let p = li + o * WG_SIZE;
        if p < pairs {
            {
                let c = 0u;
                if blk.t0 + c < blk.len {
                    let two = 2u * p + 1u < d.key_dim;
                    let i = row_of + c * row_stride + 2u * p;
                    store_pair(which, i, values[o][c] * token_scale[c], two);
                }
            }
            {
                let c = 1u;
                if blk.t0 + c < blk.len {
                    let two = 2u * p + 1u < d.key_dim;
                    let i = row_of + c * row_stride + 2u * p;
                    store_pair(which, i, values[o][c] * token_scale[c], two);
                }
            }
            {
                let c = 2u;
                if blk.t0 + c < blk.len {
                    let two = 2u * p + 1u < d.key_dim;
                    let i = row_of + c * row_stride + 2u * p;
                    store_pair(which, i, values[o][c] * token_scale[c], two);
                }
            }
            {
                let c = 3u;
                if blk.t0 + c < blk.len {
                    let two = 2u * p + 1u < d.key_dim;
                    let i = row_of + c * row_stride + 2u * p;
                    store_pair(which, i, values[o][c] * token_scale[c], two);
                }
            }
            {
                let c = 4u;
                if blk.t0 + c < blk.len {
                    let two = 2u * p + 1u < d.key_dim;
                    let i = row_of + c * row_stride + 2u * p;
                    store_pair(which, i, values[o][c] * token_scale[c], two);
                }
            }
            {
                let c = 5u;
                if blk.t0 + c < blk.len {
                    let two = 2u * p + 1u < d.key_dim;
                    let i = row_of + c * row_stride + 2u * p;
                    store_pair(which, i, values[o][c] * token_scale[c], two);
                }
            }
            {
                let c = 6u;
                if blk.t0 + c < blk.len {
                    let two = 2u * p + 1u < d.key_dim;
                    let i = row_of + c * row_stride + 2u * p;
                    store_pair(which, i, values[o][c] * token_scale[c], two);
                }
            }
            {
                let c = 7u;
                if blk.t0 + c < blk.len {
                    let two = 2u * p + 1u < d.key_dim;
                    let i = row_of + c * row_stride + 2u * p;
                    store_pair(which, i, values[o][c] * token_scale[c], two);
                }
            }
        }
    }
}

// v's head hv over the block's tokens, and their gates.
fn v_head(d: GdnDims, blk: Block, hv: u32, li: u32) {
    let first = 2u * d.key_heads * d.key_dim + hv * d.value_dim;
    let pairs = (d.value_dim + 1u) / 2u;
    let row_of = v_index(d, 0u, blk.first + blk.t0, hv, 0u);
    let row_stride = d.value_heads * d.value_dim;
    let trips = (pairs + WG_SIZE - 1u) / WG_SIZE;
    for (var j = 0u; j < trips; j++) {
        let p = li + j * WG_SIZE;
        if p < pairs {
            let two = 2u * p + 1u < d.value_dim;
            var pc = pair_conv(d, blk, first + 2u * p, two);
            {
                let c = 0u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                if blk.t0 + c < blk.len {
                    store_pair(2u, row_of + c * row_stride + 2u * p, s, two);
                }
            }
            {
                let c = 1u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                if blk.t0 + c < blk.len {
                    store_pair(2u, row_of + c * row_stride + 2u * p, s, two);
                }
            }
            {
                let c = 2u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                if blk.t0 + c < blk.len {
                    store_pair(2u, row_of + c * row_stride + 2u * p, s, two);
                }
            }
            {
                let c = 3u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                if blk.t0 + c < blk.len {
                    store_pair(2u, row_of + c * row_stride + 2u * p, s, two);
                }
            }
            {
                let c = 4u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                if blk.t0 + c < blk.len {
                    store_pair(2u, row_of + c * row_stride + 2u * p, s, two);
                }
            }
            {
                let c = 5u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                if blk.t0 + c < blk.len {
                    store_pair(2u, row_of + c * row_stride + 2u * p, s, two);
                }
            }
            {
                let c = 6u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                if blk.t0 + c < blk.len {
                    store_pair(2u, row_of + c * row_stride + 2u * p, s, two);
                }
            }
            {
                let c = 7u;
                let s = conv_step(&pc, x_pair(d, blk, blk.t0 + c, first + 2u * p, two));
                if blk.t0 + c < blk.len {
                    store_pair(2u, row_of + c * row_stride + 2u * p, s, two);
                }
            }
        }
    }
    if li < TOKENS && blk.t0 + li < blk.len {
        store_gates(d, gate_index(d, 0u, blk.first + blk.t0 + li, hv));
    }
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let d = params.dims;
    let slot = wg % params.slots;
    let blk = block_at(d, wg / params.slots);
    if slot < 2u * d.key_heads {
        qk_head(d, blk, slot, li);
    } else {
        v_head(d, blk, slot - 2u * d.key_heads, li);
    }
}
