// deltatape kernel record_layer_varlen.f32.f32.f32.subgroup.l4r32g8t1c8.v4
const HAS_X: bool = true;
const HAS_WINDOW: bool = true;
const HAS_LAYER: bool = true;
const HAS_A: bool = true;
const HAS_B: bool = true;
const HAS_STATE_IN: bool = true;
const HAS_Y: bool = true;
const HAS_STATE_OUT: bool = true;
const HAS_DELTA: bool = true;
const HAS_MASK: bool = false;
const HAS_TAPE_K_GROUPED: bool = false;
const HAS_TAPE_G: bool = false;
const HAS_OFFSETS: bool = true;
const WG_SIZE: u32 = 128u;
const VEC4: bool = true;
const HAS_BF16: bool = false;
const SUBGROUP: bool = true;
const ACT_BF16: bool = false;
const ACT_F16: bool = false;
const STATE_BF16: bool = false;
const STATE_F16: bool = false;
const TAPE_BF16: bool = false;
const GATE_BF16: bool = false;
const GATE_F16: bool = false;
const HAS_SNAPSHOT: bool = false;
const HAS_STATUS: bool = false;
const LANES: u32 = 4u;
const ROWS: u32 = 32u;
const GROUPS: u32 = 8u;
const RPT: u32 = 1u;
const CHUNK: u32 = 8u;
const KQ_ITEMS: u32 = 2u;
const V_ITEMS: u32 = 2u;
const PAIRS_OUTPUTS: bool = false;
const PAIRS_IN_THREAD: bool = false;
const FOLD: bool = false;
const EARLY_FOLD: bool = false;
const SCALED_STATE: bool = false;
const STEPS_PER_SUM: u32 = 1u;
const STEP_VALUES: u32 = 4u;
const STEP_SUMS: u32 = 1u;
const MULTI_STEP: bool = false;
const QK_OWNED: u32 = 1u;
const V_OWNED: u32 = 1u;

@group(0) @binding(1) var<storage, read> x_buf: array<f32>;
fn load1_x(i: u32) -> f32 {
    let x = x_buf[i];
    return x;
}
alias x_raw1 = f32;
fn raw1_x(i: u32) -> x_raw1 {
    return x_buf[i];
}
fn unpack1_x(x: x_raw1, i: u32) -> f32 {
    return x;
}

@group(0) @binding(2) var<storage, read> window_buf: array<f32>;
fn load1_window(i: u32) -> f32 {
    let x = window_buf[i];
    return x;
}
alias window_raw1 = f32;
fn raw1_window(i: u32) -> window_raw1 {
    return window_buf[i];
}
fn unpack1_window(x: window_raw1, i: u32) -> f32 {
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
alias a_raw1 = f32;
fn raw1_a(i: u32) -> a_raw1 {
    return a_buf[i];
}
fn unpack1_a(x: a_raw1, i: u32) -> f32 {
    return x;
}

@group(0) @binding(5) var<storage, read> b_buf: array<f32>;
fn load1_b(i: u32) -> f32 {
    let x = b_buf[i];
    return x;
}
alias b_raw1 = f32;
fn raw1_b(i: u32) -> b_raw1 {
    return b_buf[i];
}
fn unpack1_b(x: b_raw1, i: u32) -> f32 {
    return x;
}

@group(0) @binding(6) var<storage, read> state_in_buf: array<vec4<f32>>;
fn load1_state_in(i: u32) -> f32 {
    let x = state_in_buf[i >> 2u][i & 3u];
    return x;
}
alias state_in_raw1 = f32;
fn raw1_state_in(i: u32) -> state_in_raw1 {
    return state_in_buf[i >> 2u][i & 3u];
}
fn unpack1_state_in(x: state_in_raw1, i: u32) -> f32 {
    return x;
}
fn load_state_in(base: u32, i: u32, n: u32) -> vec4<f32> {
    let x = state_in_buf[(base + i) >> 2u];
    return select(vec4<f32>(0.0), x, i < n);
}
alias state_in_raw = vec4<f32>;
fn raw_state_in(base: u32, i: u32, n: u32) -> state_in_raw {
    return state_in_buf[(base + i) >> 2u];
}
fn unpack_state_in(x: state_in_raw, i: u32, n: u32) -> vec4<f32> {
    return select(vec4<f32>(0.0), x, i < n);
}

@group(0) @binding(7) var<storage, read_write> y_buf: array<f32>;
fn load1_y(i: u32) -> f32 {
    let x = y_buf[i];
    return x;
}
alias y_raw1 = f32;
fn raw1_y(i: u32) -> y_raw1 {
    return y_buf[i];
}
fn unpack1_y(x: y_raw1, i: u32) -> f32 {
    return x;
}
fn store1_y(i: u32, v: f32) {
    y_buf[i] = v;
}
fn store2_y(i: u32, a: f32, b: f32) {
    y_buf[i] = a;
    y_buf[i + 1u] = b;
}

@group(0) @binding(8) var<storage, read_write> state_out_buf: array<vec4<f32>>;
fn load1_state_out(i: u32) -> f32 {
    let x = state_out_buf[i >> 2u][i & 3u];
    return x;
}
alias state_out_raw1 = f32;
fn raw1_state_out(i: u32) -> state_out_raw1 {
    return state_out_buf[i >> 2u][i & 3u];
}
fn unpack1_state_out(x: state_out_raw1, i: u32) -> f32 {
    return x;
}
fn load_state_out(base: u32, i: u32, n: u32) -> vec4<f32> {
    let x = state_out_buf[(base + i) >> 2u];
    return select(vec4<f32>(0.0), x, i < n);
}
alias state_out_raw = vec4<f32>;
fn raw_state_out(base: u32, i: u32, n: u32) -> state_out_raw {
    return state_out_buf[(base + i) >> 2u];
}
fn unpack_state_out(x: state_out_raw, i: u32, n: u32) -> vec4<f32> {
    return select(vec4<f32>(0.0), x, i < n);
}
fn store_state_out(base: u32, i: u32, n: u32, v: vec4<f32>) {
    if i < n {
        state_out_buf[(base + i) >> 2u] = v;
    }
}

@group(0) @binding(9) var<storage, read_write> delta_buf: array<f32>;
fn load1_delta(i: u32) -> f32 {
    let x = delta_buf[i];
    return x;
}
alias delta_raw1 = f32;
fn raw1_delta(i: u32) -> delta_raw1 {
    return delta_buf[i];
}
fn unpack1_delta(x: delta_raw1, i: u32) -> f32 {
    return x;
}
fn store1_delta(i: u32, v: f32) {
    delta_buf[i] = v;
}
fn store2_delta(i: u32, a: f32, b: f32) {
    delta_buf[i] = a;
    delta_buf[i + 1u] = b;
}

@group(0) @binding(10) var<storage, read> offsets_buf: array<u32>;
fn load_offsets(i: u32) -> u32 {
    return offsets_buf[i];
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
    return d.first_token + t;
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

// The state-row kernels' tiling (record, replay, fold_record). One workgroup serves
// ROWS rows dv of one (b, hv) head (shape.wgsl's row_tile). LANES lanes share a row, and
// each invocation holds RPT rows: lane j keeps the state elements of groups
// i = (m * LANES + j) * 4, m < GROUPS, of each of its rows in registers for all T steps
// (the #unroll loops over m, rr and j keep every array index constant, so the arrays
// stay in registers). An invocation whose row lies past Dv holds the clamped last row
// and never stores it.

@group(0) @binding(0) var<uniform> params: GdnParams;

alias StateTile = array<vec4<f32>, GROUPS * RPT>;

// The entry's call (wgsl/entry.wgsl): workgroup `wg`'s tile, handed to the root's
// row_kernel (past the grid, nothing).
fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let d = params.dims;
    row_kernel(d, row_tile(d, params.row_blocks, wg, li), li, sg);
}

// The rows first_dv .. first_dv + RPT of head (b, hv) into `s`, from the state the
// root's load_start_state reads.
fn load_tile(s: ptr<function, StateTile>, d: GdnDims, b: u32, hv: u32, first_dv: u32, lane: u32) {
    {
        let rr = 0u;
        let srow = state_row(d, b, hv, min(first_dv + rr, d.value_dim - 1u));
        {
            let m = 0u;
            (*s)[rr * GROUPS + m] = load_start_state(srow, lane_col(m, lane), d.key_dim);
        }
        {
            let m = 1u;
            (*s)[rr * GROUPS + m] = load_start_state(srow, lane_col(m, lane), d.key_dim);
        }
        {
            let m = 2u;
            (*s)[rr * GROUPS + m] = load_start_state(srow, lane_col(m, lane), d.key_dim);
        }
        {
            let m = 3u;
            (*s)[rr * GROUPS + m] = load_start_state(srow, lane_col(m, lane), d.key_dim);
        }
        {
            let m = 4u;
            (*s)[rr * GROUPS + m] = load_start_state(srow, lane_col(m, lane), d.key_dim);
        }
        {
            let m = 5u;
            (*s)[rr * GROUPS + m] = load_start_state(srow, lane_col(m, lane), d.key_dim);
        }
        {
            let m = 6u;
            (*s)[rr * GROUPS + m] = load_start_state(srow, lane_col(m, lane), d.key_dim);
        }
        {
            let m = 7u;
            (*s)[rr * GROUPS + m] = load_start_state(srow, lane_col(m, lane), d.key_dim);
        }
    }
}

// Everything a state-row kernel's step reads besides the state (k, record's q, the
// row's v or the tape's delta, the gates, the mask) is staged CHUNK steps at a time in
// workgroup memory: k (and q) are the same for every row of the head, and each staged
// value an invocation reads serves its RPT rows. The next chunk's global loads are
// issued before the current chunk is computed and land in registers (the next_*
// variables), so their latency hides behind the arithmetic instead of stalling every
// step.

const STAGED: u32 = GROUPS * LANES; // vec4s of one k (or q) row

// Index of the v (or delta) element that slot i of a chunk staged from step t0 holds:
// step t0 + i / ROWS, row row_base + i % ROWS clamped to the head's last row.
fn staged_row_index(d: GdnDims, b: u32, hv: u32, row_base: u32, t0: u32, i: u32) -> u32 {
    return v_index(d, b, t0 + i / ROWS, hv, min(row_base + i % ROWS, d.value_dim - 1u));
}

// How many of begin, begin + stride, begin + 2 stride, ... lie below end (stride >= 1):
// the trip count of a strided walk whose end is known only at run time, written
// `for (var n = 0u; n < strides(begin, end, stride); n++) { let x = begin + n * stride; }`.
// The loop rule (src/gpu/loops.rs) proves such a loop ends; `x += stride` towards a
// run-time end could wrap past u32's largest value, and the rule refuses it.
fn strides(begin: u32, end: u32, stride: u32) -> u32 {
    if begin >= end {
        return 0u;
    }
    let span = end - begin;
    return span / stride + select(0u, 1u, span % stride != 0u);
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
    {
        let o = 0u;
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
    {
        let o = 0u;
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
    {
        let o = 0u;
        let g = li + o * WG_SIZE;
        if g < QK_GROUPS {
            {
                let c = 0u;
                if c < n {
                    for (var e = 0u; e < 4u; e++) {
                        next_qk[o][c][e] = x_at(d, b, t0 + c, qk_channel(d, hk, g, e).x);
                    }
                }
            }
            {
                let c = 1u;
                if c < n {
                    for (var e = 0u; e < 4u; e++) {
                        next_qk[o][c][e] = x_at(d, b, t0 + c, qk_channel(d, hk, g, e).x);
                    }
                }
            }
            {
                let c = 2u;
                if c < n {
                    for (var e = 0u; e < 4u; e++) {
                        next_qk[o][c][e] = x_at(d, b, t0 + c, qk_channel(d, hk, g, e).x);
                    }
                }
            }
            {
                let c = 3u;
                if c < n {
                    for (var e = 0u; e < 4u; e++) {
                        next_qk[o][c][e] = x_at(d, b, t0 + c, qk_channel(d, hk, g, e).x);
                    }
                }
            }
            {
                let c = 4u;
                if c < n {
                    for (var e = 0u; e < 4u; e++) {
                        next_qk[o][c][e] = x_at(d, b, t0 + c, qk_channel(d, hk, g, e).x);
                    }
                }
            }
            {
                let c = 5u;
                if c < n {
                    for (var e = 0u; e < 4u; e++) {
                        next_qk[o][c][e] = x_at(d, b, t0 + c, qk_channel(d, hk, g, e).x);
                    }
                }
            }
            {
                let c = 6u;
                if c < n {
                    for (var e = 0u; e < 4u; e++) {
                        next_qk[o][c][e] = x_at(d, b, t0 + c, qk_channel(d, hk, g, e).x);
                    }
                }
            }
            {
                let c = 7u;
                if c < n {
                    for (var e = 0u; e < 4u; e++) {
                        next_qk[o][c][e] = x_at(d, b, t0 + c, qk_channel(d, hk, g, e).x);
                    }
                }
            }
        }
    }
    {
        let o = 0u;
        let r = li + o * WG_SIZE;
        if r < ROWS {
            let ch = v_channel(d, hv, row_base, r);
            {
                let c = 0u;
                if c < n {
                    next_v[o][c] = x_at(d, b, t0 + c, ch);
                }
            }
            {
                let c = 1u;
                if c < n {
                    next_v[o][c] = x_at(d, b, t0 + c, ch);
                }
            }
            {
                let c = 2u;
                if c < n {
                    next_v[o][c] = x_at(d, b, t0 + c, ch);
                }
            }
            {
                let c = 3u;
                if c < n {
                    next_v[o][c] = x_at(d, b, t0 + c, ch);
                }
            }
            {
                let c = 4u;
                if c < n {
                    next_v[o][c] = x_at(d, b, t0 + c, ch);
                }
            }
            {
                let c = 5u;
                if c < n {
                    next_v[o][c] = x_at(d, b, t0 + c, ch);
                }
            }
            {
                let c = 6u;
                if c < n {
                    next_v[o][c] = x_at(d, b, t0 + c, ch);
                }
            }
            {
                let c = 7u;
                if c < n {
                    next_v[o][c] = x_at(d, b, t0 + c, ch);
                }
            }
        }
    }
    if li < n {
        let gi = gate_index(d, b, t0 + li, hv);
        next_ab = vec2<f32>(load1_a(gi), load1_b(gi));
    }
}

fn round_act(x: f32) -> f32 {
    return x;
}

fn round_act4(x: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(round_act(x.x), round_act(x.y), round_act(x.z), round_act(x.w));
}

fn round_gate(x: f32) -> f32 {
    return x;
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

// The prologue of the fetched chunk t0 .. t0 + CHUNK into the stages, and the tape's
// copies of k and g (one writer each, as record_staging.wgsl's). Slots past the
// draft's last step hold values nobody reads.
fn stage_chunk(d: GdnDims, b: u32, hv: u32, hk: u32, row_base: u32, t0: u32, li: u32, sg: u32) {
    let n = min(CHUNK, d.steps - t0);
    // q and k after the conv and SiLU, not yet normalised; each owned group's inputs
    // move on by the chunk's steps.
    {
        let o = 0u;
        let g = li + o * WG_SIZE;
        if g < QK_GROUPS {
            {
                let c = 0u;
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
            {
                let c = 1u;
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
            {
                let c = 2u;
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
            {
                let c = 3u;
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
            {
                let c = 4u;
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
            {
                let c = 5u;
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
            {
                let c = 6u;
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
            {
                let c = 7u;
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
    {
        let o = 0u;
        let r = li + o * WG_SIZE;
        if r < ROWS {
            {
                let c = 0u;
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
            {
                let c = 1u;
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
            {
                let c = 2u;
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
            {
                let c = 3u;
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
            {
                let c = 4u;
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
            {
                let c = 5u;
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
            {
                let c = 6u;
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
            {
                let c = 7u;
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
        let live = true;
        gate_stage[li] = vec4<f32>(select(1.0, gates.x, live), gates.y, select(0.0, 1.0, live), 0.0);
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
    in_subgroup = NORM_LANES <= sg;
    if in_subgroup {
        for (var o = 1u; o < NORM_LANES; o = o << 1u) {
            sums += subgroupShuffleXor(sums, o);
        }
    }
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
    {
        let j = 0u;
        let i = li + j * WG_SIZE;
        if i < CHUNK * STAGED {
            let c = i / STAGED;
            let inv = norm_stage[c];
            let kk = round_act4(k_stage[i] * inv.x);
            k_stage[i] = kk;
            q_stage[i] = round_act4(q_stage[i] * inv.y);
        }
    }
    {
        let j = 1u;
        let i = li + j * WG_SIZE;
        if i < CHUNK * STAGED {
            let c = i / STAGED;
            let inv = norm_stage[c];
            let kk = round_act4(k_stage[i] * inv.x);
            k_stage[i] = kk;
            q_stage[i] = round_act4(q_stage[i] * inv.y);
        }
    }
}

// Entry point for kernels that reduce with subgroup operations. The subgroup size is
// read at run time (Metal reports 4..64, lavapipe runs 4, 8 or 16, AMD 64) and made
// uniform through workgroupUniformLoad, so that row_sum3 may branch on it around
// barriers and subgroup operations.

var<workgroup> subgroup_width: u32;

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(local_invocation_index) li: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(subgroup_size) sg: u32,
) {
    if li == 0u {
        subgroup_width = sg;
    }
    let sg_uniform = workgroupUniformLoad(&subgroup_width);
    kernel_main(li, wid.x + wid.y * nwg.x, sg_uniform);
}

// Sum over the LANES lanes of one row (lanes li - li % LANES .. + LANES), returned to
// every lane of the row. Assumes what Metal guarantees and Vulkan drivers do: subgroups
// are consecutive runs of local_invocation_index of `sg` lanes (sg a power of two).

var<workgroup> row_partials: array<vec4<f32>, WG_SIZE>;

fn row_sum3(x: vec3<f32>, li: u32, sg: u32) -> vec3<f32> {
    if LANES <= sg {
        // The row lies inside one subgroup: butterfly over its lanes only.
        var s = x;
        for (var o = 1u; o < LANES; o = o << 1u) {
            s += subgroupShuffleXor(s, o);
        }
        return s;
    }
    // The row spans LANES / sg subgroups: one subgroupAdd each (Metal's simd_sum),
    // then the partial sums meet in workgroup memory.
    return row_sum_across(vec4<f32>(x, 0.0), li, sg).xyz;
}

// row_sum3 of four values (record's steps taken several at a time). Not the body of
// row_sum3: record's single step shuffles three values a level, not four.
fn row_sum4(x: vec4<f32>, li: u32, sg: u32) -> vec4<f32> {
    if LANES <= sg {
        var s = x;
        for (var o = 1u; o < LANES; o = o << 1u) {
            s += subgroupShuffleXor(s, o);
        }
        return s;
    }
    return row_sum_across(x, li, sg);
}

// A row over LANES / sg subgroups: one subgroupAdd each, then the partial sums meet in
// workgroup memory.
fn row_sum_across(x: vec4<f32>, li: u32, sg: u32) -> vec4<f32> {
    row_partials[li] = subgroupAdd(x);
    workgroupBarrier();
    let first = li - li % LANES;
    var s = vec4<f32>(0.0);
    for (var j = 0u; j < strides(0u, LANES, sg); j++) {
        s += row_partials[first + j * sg];
    }
    workgroupBarrier();
    return s;
}

// record's per-step outputs when neither y nor delta is bf16: lane 0 of the invocations
// holding row r (local to the workgroup) writes its element of each.

fn emit_row(li: u32, r: u32, at: u32, valid: bool, y: f32, delta: f32, t: u32, sg: u32) {
    if valid && li % LANES == 0u {
        store1_y(at, y);
        store1_delta(at, delta);
    }
}

// gated_delta_step_record (docs/SPEC.md "record") over every step of a draft, on the
// state rows an invocation holds (tile_load.wgsl): record's and fold_record's steps.
// Per step and row one reduction gives the three dot products the step needs: with
// S' = S * g,
//   delta = (v - S'.k) * beta,  S'' = S' + k delta,  y = S''.q = S'.q + delta (k.q).
// Masked steps go through select (no divergent control flow around the reduction): S
// is kept, y and delta are written as zeros. The steps' inputs are staged a chunk at a
// time (staging.wgsl, record_staging.wgsl).
//
// With STEPS_PER_SUM = M > 1 (MULTI_STEP: a class of record's for grids too small to
// hide a step's latency, where the row's reduction is the chain each step waits on; the
// table's default is one step) the steps go M at a time from the state S they start
// from, one reduction for the group's M. With P_j the product of the group's gates
// through step j and D_ji that of steps i + 1 .. j (running products, no ratios: zero
// gates stay exact), a_j = S.k_j and b_j = S.q_j:
//   delta_j = beta_j (v_j - P_j a_j) - sum_{i<j} beta_j D_ji (k_i.k_j) delta_i
//   y_j     = P_j b_j + sum_{i<=j} D_ji (k_i.q_j) delta_i
//   S      <- P_{M-1} S + sum_j D_{M-1,j} delta_j k_j
// The dot products of the group's k and q with each other are the same for every row:
// the workgroup computes them once a chunk (stage_groups), with the gates' products.
// src/op/record/cpu.rs checks the identity against the step-by-step form.
//
// The staging picks its buffers by #if, not through hook functions shared with replay:
// shared staging measured f32 record 5-19% slower on the H200 at B >= 64, traced to the
// tape k writer test computed where unused (commit 28c208e). That A/B left
// benches/results in 2a44eae:
// `git show 2a44eae^:benches/results/h200-2026-11-30-staging-ab.txt`.

var<workgroup> k_stage: array<vec4<f32>, CHUNK * STAGED>;
var<workgroup> q_stage: array<vec4<f32>, CHUNK * STAGED>;
var<workgroup> row_stage: array<f32, CHUNK * ROWS>; // v (fold_record's fold: the delta)
var<workgroup> gate_stage: array<vec4<f32>, CHUNK>; // g (1 where masked), beta, live

// Every step of the draft from the state in `s`; the first chunk has been fetched
// (fetch_chunk from step 0), so that a root can overlap its latency with other work.
fn record_steps(s: ptr<function, StateTile>, d: GdnDims, tile: RowTile, hk: u32, li: u32, sg: u32) {
    let b = tile.b;
    let hv = tile.hv;
    let lane = tile.lane;
    let row_base = tile.row_base;
    let first_row = tile.first_row;
    let first_dv = row_base + first_row;
    for (var ci = 0u; ci < strides(0u, d.steps, CHUNK); ci++) {
        let t0 = ci * CHUNK;
        workgroupBarrier(); // the previous chunk has been read
        stage_chunk(d, b, hv, hk, row_base, t0, li, sg);
        workgroupBarrier();
        let n = min(CHUNK, d.steps - t0);
        if t0 + CHUNK < d.steps {
            fetch_chunk(d, b, hv, hk, row_base, t0 + CHUNK, li);
        }

        for (var c = 0u; c < n; c++) {
            let t = t0 + c;
            let gate = gate_stage[c];
            // Unmasked kernels know every step is live: the selects fold away.
            let live = !HAS_MASK || gate.z != 0.0;
            let g = gate.x;
            let beta = gate.y;

            var kk: array<vec4<f32>, GROUPS>;
            var part = array<vec2<f32>, RPT>();
            var kq = 0.0;
            {
                let m = 0u;
                kk[m] = k_stage[c * STAGED + m * LANES + lane];
                let qq = q_stage[c * STAGED + m * LANES + lane];
                kq += dot(kk[m], qq);
                {
                    let rr = 0u;
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] * g;
                    part[rr] += vec2<f32>(dot((*s)[rr * GROUPS + m], kk[m]), dot((*s)[rr * GROUPS + m], qq));
                }
            }
            {
                let m = 1u;
                kk[m] = k_stage[c * STAGED + m * LANES + lane];
                let qq = q_stage[c * STAGED + m * LANES + lane];
                kq += dot(kk[m], qq);
                {
                    let rr = 0u;
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] * g;
                    part[rr] += vec2<f32>(dot((*s)[rr * GROUPS + m], kk[m]), dot((*s)[rr * GROUPS + m], qq));
                }
            }
            {
                let m = 2u;
                kk[m] = k_stage[c * STAGED + m * LANES + lane];
                let qq = q_stage[c * STAGED + m * LANES + lane];
                kq += dot(kk[m], qq);
                {
                    let rr = 0u;
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] * g;
                    part[rr] += vec2<f32>(dot((*s)[rr * GROUPS + m], kk[m]), dot((*s)[rr * GROUPS + m], qq));
                }
            }
            {
                let m = 3u;
                kk[m] = k_stage[c * STAGED + m * LANES + lane];
                let qq = q_stage[c * STAGED + m * LANES + lane];
                kq += dot(kk[m], qq);
                {
                    let rr = 0u;
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] * g;
                    part[rr] += vec2<f32>(dot((*s)[rr * GROUPS + m], kk[m]), dot((*s)[rr * GROUPS + m], qq));
                }
            }
            {
                let m = 4u;
                kk[m] = k_stage[c * STAGED + m * LANES + lane];
                let qq = q_stage[c * STAGED + m * LANES + lane];
                kq += dot(kk[m], qq);
                {
                    let rr = 0u;
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] * g;
                    part[rr] += vec2<f32>(dot((*s)[rr * GROUPS + m], kk[m]), dot((*s)[rr * GROUPS + m], qq));
                }
            }
            {
                let m = 5u;
                kk[m] = k_stage[c * STAGED + m * LANES + lane];
                let qq = q_stage[c * STAGED + m * LANES + lane];
                kq += dot(kk[m], qq);
                {
                    let rr = 0u;
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] * g;
                    part[rr] += vec2<f32>(dot((*s)[rr * GROUPS + m], kk[m]), dot((*s)[rr * GROUPS + m], qq));
                }
            }
            {
                let m = 6u;
                kk[m] = k_stage[c * STAGED + m * LANES + lane];
                let qq = q_stage[c * STAGED + m * LANES + lane];
                kq += dot(kk[m], qq);
                {
                    let rr = 0u;
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] * g;
                    part[rr] += vec2<f32>(dot((*s)[rr * GROUPS + m], kk[m]), dot((*s)[rr * GROUPS + m], qq));
                }
            }
            {
                let m = 7u;
                kk[m] = k_stage[c * STAGED + m * LANES + lane];
                let qq = q_stage[c * STAGED + m * LANES + lane];
                kq += dot(kk[m], qq);
                {
                    let rr = 0u;
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] * g;
                    part[rr] += vec2<f32>(dot((*s)[rr * GROUPS + m], kk[m]), dot((*s)[rr * GROUPS + m], qq));
                }
            }
            {
                let rr = 0u;
                let sums = row_sum3(vec3<f32>(part[rr], kq), li, sg);
                let dv_unclamped = first_dv + rr;
                let delta = (row_stage[c * ROWS + first_row + rr] - sums.x) * beta;
                let y = sums.y + delta * sums.z;
                {
                    let m = 0u;
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] + select(vec4<f32>(0.0), kk[m] * delta, live);
                }
                {
                    let m = 1u;
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] + select(vec4<f32>(0.0), kk[m] * delta, live);
                }
                {
                    let m = 2u;
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] + select(vec4<f32>(0.0), kk[m] * delta, live);
                }
                {
                    let m = 3u;
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] + select(vec4<f32>(0.0), kk[m] * delta, live);
                }
                {
                    let m = 4u;
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] + select(vec4<f32>(0.0), kk[m] * delta, live);
                }
                {
                    let m = 5u;
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] + select(vec4<f32>(0.0), kk[m] * delta, live);
                }
                {
                    let m = 6u;
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] + select(vec4<f32>(0.0), kk[m] * delta, live);
                }
                {
                    let m = 7u;
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] + select(vec4<f32>(0.0), kk[m] * delta, live);
                }
                let vi = v_index(d, b, t, hv, min(dv_unclamped, d.value_dim - 1u));
                let valid = dv_unclamped < d.value_dim;
                emit_row(li, first_row + rr, vi, valid, select(0.0, y, live), select(0.0, delta, live), t, sg);
            }
        }
    }
}


// A packed sequence's end offset with this bit set: the sequence belongs to another
// pass of the same call (record_varlen's mixed form runs its long sequences in chunks
// and the others in record's kernel; `skipping` in src/op/record_chunked/mod.rs marks
// the tables, and takes this constant as SKIPPED_SEQUENCE). The pass runs it as no
// steps and writes nothing of it, its final state included. Calls of 2^31 tokens or
// more are never split (GpuBackend::record_varlen_split).
const SKIPPED_SEQUENCE: u32 = 0x80000000u;

// Packed sequences of their own lengths (record_varlen, docs/SPEC.md): sequence b is
// the tokens offsets[b] .. offsets[b + 1], checked on the host (VarlenShape::new), or
// none where the end carries SKIPPED_SEQUENCE (another pass's sequence).
// A workgroup serves one sequence, so its first token and length are read once, into
// workgroup memory: a loop bound read from a storage buffer is not uniform to WGSL,
// and record's steps loop around barriers.

var<workgroup> sequence_span: vec2<u32>;
// Whether the workgroup's sequence is another pass's (set by sequence_dims).
var<private> skipped_here: bool;

// The call's dims as sequence b's: its first token and its length as T (0 where the
// sequence is skipped).
fn sequence_dims(d: GdnDims, b: u32, li: u32) -> GdnDims {
    if li == 0u {
        sequence_span = vec2<u32>(load_offsets(b), load_offsets(b + 1u));
    }
    let span = workgroupUniformLoad(&sequence_span);
    let start = span.x & ~SKIPPED_SEQUENCE;
    // From the uniform load, not through the private variable: the steps stay
    // workgroup-uniform to WGSL (record's steps loop around barriers).
    let skipped = span.y >= SKIPPED_SEQUENCE;
    skipped_here = skipped;
    var s = d;
    s.first_token = start;
    s.steps = select(span.y - start, 0u, skipped);
    return s;
}

// Whether the sequence sequence_dims read is another pass's: nothing of it is written.
fn sequence_skipped() -> bool {
    return skipped_here;
}

// The state rows an invocation holds (tile_load.wgsl), stored by the root's
// store_end_state: only the rows that lie inside the head, each by the one invocation
// that holds it.
fn store_tile(s: ptr<function, StateTile>, d: GdnDims, b: u32, hv: u32, first_dv: u32, lane: u32) {
    {
        let rr = 0u;
        if first_dv + rr < d.value_dim {
            let srow = state_row(d, b, hv, first_dv + rr);
            {
                let m = 0u;
                store_end_state(srow, lane_col(m, lane), d.key_dim, (*s)[rr * GROUPS + m]);
            }
            {
                let m = 1u;
                store_end_state(srow, lane_col(m, lane), d.key_dim, (*s)[rr * GROUPS + m]);
            }
            {
                let m = 2u;
                store_end_state(srow, lane_col(m, lane), d.key_dim, (*s)[rr * GROUPS + m]);
            }
            {
                let m = 3u;
                store_end_state(srow, lane_col(m, lane), d.key_dim, (*s)[rr * GROUPS + m]);
            }
            {
                let m = 4u;
                store_end_state(srow, lane_col(m, lane), d.key_dim, (*s)[rr * GROUPS + m]);
            }
            {
                let m = 5u;
                store_end_state(srow, lane_col(m, lane), d.key_dim, (*s)[rr * GROUPS + m]);
            }
            {
                let m = 6u;
                store_end_state(srow, lane_col(m, lane), d.key_dim, (*s)[rr * GROUPS + m]);
            }
            {
                let m = 7u;
                store_end_state(srow, lane_col(m, lane), d.key_dim, (*s)[rr * GROUPS + m]);
            }
        }
    }
}

// record (docs/SPEC.md "record"): the GatedDeltaNet forward over a draft, from
// state_in, writing y and each step's delta to the innovation tape (and, when bound,
// the tape's copies of k and g, so that a draft is one dispatch; state_out only when
// bound). The steps are wgsl/record_steps.wgsl, the tiling wgsl/tile_load.wgsl.
// record_varlen is this kernel with the sequence offsets bound (HAS_OFFSETS): each
// workgroup's b is a packed sequence (wgsl/packed_sequences.wgsl).

fn load_start_state(srow: u32, col: u32, key_dim: u32) -> vec4<f32> {
    return load_state_in(srow, col, key_dim);
}

fn store_end_state(srow: u32, col: u32, key_dim: u32, v: vec4<f32>) {
    store_state_out(srow, col, key_dim, v);
}

fn row_kernel(call: GdnDims, tile: RowTile, li: u32, sg: u32) {
    let d = sequence_dims(call, tile.b, li);
    let hk = key_head(params.gqa_layout, tile.hv, d.key_heads, d.value_heads);
    let first_dv = tile.row_base + tile.first_row;
    var s: StateTile;
    load_tile(&s, d, tile.b, tile.hv, first_dv, tile.lane);
    fetch_chunk(d, tile.b, tile.hv, hk, tile.row_base, 0u, li);
    record_steps(&s, d, tile, hk, li, sg);
    if !sequence_skipped() {
        store_tile(&s, d, tile.b, tile.hv, first_dv, tile.lane);
    }
}
