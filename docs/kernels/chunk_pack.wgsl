enable f16;

// deltatape kernel chunk_pack.f32.f32.f32.workgroup.l1r1g1t1c64
const HAS_Q: bool = true;
const HAS_K: bool = true;
const HAS_MASK: bool = false;
const HAS_W: bool = true;
const HAS_M: bool = true;
const HAS_DECAY: bool = true;
const HAS_TILES: bool = true;
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
const HAS_OFFSETS: bool = false;
const LANES: u32 = 1u;
const ROWS: u32 = 1u;
const GROUPS: u32 = 1u;
const RPT: u32 = 1u;
const CHUNK: u32 = 64u;

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

@group(0) @binding(3) var<storage, read> w_buf: array<u32>;
fn load_w(i: u32) -> u32 {
    return w_buf[i];
}

@group(0) @binding(4) var<storage, read> m_buf: array<u32>;
fn load_m(i: u32) -> u32 {
    return m_buf[i];
}

@group(0) @binding(5) var<storage, read> decay_buf: array<u32>;
fn load_decay(i: u32) -> u32 {
    return decay_buf[i];
}

@group(0) @binding(6) var<storage, read_write> tiles_buf: array<f16>;
fn load1_tiles(i: u32) -> f32 {
    let x = tiles_buf[i];
    return f32(x);
}
fn store1_tiles(i: u32, v: f32) {
    tiles_buf[i] = f16(v);
}
fn store2_tiles(i: u32, a: f32, b: f32) {
    tiles_buf[i] = f16(a);
    tiles_buf[i + 1u] = f16(b);
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

// The f16 operands of record_chunked's walk and output pass, as the pack pass
// writes them: per (b, hv, chunk), four matrices of 16 x 16 tiles, each tile 256
// contiguous values, row-major within the tile (a tile loads with stride 16; rows of a
// wider stride load three times slower on the H200, docs/PERFORMANCE.md). Key columns
// are padded with zeros to TILE_DK.
//   W   [C][TILE_DK]   the first pass's W                       at W_AT
//   QG  [C][TILE_DK]   gam[i] q[i]                              at QG_AT
//   KT  [TILE_DK][C]   G(C-1, j) k[j], transposed               at KT_AT
//   M   [C][C]         the first pass's decayed Q K^T           at M_AT

const TILE_DK: u32 = 128u;
const W_AT: u32 = 0u;
const QG_AT: u32 = CHUNK * TILE_DK;
const KT_AT: u32 = 2u * CHUNK * TILE_DK;
const M_AT: u32 = 3u * CHUNK * TILE_DK;
const TILES_PER_CHUNK: u32 = 3u * CHUNK * TILE_DK + CHUNK * CHUNK;

// Element (r, c) of a matrix `cols` wide stored as 16 x 16 tiles.
fn tile_at(r: u32, c: u32, cols: u32) -> u32 {
    return ((r / 16u) * (cols / 16u) + c / 16u) * 256u + (r % 16u) * 16u + c % 16u;
}

// What the walk hands the output pass, per (b, hv, chunk), as f16 tiles of value
// columns padded with zeros to `padded_value_dim` (a whole number of every block
// width either pass takes, so no tile of theirs is out of range):
//   S^T at the chunk's start  [TILE_DK][pad]   at start_at
//   delta                     [CHUNK][pad]     at delta16_at
fn padded_value_dim(dv: u32) -> u32 {
    return (dv + 63u) / 64u * 64u;
}

fn start_at(ch: u32, pad: u32, r: u32, c: u32) -> u32 {
    return ch * TILE_DK * pad + tile_at(r, c, pad);
}

fn delta16_at(ch: u32, pad: u32, r: u32, c: u32) -> u32 {
    return ch * CHUNK * pad + tile_at(r, c, pad);
}

// x clamped to f16's finite range when it is finite and beyond it, so rounding to f16
// never makes an infinity of a finite value; infinities and NaN pass through.
fn to_f16_range(x: f32) -> f32 {
    let big = abs(x) > 65504.0 && abs(x) <= 0x1.fffffep+127f;
    return select(x, clamp(x, -65504.0, 65504.0), big);
}

// record_chunked's pack pass, between the first pass and the cooperative-matrix state
// pass: one workgroup per (b, hv, chunk), independent of every other. It rounds the
// chunk's operands of the state pass's products to f16, as 16 x 16 tiles
// (`chunk_tiles.wgsl` has the layout): W, gam-scaled Q, G_end-scaled K transposed, and
// M. This is the fast mode's one rounding of those operands. A masked step, and a step
// past T, packs zeros (the first pass's W and M rows are zero there already).

fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let d = params.dims;
    let ch = wg; // (b * Hv + hv) * chunks + n
    let n = ch % params.chunks;
    let h = head_at(d, params.gqa_layout, ch / params.chunks);
    let t0 = n * CHUNK;
    let base = ch * TILES_PER_CHUNK;
    let dbase = ch * 3u * CHUNK;

    // W and gam Q, [C][TILE_DK]: neighbouring invocations read neighbouring columns.
    for (var e = li; e < CHUNK * TILE_DK; e += WG_SIZE) {
        let i = e / TILE_DK;
        let c = e % TILE_DK;
        let t = t0 + i;
        var wv = 0.0;
        var qv = 0.0;
        if c < d.key_dim && t < d.steps && chunk_pack_live(h.b, t) {
            wv = bitcast<f32>(load_w((ch * CHUNK + i) * d.key_dim + c));
            let gam = bitcast<f32>(load_decay(dbase + i));
            qv = gam * load1_q(qk_row(d, h.b, t, h.hk) + c);
        }
        let at = tile_at(i, c, TILE_DK);
        store1_tiles(base + W_AT + at, to_f16_range(wv));
        store1_tiles(base + QG_AT + at, to_f16_range(qv));
    }
    // G_end K transposed, [TILE_DK][C].
    for (var e = li; e < CHUNK * TILE_DK; e += WG_SIZE) {
        let j = e / TILE_DK;
        let c = e % TILE_DK;
        let t = t0 + j;
        var kv = 0.0;
        if c < d.key_dim && t < d.steps && chunk_pack_live(h.b, t) {
            let to_end = bitcast<f32>(load_decay(dbase + CHUNK + j));
            // A zero decay adds nothing, whatever k is.
            kv = select(0.0, to_end * load1_k(qk_row(d, h.b, t, h.hk) + c), to_end != 0.0);
        }
        store1_tiles(base + KT_AT + tile_at(c, j, CHUNK), to_f16_range(kv));
    }
    // M, [C][C].
    for (var e = li; e < CHUNK * CHUNK; e += WG_SIZE) {
        let m = bitcast<f32>(load_m(ch * CHUNK * CHUNK + e));
        store1_tiles(base + M_AT + tile_at(e / CHUNK, e % CHUNK, CHUNK), to_f16_range(m));
    }
}

fn chunk_pack_live(b: u32, t: u32) -> bool {
    return true;
}
