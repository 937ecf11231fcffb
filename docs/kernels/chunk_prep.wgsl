enable f16;

// deltatape kernel chunk_prep.f32.f32.f32.workgroup.l1r1g1t1c64.v4
const HAS_Q: bool = true;
const HAS_K: bool = true;
const HAS_V: bool = true;
const HAS_G: bool = true;
const HAS_BETA: bool = true;
const HAS_MASK: bool = false;
const HAS_U: bool = true;
const HAS_DECAY: bool = true;
const HAS_TILES: bool = true;
const HAS_OFFSETS: bool = false;
const WG_SIZE: u32 = 256u;
const VEC4: bool = true;
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
const ROWS: u32 = 1u;
const GROUPS: u32 = 1u;
const RPT: u32 = 1u;
const CHUNK: u32 = 64u;
const ROW_GROUPS: u32 = 4u;
const QUAD: u32 = 4u;
const ROW_QUADS: u32 = 16u;

@group(0) @binding(1) var<storage, read> q_buf: array<vec4<f32>>;
fn load1_q(i: u32) -> f32 {
    let x = q_buf[i >> 2u][i & 3u];
    return x;
}
alias q_raw1 = f32;
fn raw1_q(i: u32) -> q_raw1 {
    return q_buf[i >> 2u][i & 3u];
}
fn unpack1_q(x: q_raw1, i: u32) -> f32 {
    return x;
}
fn load_q(base: u32, i: u32, n: u32) -> vec4<f32> {
    let x = q_buf[(base + i) >> 2u];
    return select(vec4<f32>(0.0), x, i < n);
}
alias q_raw = vec4<f32>;
fn raw_q(base: u32, i: u32, n: u32) -> q_raw {
    return q_buf[(base + i) >> 2u];
}
fn unpack_q(x: q_raw, i: u32, n: u32) -> vec4<f32> {
    return select(vec4<f32>(0.0), x, i < n);
}

@group(0) @binding(2) var<storage, read> k_buf: array<vec4<f32>>;
fn load1_k(i: u32) -> f32 {
    let x = k_buf[i >> 2u][i & 3u];
    return x;
}
alias k_raw1 = f32;
fn raw1_k(i: u32) -> k_raw1 {
    return k_buf[i >> 2u][i & 3u];
}
fn unpack1_k(x: k_raw1, i: u32) -> f32 {
    return x;
}
fn load_k(base: u32, i: u32, n: u32) -> vec4<f32> {
    let x = k_buf[(base + i) >> 2u];
    return select(vec4<f32>(0.0), x, i < n);
}
alias k_raw = vec4<f32>;
fn raw_k(base: u32, i: u32, n: u32) -> k_raw {
    return k_buf[(base + i) >> 2u];
}
fn unpack_k(x: k_raw, i: u32, n: u32) -> vec4<f32> {
    return select(vec4<f32>(0.0), x, i < n);
}

@group(0) @binding(3) var<storage, read> v_buf: array<f32>;
fn load1_v(i: u32) -> f32 {
    let x = v_buf[i];
    return x;
}
alias v_raw1 = f32;
fn raw1_v(i: u32) -> v_raw1 {
    return v_buf[i];
}
fn unpack1_v(x: v_raw1, i: u32) -> f32 {
    return x;
}

@group(0) @binding(4) var<storage, read> g_buf: array<f32>;
fn load1_g(i: u32) -> f32 {
    let x = g_buf[i];
    return x;
}
alias g_raw1 = f32;
fn raw1_g(i: u32) -> g_raw1 {
    return g_buf[i];
}
fn unpack1_g(x: g_raw1, i: u32) -> f32 {
    return x;
}

@group(0) @binding(5) var<storage, read> beta_buf: array<f32>;
fn load1_beta(i: u32) -> f32 {
    let x = beta_buf[i];
    return x;
}
alias beta_raw1 = f32;
fn raw1_beta(i: u32) -> beta_raw1 {
    return beta_buf[i];
}
fn unpack1_beta(x: beta_raw1, i: u32) -> f32 {
    return x;
}

@group(0) @binding(6) var<storage, read_write> u_buf: array<vec4<u32>>;
fn load_u(i: u32) -> u32 {
    return u_buf[i >> 2u][i & 3u];
}
fn store_u(i: u32, v: u32) {
    u_buf[i >> 2u][i & 3u] = v;
}
fn store4_u(i4: u32, v: vec4<u32>) {
    u_buf[i4] = v;
}

@group(0) @binding(7) var<storage, read_write> decay_buf: array<u32>;
fn load_decay(i: u32) -> u32 {
    return decay_buf[i];
}
fn store_decay(i: u32, v: u32) {
    decay_buf[i] = v;
}

@group(0) @binding(8) var<storage, read_write> tiles_buf: array<vec4<f16>>;
fn load1_tiles(i: u32) -> f32 {
    let x = tiles_buf[i >> 2u][i & 3u];
    return f32(x);
}
alias tiles_raw1 = f16;
fn raw1_tiles(i: u32) -> tiles_raw1 {
    return tiles_buf[i >> 2u][i & 3u];
}
fn unpack1_tiles(x: tiles_raw1, i: u32) -> f32 {
    return f32(x);
}
fn load_tiles(base: u32, i: u32, n: u32) -> vec4<f32> {
    let x = tiles_buf[(base + i) >> 2u];
    return select(vec4<f32>(0.0), vec4<f32>(x), i < n);
}
alias tiles_raw = vec4<f16>;
fn raw_tiles(base: u32, i: u32, n: u32) -> tiles_raw {
    return tiles_buf[(base + i) >> 2u];
}
fn unpack_tiles(x: tiles_raw, i: u32, n: u32) -> vec4<f32> {
    return select(vec4<f32>(0.0), vec4<f32>(x), i < n);
}
fn store_tiles(base: u32, i: u32, n: u32, v: vec4<f32>) {
    if i < n {
        tiles_buf[(base + i) >> 2u] = vec4<f16>(v);
    }
}
fn store1_tiles(i: u32, v: f32) {
    tiles_buf[i >> 2u][i & 3u] = f16(v);
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

// The f16 operands of record_chunked's walk and output pass, as the first pass
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

// Where word w (eight f16) of a block of n tile columns from tile (tr, tc) lies in a
// matrix `cols` wide stored as tiles (an element offset): the block's tiles row by row,
// 32 words each. The passes on vector units copy such blocks into workgroup memory in
// this order, where the block is itself a matrix 16 n wide as tiles: its element
// (r, c) at tile_at(r, c, 16 n).
fn block_word(tr: u32, tc: u32, n: u32, cols: u32, w: u32) -> u32 {
    let tile = (tr + w / (32u * n)) * (cols / 16u) + tc + (w % (32u * n)) / 32u;
    return tile * 256u + (w % 32u) * 8u;
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

// The eight f16 of a 16-byte word of a tile binding declared as vec4<u32> words (the
// passes on vector units), as f32, in order.
fn f16x8(w: vec4<u32>) -> array<vec4<f32>, 2> {
    return array<vec4<f32>, 2>(
        vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)),
        vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)),
    );
}

// The fast path's first passes (chunk_prep.wgsl on vector units, chunk_prep_coop.wgsl on
// matrix units): a chunk's gates, its decays by running products (no ratio anywhere: a
// zero gate stays exact), and Gam's rows. Call in order, a workgroup barrier after each
// of the first two:
//   gates_in       the gates, beta and the live flags of the chunk's steps
//   gate_products  gam, G_end, the eights' suffixes and products
//   decays_out     the decays out (gam[i], G(C-1, j), gam[C-1]); gam_row4 from here on

var<workgroup> gate_sh: array<f32, CHUNK>;
var<workgroup> beta_sh: array<f32, CHUNK>;
// gam[i] = g[0] ... g[i]; G(C-1, j) = g[j+1] ... g[C-1].
var<workgroup> gam_sh: array<f32, CHUNK>;
var<workgroup> end_sh: array<f32, CHUNK>;
// 1 at a live step, 0 at a masked one and past T (f16: the first pass's memory is tight).
var<workgroup> live_sh: array<f16, CHUNK>;
// g[j+1] ... g[8 (j / 8) + 7] (1 at an eight's last step), and each eight's whole product.
var<workgroup> suf_sh: array<f32, CHUNK>;
var<workgroup> eight_sh: array<f32, CHUNK / 8u>;

// A masked step, and a step past T, is g = 1, beta = 0 (its k, q and v are zeroed where
// the passes stage them).
fn gates_in(li: u32, d: GdnDims, h: Head, t0: u32) {
    if li < CHUNK {
        let t = t0 + li;
        var live = t < d.steps;
        var gv = 1.0;
        var bv = 0.0;
        if live {
            let gi = gate_index(d, h.b, t, h.hv);
            gv = load1_g(gi);
            bv = load1_beta(gi);
        }
        gate_sh[li] = gv;
        beta_sh[li] = bv;
        live_sh[li] = select(0.0h, 1.0h, live);
    }
}

// The running products in order (gam and G_end unrolled over the whole chunk, so that
// loads the caller has in flight need not wait for them).
fn gate_products(li: u32) {
    if li < CHUNK {
        var r = 1.0;
        {
            let l = 0u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 1u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 2u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 3u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 4u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 5u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 6u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 7u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 8u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 9u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 10u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 11u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 12u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 13u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 14u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 15u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 16u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 17u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 18u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 19u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 20u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 21u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 22u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 23u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 24u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 25u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 26u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 27u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 28u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 29u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 30u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 31u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 32u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 33u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 34u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 35u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 36u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 37u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 38u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 39u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 40u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 41u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 42u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 43u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 44u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 45u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 46u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 47u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 48u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 49u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 50u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 51u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 52u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 53u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 54u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 55u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 56u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 57u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 58u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 59u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 60u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 61u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 62u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        {
            let l = 63u;
            r = select(r, r * gate_sh[l], l <= li);
        }
        gam_sh[li] = r;
    } else if li < 2u * CHUNK {
        let j = li - CHUNK;
        var r = 1.0;
        {
            let l = 0u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 1u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 2u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 3u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 4u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 5u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 6u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 7u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 8u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 9u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 10u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 11u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 12u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 13u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 14u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 15u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 16u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 17u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 18u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 19u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 20u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 21u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 22u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 23u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 24u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 25u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 26u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 27u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 28u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 29u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 30u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 31u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 32u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 33u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 34u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 35u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 36u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 37u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 38u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 39u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 40u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 41u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 42u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 43u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 44u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 45u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 46u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 47u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 48u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 49u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 50u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 51u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 52u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 53u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 54u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 55u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 56u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 57u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 58u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 59u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 60u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 61u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 62u;
            r = select(r, r * gate_sh[l], l > j);
        }
        {
            let l = 63u;
            r = select(r, r * gate_sh[l], l > j);
        }
        end_sh[j] = r;
    } else if li < 3u * CHUNK {
        let j = li - 2u * CHUNK;
        var r = 1.0;
        for (var l = j + 1u; l < (j / 8u + 1u) * 8u; l++) {
            r *= gate_sh[l];
        }
        suf_sh[j] = r;
    } else if li < 3u * CHUNK + CHUNK / 8u {
        let b = li - 3u * CHUNK;
        var r = 1.0;
        for (var l = 8u * b; l < 8u * b + 8u; l++) {
            r *= gate_sh[l];
        }
        eight_sh[b] = r;
    }
}

// The decays of scratch block `ch`, `[3C]` f32 bits.
fn decays_out(li: u32, ch: u32, in_grid: bool) {
    let dbase = ch * 3u * CHUNK;
    if in_grid && li < CHUNK {
        store_decay(dbase + li, bitcast<u32>(gam_sh[li]));
        store_decay(dbase + CHUNK + li, bitcast<u32>(end_sh[li]));
        if li == CHUNK - 1u {
            store_decay(dbase + 2u * CHUNK, bitcast<u32>(gam_sh[li]));
        }
    }
}

// Columns j .. j + 3, to compare with a row's index.
fn cols4(j: u32) -> vec4<u32> {
    return vec4(j, j + 1u, j + 2u, j + 3u);
}

// Gam[i][j + x] = g[j+x+1] ... g[i] for x = 0..3 (0 where j + x > i), j a multiple of 4:
// the product of the gates over (top, i] for the row's highest column top = min(j + 3,
// i) from top's suffix in its eight steps, the whole eights after it and i's prefix in
// its own (or the gates themselves within one eight), then running products backwards
// along the row.
fn gam_row4(i: u32, j: u32) -> vec4<f32> {
    var out = vec4(0.0);
    if j > i {
        return out;
    }
    let top = min(j + 3u, i);
    var r = 1.0;
    var first = top + 1u;
    if top / 8u < i / 8u {
        r = suf_sh[top];
        for (var b = top / 8u + 1u; b < i / 8u; b++) {
            r *= eight_sh[b];
        }
        first = (i / 8u) * 8u;
    }
    for (var l = first; l < i + 1u; l++) {
        r *= gate_sh[l];
    }
    for (var y = 0u; y < 4u; y++) {
        let x = 3u - y;
        if j + x <= i {
            out[x] = r;
            r *= gate_sh[j + x];
        }
    }
    return out;
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

// record_chunked's first pass on vector units (the fast path's where no adapter has
// cooperative matrices; chunk_prep_coop.wgsl is the same pass on matrix units): one
// workgroup of 256 invocations per (b, hv, chunk of CHUNK = 64 steps), independent of
// every other, all in f32 but the stored tiles. It writes what the walk and the output
// pass read (cpu_fast.rs is its twin):
//   tiles   W, gam Q, (G_end K)^T and M = Gam o (Q K^T), as the f16 16 x 16 tiles of
//           chunk_tiles.wgsl
//   u       U, f32                                                   [C][Dv]
//   decay   gam[i], G(C-1, j), gam[C-1]                              [3C]
// W and U solve one unit lower triangular system, the gated one, for C x (TILE_DK + Dv)
// right-hand sides:
//   (I + L) [W | U] = [diag(beta gam) K | diag(beta) V],   L = tril(diag(beta) (Gam o K K^T), -1)
// which is the decay-free form's W = diag(gam) A0 diag(beta) K and U = (Gam o A0)
// diag(beta) V (cpu_fast.rs has the identity: (I + L)^-1 = Gam o A0), with Gam by
// running products (no ratio: a zero gate stays exact). No inverse is formed: each
// invocation owns one column of the right-hand sides and substitutes down it in
// registers, reading L's rows from workgroup memory as broadcasts (every invocation
// reads the same word). Phases, barriers between:
//   1. the gates (wgsl/chunk_gates.wgsl)
//   2. K K^T and Q K^T over blocks of KB key columns staged in f32 (the next block's
//      loads in flight through each block's products); an invocation makes the
//      elements (ri + 16 m, cj + 16 n), n <= m, of both: 10 of 16, the rest above the
//      diagonal. gam Q's and (G_end K)^T's tiles on the way.
//   3. beta K K^T's strict lower triangle into l_sh's 4 x 4 blocks; Q K^T's lower one
//      staged. Each invocation's column of the right-hand sides is loaded meanwhile.
//   4. M out, four columns a store, Gam along the rows; L = Gam o (beta K K^T) in place
//   5. each invocation's column solved, a row quad at a time; U's and W's rows stored
//      as they are finished (W's an f16 at a time into its tiles).
// A past the grid's end (a folded grid) redoes the last workgroup and writes nothing.

// The Gram products' blocks: KB key columns, rows of SQ vec4s (one past the block's,
// so that the rows a quarter of a subgroup reads fall in different banks).
const KB: u32 = 16u;
const KBLOCKS: u32 = TILE_DK / KB;
const SQ: u32 = KB / 4u + 1u;
// `a_sh` in two lives:
//   phase 2       k's and q's staged blocks, [C][SQ] each, q's from QS
//   phases 3-4    Q K^T's lower triangle, row i at i (i + 1) / 2 (f32 elements)
const QS: u32 = CHUNK * SQ;
var<workgroup> a_sh: array<vec4<f32>, 2u * QS>;
// L's lower triangle as 4 x 4 blocks (ib, jb), jb <= ib, from l_at(ib, jb): four vec4s,
// row 4 ib + y's columns 4 jb .. 4 jb + 3. The diagonal blocks hold 0 on and above
// the diagonal (from phase 4 on).
var<workgroup> l_sh: array<vec4<f32>, 2u * ROW_QUADS * (ROW_QUADS + 1u)>;

fn l_at(ib: u32, jb: u32) -> u32 {
    return (ib * (ib + 1u) / 2u + jb) * 4u;
}

// The f32 element `at` of `a_sh`.
fn a_get(at: u32) -> f32 {
    return a_sh[at / 4u][at % 4u];
}

fn a_set(at: u32, x: f32) {
    a_sh[at / 4u][at % 4u] = x;
}

fn f16_range4(v: vec4<f32>) -> vec4<f32> {
    return vec4(to_f16_range(v.x), to_f16_range(v.y), to_f16_range(v.z), to_f16_range(v.w));
}

// Four consecutive values of a tile's row from `at` (a multiple of 4), rounded to f16
// within its range.
fn store_tile4(at: u32, v: vec4<f32>) {
    store_tiles(at, 0u, 4u, f16_range4(v));
}

// Step t's q (`is_q`) or k at four key columns from c, 0 past T and past Dk (the live
// flag zeroes a masked step where it is staged).
fn qk_quad(d: GdnDims, h: Head, t: u32, c: u32, is_q: bool) -> vec4<f32> {
    if t >= d.steps {
        return vec4(0.0);
    }
    let row = qk_row(d, h.b, t, h.hk);
    if is_q {
        return load_q(row, c, d.key_dim);
    }
    return load_k(row, c, d.key_dim);
}

// Where row i of column `q` of the right-hand sides' inputs is: column q of [K | V] (K
// padded to TILE_DK columns), the row and column clamped into the tensors (`rhs_scale`
// zeroes what lies past them).
fn rhs_index(d: GdnDims, h: Head, t0: u32, q: u32, i: u32) -> u32 {
    let t = min(t0 + i, d.steps - 1u);
    if q < TILE_DK {
        return qk_row(d, h.b, t, h.hk) + min(q, d.key_dim - 1u);
    }
    return v_index(d, h.b, t, h.hv, min(q - TILE_DK, d.value_dim - 1u));
}

// Row quad `ib` of column `q`'s inputs as stored (k's and v's dtype is the activations'),
// left packed until `rhs_scale` uses them, so that the loads stay in flight meanwhile.
fn rhs_quad(d: GdnDims, h: Head, t0: u32, q: u32, ib: u32) -> vec4<k_raw1> {
    var x: vec4<k_raw1>;
    if ib >= ROW_QUADS {
        return x;
    }
    for (var y = 0u; y < 4u; y++) {
        let i = rhs_index(d, h, t0, q, 4u * ib + y);
        if q < TILE_DK {
            x[y] = raw1_k(i);
        } else {
            x[y] = raw1_v(i);
        }
    }
    return x;
}

// Column `q`'s right-hand side at row quad `ib` from its stored inputs `w`: beta gam k
// (W's columns) or beta v (U's); 0 at a dead step and past Dk or Dv.
fn rhs_scale(d: GdnDims, h: Head, t0: u32, w: vec4<k_raw1>, q: u32, ib: u32) -> vec4<f32> {
    var r = vec4(0.0);
    let is_k = q < TILE_DK;
    let on = select(q - TILE_DK < d.value_dim, q < d.key_dim, is_k);
    for (var y = 0u; y < 4u; y++) {
        let i = 4u * ib + y;
        let at = rhs_index(d, h, t0, q, i);
        let x = select(unpack1_v(w[y], at), unpack1_k(w[y], at), is_k);
        let s = select(1.0, gam_sh[i], is_k) * beta_sh[i];
        r[y] = select(0.0, x * s, on && live_sh[i] != 0.0h);
    }
    return r;
}

fn kernel_main(li: u32, wg_in: u32, unused: u32) {
    // No early return: every invocation reaches every barrier.
    let in_grid = wg_in < params.workgroups;
    let chunk = chunk_at(min(wg_in, params.workgroups - 1u), li); // wgsl/chunk_at.wgsl
    let d = chunk.d;
    let h = chunk.h;
    let ch = chunk.ch;
    let t0 = chunk.n * CHUNK;
    let tiles = ch * TILES_PER_CHUNK;

    // 1. The gates, the first block's loads in flight meanwhile: invocation li stages
    // quad li % 4 of step li / 4's k and q.
    gates_in(li, d, h, t0);
    let srow = li / 4u;
    let sq = li % 4u;
    var kx = qk_quad(d, h, t0 + srow, 4u * sq, false);
    var qx = qk_quad(d, h, t0 + srow, 4u * sq, true);
    workgroupBarrier();
    gate_products(li);
    workgroupBarrier();
    decays_out(li, ch, in_grid);

    // 2. The Gram products. A quarter of a subgroup reads eight rows ri (one vec4
    // each, in different banks) and four rows cj (broadcast).
    let ri = li % 8u + 8u * ((li / 32u) % 2u);
    let cj = (li / 8u) % 4u + 4u * (li / 64u);
    var kk: array<array<f32, ROW_GROUPS>, ROW_GROUPS>;
    var qk: array<array<f32, ROW_GROUPS>, ROW_GROUPS>;
    for (var blk = 0u; blk < KBLOCKS; blk++) {
        let c0 = blk * KB;
        let live = live_sh[srow] != 0.0h;
        a_sh[srow * SQ + sq] = select(vec4(0.0), kx, live);
        a_sh[QS + srow * SQ + sq] = select(vec4(0.0), qx, live);
        workgroupBarrier(); // the block is staged
        if blk + 1u < KBLOCKS {
            kx = qk_quad(d, h, t0 + srow, c0 + KB + 4u * sq, false);
            qx = qk_quad(d, h, t0 + srow, c0 + KB + 4u * sq, true);
        }
        for (var x = 0u; x < QUAD; x++) {
            var kr: array<vec4<f32>, ROW_GROUPS>;
            var qr: array<vec4<f32>, ROW_GROUPS>;
            var kc: array<vec4<f32>, ROW_GROUPS>;
            {
                let m = 0u;
                kr[m] = a_sh[(ri + 16u * m) * SQ + x];
                qr[m] = a_sh[QS + (ri + 16u * m) * SQ + x];
                kc[m] = a_sh[(cj + 16u * m) * SQ + x];
            }
            {
                let m = 1u;
                kr[m] = a_sh[(ri + 16u * m) * SQ + x];
                qr[m] = a_sh[QS + (ri + 16u * m) * SQ + x];
                kc[m] = a_sh[(cj + 16u * m) * SQ + x];
            }
            {
                let m = 2u;
                kr[m] = a_sh[(ri + 16u * m) * SQ + x];
                qr[m] = a_sh[QS + (ri + 16u * m) * SQ + x];
                kc[m] = a_sh[(cj + 16u * m) * SQ + x];
            }
            {
                let m = 3u;
                kr[m] = a_sh[(ri + 16u * m) * SQ + x];
                qr[m] = a_sh[QS + (ri + 16u * m) * SQ + x];
                kc[m] = a_sh[(cj + 16u * m) * SQ + x];
            }
            {
                let m = 0u;
                {
                    let n = 0u;
                    if n <= m {
                        kk[m][n] += dot(kr[m], kc[n]);
                        qk[m][n] += dot(qr[m], kc[n]);
                    }
                }
                {
                    let n = 1u;
                    if n <= m {
                        kk[m][n] += dot(kr[m], kc[n]);
                        qk[m][n] += dot(qr[m], kc[n]);
                    }
                }
                {
                    let n = 2u;
                    if n <= m {
                        kk[m][n] += dot(kr[m], kc[n]);
                        qk[m][n] += dot(qr[m], kc[n]);
                    }
                }
                {
                    let n = 3u;
                    if n <= m {
                        kk[m][n] += dot(kr[m], kc[n]);
                        qk[m][n] += dot(qr[m], kc[n]);
                    }
                }
            }
            {
                let m = 1u;
                {
                    let n = 0u;
                    if n <= m {
                        kk[m][n] += dot(kr[m], kc[n]);
                        qk[m][n] += dot(qr[m], kc[n]);
                    }
                }
                {
                    let n = 1u;
                    if n <= m {
                        kk[m][n] += dot(kr[m], kc[n]);
                        qk[m][n] += dot(qr[m], kc[n]);
                    }
                }
                {
                    let n = 2u;
                    if n <= m {
                        kk[m][n] += dot(kr[m], kc[n]);
                        qk[m][n] += dot(qr[m], kc[n]);
                    }
                }
                {
                    let n = 3u;
                    if n <= m {
                        kk[m][n] += dot(kr[m], kc[n]);
                        qk[m][n] += dot(qr[m], kc[n]);
                    }
                }
            }
            {
                let m = 2u;
                {
                    let n = 0u;
                    if n <= m {
                        kk[m][n] += dot(kr[m], kc[n]);
                        qk[m][n] += dot(qr[m], kc[n]);
                    }
                }
                {
                    let n = 1u;
                    if n <= m {
                        kk[m][n] += dot(kr[m], kc[n]);
                        qk[m][n] += dot(qr[m], kc[n]);
                    }
                }
                {
                    let n = 2u;
                    if n <= m {
                        kk[m][n] += dot(kr[m], kc[n]);
                        qk[m][n] += dot(qr[m], kc[n]);
                    }
                }
                {
                    let n = 3u;
                    if n <= m {
                        kk[m][n] += dot(kr[m], kc[n]);
                        qk[m][n] += dot(qr[m], kc[n]);
                    }
                }
            }
            {
                let m = 3u;
                {
                    let n = 0u;
                    if n <= m {
                        kk[m][n] += dot(kr[m], kc[n]);
                        qk[m][n] += dot(qr[m], kc[n]);
                    }
                }
                {
                    let n = 1u;
                    if n <= m {
                        kk[m][n] += dot(kr[m], kc[n]);
                        qk[m][n] += dot(qr[m], kc[n]);
                    }
                }
                {
                    let n = 2u;
                    if n <= m {
                        kk[m][n] += dot(kr[m], kc[n]);
                        qk[m][n] += dot(qr[m], kc[n]);
                    }
                }
                {
                    let n = 3u;
                    if n <= m {
                        kk[m][n] += dot(kr[m], kc[n]);
                        qk[m][n] += dot(qr[m], kc[n]);
                    }
                }
            }
        }
        // gam Q's tiles of the block (step srow, quad sq) and (G_end K)^T's (key column
        // c0 + li % 16, steps 4 (li / 16) ..; a zero decay adds nothing, whatever k is).
        let qv = a_sh[QS + srow * SQ + sq];
        let kc = li % 16u;
        let j = 4u * (li / 16u);
        var kt = vec4(0.0);
        for (var y = 0u; y < 4u; y++) {
            let e = end_sh[j + y];
            kt[y] = select(0.0, e * a_get(4u * ((j + y) * SQ) + kc), e != 0.0);
        }
        if in_grid {
            store_tile4(tiles + QG_AT + tile_at(srow, c0 + 4u * sq, TILE_DK), gam_sh[srow] * qv);
            store_tile4(tiles + KT_AT + tile_at(c0 + kc, j, CHUNK), kt);
        }
        workgroupBarrier(); // the block is read
    }

    // The first two row quads of the first column's right-hand side, in flight through
    // phases 3 and 4.
    var next = array<vec4<k_raw1>, 2>(rhs_quad(d, h, t0, li, 0u), rhs_quad(d, h, t0, li, 1u));

    // 3. beta K K^T's strict lower triangle (0 at dead steps: their k and beta are) and
    // Q K^T's lower one.
    {
        let m = 0u;
        {
            let n = 0u;
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_sh[l_at(i / 4u, j / 4u) + i % 4u][j % 4u] = beta_sh[i] * kk[m][n];
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
        {
            let n = 1u;
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_sh[l_at(i / 4u, j / 4u) + i % 4u][j % 4u] = beta_sh[i] * kk[m][n];
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
        {
            let n = 2u;
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_sh[l_at(i / 4u, j / 4u) + i % 4u][j % 4u] = beta_sh[i] * kk[m][n];
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
        {
            let n = 3u;
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_sh[l_at(i / 4u, j / 4u) + i % 4u][j % 4u] = beta_sh[i] * kk[m][n];
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
    }
    {
        let m = 1u;
        {
            let n = 0u;
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_sh[l_at(i / 4u, j / 4u) + i % 4u][j % 4u] = beta_sh[i] * kk[m][n];
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
        {
            let n = 1u;
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_sh[l_at(i / 4u, j / 4u) + i % 4u][j % 4u] = beta_sh[i] * kk[m][n];
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
        {
            let n = 2u;
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_sh[l_at(i / 4u, j / 4u) + i % 4u][j % 4u] = beta_sh[i] * kk[m][n];
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
        {
            let n = 3u;
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_sh[l_at(i / 4u, j / 4u) + i % 4u][j % 4u] = beta_sh[i] * kk[m][n];
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
    }
    {
        let m = 2u;
        {
            let n = 0u;
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_sh[l_at(i / 4u, j / 4u) + i % 4u][j % 4u] = beta_sh[i] * kk[m][n];
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
        {
            let n = 1u;
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_sh[l_at(i / 4u, j / 4u) + i % 4u][j % 4u] = beta_sh[i] * kk[m][n];
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
        {
            let n = 2u;
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_sh[l_at(i / 4u, j / 4u) + i % 4u][j % 4u] = beta_sh[i] * kk[m][n];
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
        {
            let n = 3u;
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_sh[l_at(i / 4u, j / 4u) + i % 4u][j % 4u] = beta_sh[i] * kk[m][n];
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
    }
    {
        let m = 3u;
        {
            let n = 0u;
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_sh[l_at(i / 4u, j / 4u) + i % 4u][j % 4u] = beta_sh[i] * kk[m][n];
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
        {
            let n = 1u;
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_sh[l_at(i / 4u, j / 4u) + i % 4u][j % 4u] = beta_sh[i] * kk[m][n];
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
        {
            let n = 2u;
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_sh[l_at(i / 4u, j / 4u) + i % 4u][j % 4u] = beta_sh[i] * kk[m][n];
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
        {
            let n = 3u;
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_sh[l_at(i / 4u, j / 4u) + i % 4u][j % 4u] = beta_sh[i] * kk[m][n];
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
    }
    workgroupBarrier();

    // 4. M = Gam o (Q K^T), zeros above the diagonal, four columns an invocation, and
    // L = Gam o (beta K K^T) in place by the same rows of Gam.
    for (var p = 0u; p < CHUNK * CHUNK / (4u * WG_SIZE); p++) {
        let e = li + p * WG_SIZE;
        let i = e / (CHUNK / 4u);
        let j = 4u * (e % (CHUNK / 4u));
        var x = vec4(0.0);
        for (var y = 0u; y < 4u; y++) {
            if j + y <= i {
                x[y] = a_get(i * (i + 1u) / 2u + j + y);
            }
        }
        let gam = gam_row4(i, j);
        if in_grid {
            store_tile4(tiles + M_AT + tile_at(i, j, CHUNK), gam * x);
        }
        if j / 4u <= i / 4u {
            let at = l_at(i / 4u, j / 4u) + i % 4u;
            l_sh[at] = select(vec4(0.0), gam * l_sh[at], cols4(j) < vec4(i));
        }
    }
    workgroupBarrier(); // L is whole

    // 5. [W | U], a column an invocation, WG_SIZE columns a pass (W's TILE_DK first),
    // by forward substitution a row quad at a time: the finished quads above it through
    // L's off-diagonal blocks (four dot products a block), then its own diagonal block.
    // The finished quads stay in registers (every index a constant: the quad is placed
    // by a branch on each), the right-hand side's loads two quads ahead; every
    // invocation reads the same L words. U's and W's rows go out as they are finished:
    // W's an f16 a store straight into its tiles, a row's neighbouring columns from
    // neighbouring invocations (no staging, so no barrier in the solve).
    for (var p = 0u; p < strides(0u, TILE_DK + d.value_dim, WG_SIZE); p++) {
        let q = p * WG_SIZE + li;
        let c = q - TILE_DK;
        let u_col = q >= TILE_DK && c < d.value_dim && in_grid;
        if p > 0u {
            next = array<vec4<k_raw1>, 2>(rhs_quad(d, h, t0, q, 0u), rhs_quad(d, h, t0, q, 1u));
        }
        var x: array<vec4<f32>, ROW_QUADS>;
        for (var ib = 0u; ib < ROW_QUADS; ib++) {
            var xb = rhs_scale(d, h, t0, next[0], q, ib);
            next[0] = next[1];
            next[1] = rhs_quad(d, h, t0, q, ib + 2u);
            var acc = vec4(0.0);
            {
                let jb = 0u;
                if jb < ib {
                    let at = l_at(ib, jb);
                    let xj = x[jb];
                    acc += vec4(dot(l_sh[at], xj), dot(l_sh[at + 1u], xj), dot(l_sh[at + 2u], xj), dot(l_sh[at + 3u], xj));
                }
            }
            {
                let jb = 1u;
                if jb < ib {
                    let at = l_at(ib, jb);
                    let xj = x[jb];
                    acc += vec4(dot(l_sh[at], xj), dot(l_sh[at + 1u], xj), dot(l_sh[at + 2u], xj), dot(l_sh[at + 3u], xj));
                }
            }
            {
                let jb = 2u;
                if jb < ib {
                    let at = l_at(ib, jb);
                    let xj = x[jb];
                    acc += vec4(dot(l_sh[at], xj), dot(l_sh[at + 1u], xj), dot(l_sh[at + 2u], xj), dot(l_sh[at + 3u], xj));
                }
            }
            {
                let jb = 3u;
                if jb < ib {
                    let at = l_at(ib, jb);
                    let xj = x[jb];
                    acc += vec4(dot(l_sh[at], xj), dot(l_sh[at + 1u], xj), dot(l_sh[at + 2u], xj), dot(l_sh[at + 3u], xj));
                }
            }
            {
                let jb = 4u;
                if jb < ib {
                    let at = l_at(ib, jb);
                    let xj = x[jb];
                    acc += vec4(dot(l_sh[at], xj), dot(l_sh[at + 1u], xj), dot(l_sh[at + 2u], xj), dot(l_sh[at + 3u], xj));
                }
            }
            {
                let jb = 5u;
                if jb < ib {
                    let at = l_at(ib, jb);
                    let xj = x[jb];
                    acc += vec4(dot(l_sh[at], xj), dot(l_sh[at + 1u], xj), dot(l_sh[at + 2u], xj), dot(l_sh[at + 3u], xj));
                }
            }
            {
                let jb = 6u;
                if jb < ib {
                    let at = l_at(ib, jb);
                    let xj = x[jb];
                    acc += vec4(dot(l_sh[at], xj), dot(l_sh[at + 1u], xj), dot(l_sh[at + 2u], xj), dot(l_sh[at + 3u], xj));
                }
            }
            {
                let jb = 7u;
                if jb < ib {
                    let at = l_at(ib, jb);
                    let xj = x[jb];
                    acc += vec4(dot(l_sh[at], xj), dot(l_sh[at + 1u], xj), dot(l_sh[at + 2u], xj), dot(l_sh[at + 3u], xj));
                }
            }
            {
                let jb = 8u;
                if jb < ib {
                    let at = l_at(ib, jb);
                    let xj = x[jb];
                    acc += vec4(dot(l_sh[at], xj), dot(l_sh[at + 1u], xj), dot(l_sh[at + 2u], xj), dot(l_sh[at + 3u], xj));
                }
            }
            {
                let jb = 9u;
                if jb < ib {
                    let at = l_at(ib, jb);
                    let xj = x[jb];
                    acc += vec4(dot(l_sh[at], xj), dot(l_sh[at + 1u], xj), dot(l_sh[at + 2u], xj), dot(l_sh[at + 3u], xj));
                }
            }
            {
                let jb = 10u;
                if jb < ib {
                    let at = l_at(ib, jb);
                    let xj = x[jb];
                    acc += vec4(dot(l_sh[at], xj), dot(l_sh[at + 1u], xj), dot(l_sh[at + 2u], xj), dot(l_sh[at + 3u], xj));
                }
            }
            {
                let jb = 11u;
                if jb < ib {
                    let at = l_at(ib, jb);
                    let xj = x[jb];
                    acc += vec4(dot(l_sh[at], xj), dot(l_sh[at + 1u], xj), dot(l_sh[at + 2u], xj), dot(l_sh[at + 3u], xj));
                }
            }
            {
                let jb = 12u;
                if jb < ib {
                    let at = l_at(ib, jb);
                    let xj = x[jb];
                    acc += vec4(dot(l_sh[at], xj), dot(l_sh[at + 1u], xj), dot(l_sh[at + 2u], xj), dot(l_sh[at + 3u], xj));
                }
            }
            {
                let jb = 13u;
                if jb < ib {
                    let at = l_at(ib, jb);
                    let xj = x[jb];
                    acc += vec4(dot(l_sh[at], xj), dot(l_sh[at + 1u], xj), dot(l_sh[at + 2u], xj), dot(l_sh[at + 3u], xj));
                }
            }
            {
                let jb = 14u;
                if jb < ib {
                    let at = l_at(ib, jb);
                    let xj = x[jb];
                    acc += vec4(dot(l_sh[at], xj), dot(l_sh[at + 1u], xj), dot(l_sh[at + 2u], xj), dot(l_sh[at + 3u], xj));
                }
            }
            {
                let jb = 15u;
                if jb < ib {
                    let at = l_at(ib, jb);
                    let xj = x[jb];
                    acc += vec4(dot(l_sh[at], xj), dot(l_sh[at + 1u], xj), dot(l_sh[at + 2u], xj), dot(l_sh[at + 3u], xj));
                }
            }
            let at = l_at(ib, ib);
            xb -= acc;
            xb.y -= l_sh[at + 1u].x * xb.x;
            xb.z -= dot(l_sh[at + 2u].xy, xb.xy);
            xb.w -= dot(l_sh[at + 3u].xyz, xb.xyz);
            {
                let k = 0u;
                if k == ib {
                    x[k] = xb;
                }
            }
            {
                let k = 1u;
                if k == ib {
                    x[k] = xb;
                }
            }
            {
                let k = 2u;
                if k == ib {
                    x[k] = xb;
                }
            }
            {
                let k = 3u;
                if k == ib {
                    x[k] = xb;
                }
            }
            {
                let k = 4u;
                if k == ib {
                    x[k] = xb;
                }
            }
            {
                let k = 5u;
                if k == ib {
                    x[k] = xb;
                }
            }
            {
                let k = 6u;
                if k == ib {
                    x[k] = xb;
                }
            }
            {
                let k = 7u;
                if k == ib {
                    x[k] = xb;
                }
            }
            {
                let k = 8u;
                if k == ib {
                    x[k] = xb;
                }
            }
            {
                let k = 9u;
                if k == ib {
                    x[k] = xb;
                }
            }
            {
                let k = 10u;
                if k == ib {
                    x[k] = xb;
                }
            }
            {
                let k = 11u;
                if k == ib {
                    x[k] = xb;
                }
            }
            {
                let k = 12u;
                if k == ib {
                    x[k] = xb;
                }
            }
            {
                let k = 13u;
                if k == ib {
                    x[k] = xb;
                }
            }
            {
                let k = 14u;
                if k == ib {
                    x[k] = xb;
                }
            }
            {
                let k = 15u;
                if k == ib {
                    x[k] = xb;
                }
            }
            if u_col {
                for (var y = 0u; y < 4u; y++) {
                    store_u((ch * CHUNK + 4u * ib + y) * d.value_dim + c, bitcast<u32>(xb[y]));
                }
            }
            // W's rows straight from registers, an f16 a store (no staging, no barrier).
            if p == 0u && q < TILE_DK && in_grid {
                for (var y = 0u; y < 4u; y++) {
                    store1_tiles(tiles + W_AT + tile_at(4u * ib + y, q, TILE_DK), to_f16_range(xb[y]));
                }
            }
        }
    }
}
