// deltatape kernel chunk_state.f32.f32.f32.workgroup.l1r8g8t1c64
const HAS_Q: bool = true;
const HAS_K: bool = true;
const HAS_STATE_IN: bool = true;
const HAS_Y: bool = true;
const HAS_STATE_OUT: bool = true;
const HAS_DELTA: bool = true;
const HAS_MASK: bool = false;
const HAS_W: bool = true;
const HAS_U: bool = true;
const HAS_M: bool = true;
const HAS_DECAY: bool = true;
const HAS_OFFSETS: bool = false;
const WG_SIZE: u32 = 256u;
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
const LANES: u32 = 1u;
const ROWS: u32 = 8u;
const GROUPS: u32 = 8u;
const RPT: u32 = 1u;
const CHUNK: u32 = 64u;
const TILE16: u32 = 16u;

@group(0) @binding(1) var<storage, read> q_buf: array<f32>;
fn load1_q(i: u32) -> f32 {
    let x = q_buf[i];
    return x;
}
fn load_q(base: u32, i: u32, n: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    for (var c = 0u; c < 4u; c++) {
        if i + c < n {
            v[c] = load1_q(base + i + c);
        }
    }
    return v;
}

@group(0) @binding(2) var<storage, read> k_buf: array<f32>;
fn load1_k(i: u32) -> f32 {
    let x = k_buf[i];
    return x;
}
fn load_k(base: u32, i: u32, n: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    for (var c = 0u; c < 4u; c++) {
        if i + c < n {
            v[c] = load1_k(base + i + c);
        }
    }
    return v;
}

@group(0) @binding(3) var<storage, read> state_in_buf: array<f32>;
fn load1_state_in(i: u32) -> f32 {
    let x = state_in_buf[i];
    return x;
}
fn load_state_in(base: u32, i: u32, n: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    for (var c = 0u; c < 4u; c++) {
        if i + c < n {
            v[c] = load1_state_in(base + i + c);
        }
    }
    return v;
}

@group(0) @binding(4) var<storage, read_write> y_buf: array<f32>;
fn load1_y(i: u32) -> f32 {
    let x = y_buf[i];
    return x;
}
fn store1_y(i: u32, v: f32) {
    y_buf[i] = v;
}
fn store2_y(i: u32, a: f32, b: f32) {
    y_buf[i] = a;
    y_buf[i + 1u] = b;
}

@group(0) @binding(5) var<storage, read_write> state_out_buf: array<f32>;
fn load1_state_out(i: u32) -> f32 {
    let x = state_out_buf[i];
    return x;
}
fn load_state_out(base: u32, i: u32, n: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    for (var c = 0u; c < 4u; c++) {
        if i + c < n {
            v[c] = load1_state_out(base + i + c);
        }
    }
    return v;
}
fn store_state_out(base: u32, i: u32, n: u32, v: vec4<f32>) {
    for (var c = 0u; c < 4u; c++) {
        if i + c < n {
            state_out_buf[base + i + c] = v[c];
        }
    }
}

@group(0) @binding(6) var<storage, read_write> delta_buf: array<f32>;
fn load1_delta(i: u32) -> f32 {
    let x = delta_buf[i];
    return x;
}
fn store1_delta(i: u32, v: f32) {
    delta_buf[i] = v;
}
fn store2_delta(i: u32, a: f32, b: f32) {
    delta_buf[i] = a;
    delta_buf[i + 1u] = b;
}

@group(0) @binding(7) var<storage, read> w_buf: array<u32>;
fn load_w(i: u32) -> u32 {
    return w_buf[i];
}

@group(0) @binding(8) var<storage, read> u_buf: array<u32>;
fn load_u(i: u32) -> u32 {
    return u_buf[i];
}

@group(0) @binding(9) var<storage, read> m_buf: array<u32>;
fn load_m(i: u32) -> u32 {
    return m_buf[i];
}

@group(0) @binding(10) var<storage, read> decay_buf: array<u32>;
fn load_decay(i: u32) -> u32 {
    return decay_buf[i];
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

// The head (b, hv) a flat index head = b * Hv + hv names, and the key head serving hv
// (record_chunked's two passes number their workgroups by it).

struct Head {
    b: u32,
    hv: u32,
    hk: u32,
}

fn head_at(d: GdnDims, gqa_layout: u32, head: u32) -> Head {
    let hv = head % d.value_heads;
    return Head(head / d.value_heads, hv, key_head(gqa_layout, hv, d.key_heads, d.value_heads));
}

// The parameters of record_chunked's passes: record's dimensions, the state pass's row
// blocks and the chunks.

struct ChunkParams {
    dims: GdnDims,
    gqa_layout: u32,  // 0 = blocked, 1 = tiled
    row_blocks: u32,  // the state pass's row blocks per head
    workgroups: u32,
    chunks: u32,      // ceil(T / CHUNK)
}

@group(0) @binding(0) var<uniform> params: ChunkParams;

// Where record_chunked's passes find their chunks (ChunkShape in
// src/op/record_chunked/mod.rs is the host's side of these formulas).
//
// B padded sequences of T steps (record): chunk n of head (b, hv) is the scratch's block
// ch = (b Hv + hv) chunks + n, chunks = ceil(T / C).
//
// Packed sequences of their own lengths (record_varlen, HAS_OFFSETS): the offsets
// binding holds the S + 1 offsets, then each sequence's first chunk (S + 1 prefix sums
// of ceil(L_s / C), the last the chunks of all sequences), then each chunk's sequence.
// Chunk n of head (s, hv) is the block ch = first[s] Hv + hv ceil(L_s / C) + n: a
// head's chunks follow one another, and ch / Hv lies in first[s] .. first[s + 1], where
// the table names s. A chunk never straddles two sequences. The dims a pass sees are
// the sequence's: its first token, and its length as T. A sequence whose end carries
// SKIPPED_SEQUENCE (wgsl/skipped_sequence.wgsl) is another pass's: it has no chunks in
// the table, and the walk writes nothing of it.

struct ChunkAt {
    d: GdnDims,
    h: Head,
    // The chunk's index in its sequence: its steps are n C .. n C + C - 1 (those from
    // d.steps on are dead).
    n: u32,
    // Its block of the scratch.
    ch: u32,
}

struct HeadChunks {
    d: GdnDims,
    h: Head,
    // The scratch block of the head's first chunk; the others follow it.
    first: u32,
    // The head's chunks.
    count: u32,
    // Whether the head's sequence is another pass's (then count is 0 and the walk
    // writes no state).
    skipped: bool,
}

// The chunk of scratch block ch (uniform in the workgroup, below the pass's blocks).
fn chunk_at(ch: u32, li: u32) -> ChunkAt {
    var d = params.dims;
    let h = head_at(d, params.gqa_layout, ch / params.chunks);
    return ChunkAt(d, h, ch % params.chunks, ch);
}

// The chunks of head `head` (b Hv + hv; packed, s Hv + hv), uniform in the workgroup.
fn head_chunks(head: u32, li: u32) -> HeadChunks {
    var d = params.dims;
    let h = head_at(d, params.gqa_layout, head);
    return HeadChunks(d, h, head * params.chunks, params.chunks, false);
}

// record_chunked, second pass (cpu.rs beside it has the math): one workgroup per
// (b, hv, block of ROWS state rows), through the head's chunks in order
// (wgsl/chunk_at.wgsl), the rows' state in workgroup memory. Per chunk, from the first
// pass's scratch (f32 bits):
//   delta[i][r] = u[i][r] - w[i] . s[r]                      (record's delta)
//   y[i][r]     = gam[i] q[i] . s[r] + sum_{j<=i} m[i][j] delta[j][r]   (0 when masked)
//   s[r]        = gam[C-1] s[r] + sum_j G(C-1, j) delta[j][r] k[j]
// A step with delta exactly 0 (masked, or past T) adds nothing to the state.
//
// Schedule, per chunk: the w . s and q . s products over TK-column tiles of w and q
// (two barriers a tile, each tile's loads issued two tiles ahead, across chunk ends, so
// they are in flight while two tiles are multiplied), one invocation per (step,
// pair of rows), so a staged value serves two rows and y needs nothing from another
// invocation but delta; one barrier; then y (the same invocation) and the state update,
// one invocation per state column, whose k values were loaded into registers before y,
// so no load waits inside the update. Workgroup arrays have odd strides:
// the invocations of a warp read different rows of them in one bank each.

// Columns of w and q staged per barrier pair.
const TK: u32 = 16u;
// A tile row's stride in workgroup memory (odd: a warp's rows fall in distinct banks).
const TKP: u32 = TK + 1u;
// State columns held: Dk rounded up to whole tiles (at most WG_SIZE).
const DKP: u32 = GROUPS * TK;
// A state row's stride in workgroup memory (odd, as TKP).
const SP: u32 = DKP + 1u;
// Row pairs of a step; one (step, row pair) unit per invocation (CHUNK * ROWS <= 2 WG_SIZE).
const PAIRS: u32 = ROWS / 2u;
// Invocations of one state column in the update, each taking every RG-th row.
const RG: u32 = WG_SIZE / DKP;
// Tile values each invocation stages.
const LPT: u32 = (CHUNK * TK + WG_SIZE - 1u) / WG_SIZE;

var<workgroup> s_sh: array<f32, ROWS * SP>;
var<workgroup> w_tile: array<f32, CHUNK * TKP>;
var<workgroup> q_tile: array<f32, CHUNK * TKP>;
var<workgroup> d_sh: array<f32, CHUNK * ROWS>;
// G(C-1, j): the decay from step j to the chunk's end.
var<workgroup> end_sh: array<f32, CHUNK>;

// This invocation's values of the w and q tile from column c0 of the head's chunk n
// (zeros past Dk and T, so also for n = its chunks).
fn chunk_state_fetch(
    w_out: ptr<function, array<f32, LPT>>,
    q_out: ptr<function, array<f32, LPT>>,
    li: u32,
    hc: HeadChunks,
    n: u32,
    c0: u32,
) {
    let d = hc.d;
    let ch = hc.first + n;
    for (var l = 0u; l < LPT; l++) {
        let e = li + l * WG_SIZE;
        let i = e / TK;
        let c = c0 + e % TK;
        let t = n * CHUNK + i;
        var wv = 0.0;
        var qv = 0.0;
        if e < CHUNK * TK && c < d.key_dim && t < d.steps {
            wv = bitcast<f32>(load_w((ch * CHUNK + i) * d.key_dim + c));
            qv = load1_q(qk_row(d, hc.h.b, t, hc.h.hk) + c);
        }
        (*w_out)[l] = wv;
        (*q_out)[l] = qv;
    }
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    // Uniform per workgroup: every barrier below is reached by all or none.
    if wg >= params.workgroups {
        return;
    }
    let rb = wg % params.row_blocks;
    let hc = head_chunks(wg / params.row_blocks, li);
    let d = hc.d;
    let h = hc.h;
    let dv0 = rb * ROWS;

    for (var e = li; e < ROWS * DKP; e += WG_SIZE) {
        let r = e / DKP;
        let c = e % DKP;
        var x = 0.0;
        if dv0 + r < d.value_dim && c < d.key_dim {
            x = load1_state_in(state_row(d, h.b, h.hv, dv0 + r) + c);
        }
        s_sh[r * SP + c] = x;
    }

    // This invocation's (step, row pair) unit in the products and y.
    let unit = li < CHUNK * PAIRS;
    let ui = li / PAIRS;
    let ur = (li % PAIRS) * 2u;
    let udv = dv0 + ur;
    // Its state column (and first row) in the update.
    let col = li % DKP;
    let row0 = li / DKP;
    let owner = row0 < RG && col < d.key_dim;

    // Tiles of w and q in flight: the next to stage, and the one after it. Tile g is
    // chunk g / tiles, columns from (g % tiles) TK.
    let tiles = (d.key_dim + TK - 1u) / TK;
    var w_next: array<f32, LPT>;
    var q_next: array<f32, LPT>;
    var w_after: array<f32, LPT>;
    var q_after: array<f32, LPT>;
    chunk_state_fetch(&w_next, &q_next, li, hc, 0u, 0u);
    chunk_state_fetch(&w_after, &q_after, li, hc, 1u / tiles, (1u % tiles) * TK);
    for (var n = 0u; n < hc.count; n++) {
        let ch = hc.first + n;
        let t0 = n * CHUNK;
        let dbase = ch * 3u * CHUNK;
        let ut = t0 + ui;
        let last = bitcast<f32>(load_decay(dbase + 2u * CHUNK));
        var gam = 0.0;
        var to_end = 0.0;
        var u0 = 0.0;
        var u1 = 0.0;
        var live = true;
        if unit && ut < d.steps {
            gam = bitcast<f32>(load_decay(dbase + ui));
            to_end = bitcast<f32>(load_decay(dbase + CHUNK + ui));
            let ub = (ch * CHUNK + ui) * d.value_dim + udv;
            if udv < d.value_dim {
                u0 = bitcast<f32>(load_u(ub));
            }
            if udv + 1u < d.value_dim {
                u1 = bitcast<f32>(load_u(ub + 1u));
            }
        }

        // w[i] . s[r] and q[i] . s[r] for the unit's two rows, TK columns at a time.
        var ws0 = 0.0;
        var ws1 = 0.0;
        var qs0 = 0.0;
        var qs1 = 0.0;
        for (var tile = 0u; tile < tiles; tile++) {
            let c0 = tile * TK;
            workgroupBarrier(); // the previous tile (and chunk) is read, s_sh written
            for (var l = 0u; l < LPT; l++) {
                let e = li + l * WG_SIZE;
                if e < CHUNK * TK {
                    let at = (e / TK) * TKP + e % TK;
                    w_tile[at] = w_next[l];
                    q_tile[at] = q_next[l];
                }
            }
            workgroupBarrier();
            w_next = w_after;
            q_next = q_after;
            let g = n * tiles + c0 / TK + 2u;
            let gc = (g % tiles) * TK;
            chunk_state_fetch(&w_after, &q_after, li, hc, g / tiles, gc);
            if unit {
                let wrow = ui * TKP;
                let s0 = ur * SP + c0;
                for (var c = 0u; c < TK; c++) {
                    let wv = w_tile[wrow + c];
                    let qv = q_tile[wrow + c];
                    let sa = s_sh[s0 + c];
                    let sb = s_sh[s0 + SP + c];
                    ws0 += wv * sa;
                    ws1 += wv * sb;
                    qs0 += qv * sa;
                    qs1 += qv * sb;
                }
            }
        }
        // The update's k values, issued now to be in flight through y. Not before the
        // products: 64 registers live through them leave the driver too few for the
        // tile loops it unrolls (docs/PERFORMANCE.md "Loops without naga's counter").
        var k_reg: array<f32, CHUNK>;
{
            let j = 0u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 1u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 2u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 3u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 4u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 5u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 6u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 7u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 8u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 9u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 10u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 11u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 12u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 13u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 14u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 15u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 16u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 17u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 18u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 19u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 20u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 21u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 22u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 23u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 24u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 25u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 26u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 27u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 28u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 29u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 30u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 31u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 32u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 33u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 34u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 35u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 36u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 37u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 38u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 39u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 40u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 41u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 42u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 43u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 44u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 45u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 46u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 47u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 48u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 49u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 50u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 51u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 52u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 53u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 54u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 55u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 56u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 57u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 58u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 59u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 60u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 61u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 62u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        {
            let j = 63u;
            var kv = 0.0;
            if owner && t0 + j < d.steps {
                kv = load1_k(qk_row(d, h.b, t0 + j, h.hk) + col);
            }
            k_reg[j] = kv;
        }
        var d0 = 0.0;
        var d1 = 0.0;
        if unit {
            if ut < d.steps {
                if udv < d.value_dim {
                    d0 = u0 - ws0;
                }
                if udv + 1u < d.value_dim {
                    d1 = u1 - ws1;
                }
            }
            d_sh[ui * ROWS + ur] = d0;
            d_sh[ui * ROWS + ur + 1u] = d1;
            if ur == 0u {
                end_sh[ui] = to_end;
            }
        }
        workgroupBarrier(); // d_sh and end_sh are complete; s_sh is no longer read

        // y and delta of the unit (a bf16 word has one writer).
        if unit && ut < d.steps && udv < d.value_dim {
            var y0 = gam * qs0;
            var y1 = gam * qs1;
            let mrow = (ch * CHUNK + ui) * CHUNK;
{
                let j = 0u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 1u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 2u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 3u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 4u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 5u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 6u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 7u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 8u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 9u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 10u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 11u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 12u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 13u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 14u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 15u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 16u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 17u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 18u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 19u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 20u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 21u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 22u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 23u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 24u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 25u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 26u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 27u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 28u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 29u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 30u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 31u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 32u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 33u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 34u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 35u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 36u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 37u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 38u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 39u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 40u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 41u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 42u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 43u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 44u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 45u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 46u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 47u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 48u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 49u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 50u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 51u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 52u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 53u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 54u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 55u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 56u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 57u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 58u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 59u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 60u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 61u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 62u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            {
                let j = 63u;
                // m[i][j] is 0 above the diagonal; the select keeps delta of a later
                // step out even where it is not finite.
                let mij = bitcast<f32>(load_m(mrow + j));
                y0 += select(0.0, mij * d_sh[j * ROWS + ur], j <= ui);
                y1 += select(0.0, mij * d_sh[j * ROWS + ur + 1u], j <= ui);
            }
            if !live {
                y0 = 0.0;
                y1 = 0.0;
            }
            let at = v_index(d, h.b, ut, h.hv, udv);
            if udv + 1u < d.value_dim {
                store2_y(at, y0, y1);
                store2_delta(at, d0, d1);
            } else {
                // The last row of an odd Dv (never bf16: the host refuses it).
                store1_y(at, y0);
                store1_delta(at, d0);
            }
        }

        // The state through the chunk: this invocation's column of every RG-th row. The
        // decays are folded into k once; a zero decay or delta adds nothing, whatever k is.
        if owner {
{
                let j = 0u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 1u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 2u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 3u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 4u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 5u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 6u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 7u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 8u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 9u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 10u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 11u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 12u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 13u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 14u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 15u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 16u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 17u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 18u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 19u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 20u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 21u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 22u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 23u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 24u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 25u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 26u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 27u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 28u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 29u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 30u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 31u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 32u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 33u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 34u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 35u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 36u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 37u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 38u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 39u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 40u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 41u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 42u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 43u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 44u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 45u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 46u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 47u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 48u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 49u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 50u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 51u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 52u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 53u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 54u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 55u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 56u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 57u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 58u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 59u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 60u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 61u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 62u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            {
                let j = 63u;
                let g = end_sh[j];
                k_reg[j] = select(0.0, g * k_reg[j], g != 0.0);
            }
            for (var r = row0; r < ROWS; r += RG) {
                let at = r * SP + col;
                var x = s_sh[at] * last;
{
                    let j = 0u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 1u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 2u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 3u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 4u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 5u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 6u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 7u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 8u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 9u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 10u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 11u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 12u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 13u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 14u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 15u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 16u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 17u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 18u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 19u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 20u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 21u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 22u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 23u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 24u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 25u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 26u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 27u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 28u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 29u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 30u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 31u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 32u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 33u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 34u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 35u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 36u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 37u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 38u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 39u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 40u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 41u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 42u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 43u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 44u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 45u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 46u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 47u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 48u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 49u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 50u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 51u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 52u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 53u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 54u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 55u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 56u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 57u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 58u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 59u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 60u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 61u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 62u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                {
                    let j = 63u;
                    let dj = d_sh[j * ROWS + r];
                    x += select(0.0, dj * k_reg[j], dj != 0.0);
                }
                s_sh[at] = x;
            }
        }
        // The next chunk's first barrier orders these reads of d_sh and end_sh and
        // writes of s_sh before its own writes and reads.
    }

    workgroupBarrier();
    for (var e = li; e < ROWS * DKP / 4u; e += WG_SIZE) {
        let r = e / (DKP / 4u);
        let c = (e % (DKP / 4u)) * 4u;
        let dv = dv0 + r;
        if !hc.skipped && dv < d.value_dim && c < d.key_dim {
            let at = r * SP + c;
            let v = vec4<f32>(s_sh[at], s_sh[at + 1u], s_sh[at + 2u], s_sh[at + 3u]);
            store_state_out(state_row(d, h.b, h.hv, dv), c, d.key_dim, v);
        }
    }
}
