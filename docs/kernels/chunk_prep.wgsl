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
const TILE16: u32 = 16u;

@group(0) @binding(1) var<storage, read> q_buf: array<vec4<f32>>;
fn load1_q(i: u32) -> f32 {
    let x = q_buf[i >> 2u][i & 3u];
    return x;
}
fn load_q(base: u32, i: u32, n: u32) -> vec4<f32> {
    let x = q_buf[(base + i) >> 2u];
    return select(vec4<f32>(0.0), x, i < n);
}

@group(0) @binding(2) var<storage, read> k_buf: array<vec4<f32>>;
fn load1_k(i: u32) -> f32 {
    let x = k_buf[i >> 2u][i & 3u];
    return x;
}
fn load_k(base: u32, i: u32, n: u32) -> vec4<f32> {
    let x = k_buf[(base + i) >> 2u];
    return select(vec4<f32>(0.0), x, i < n);
}

@group(0) @binding(3) var<storage, read> v_buf: array<f32>;
fn load1_v(i: u32) -> f32 {
    let x = v_buf[i];
    return x;
}

@group(0) @binding(4) var<storage, read> g_buf: array<f32>;
fn load1_g(i: u32) -> f32 {
    let x = g_buf[i];
    return x;
}

@group(0) @binding(5) var<storage, read> beta_buf: array<f32>;
fn load1_beta(i: u32) -> f32 {
    let x = beta_buf[i];
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
fn load_tiles(base: u32, i: u32, n: u32) -> vec4<f32> {
    let x = tiles_buf[(base + i) >> 2u];
    return select(vec4<f32>(0.0), vec4<f32>(x), i < n);
}
fn store_tiles(base: u32, i: u32, n: u32, v: vec4<f32>) {
    if i < n {
        tiles_buf[(base + i) >> 2u] = vec4<f16>(v);
    }
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

// v's elements i and i + 1 as f32 (the fast path's first passes stage v in pairs): one
// word where bf16 pairs them (i even), else two loads.
fn load2_v(i: u32) -> vec2<f32> {
    return vec2(load1_v(i), load1_v(i + 1u));
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

// T = (I + L)^-1 for record_chunked's first passes, in workgroup memory: L's strict
// lower triangle (element `at` through l_get / l_set, row i at tri(i)) becomes T's. The
// root provides the triangle and a scratch stage of at least CHUNK * BLOCK f32
// (stage_at / stage_set, [..][BLOCK]); both are free on entry, and the triangle holds
// T on return (after a barrier). CHUNK is 16, 32 or 64.
//   1. T's diagonal blocks (BLOCK x BLOCK), an invocation a column, by forward
//      substitution in registers (unrolled: no per-invocation array indexed
//      dynamically), written in place of L's blocks;
//   2. diagonal blocks merged in pairs, width w = 16 then 32 while 2 w <= CHUNK: for
//      the pair's upper block A and lower block B, [[I + L_AA, 0], [L_BA, I + L_BB]]^-1
//      has T_BA = -T_BB L_BA T_AA: X = L_BA T_AA into the stage, then T_BA in place of
//      L_BA, an invocation a 4 x 4 block of each product.
// Five barriers in all. The solve is a fifth of chunk_prep's time on an H100 though it
// is a few percent of its multiply-adds; docs/PERFORMANCE.md has what was tried.

// The diagonal blocks' side (TILE16: the bound of their unrolled substitution).
const BLOCK: u32 = TILE16;

// Where row i of a strict lower triangle begins.
fn tri(i: u32) -> u32 {
    return i * (i - 1u) / 2u;
}

// Call in workgroup-uniform control flow, after a barrier that completes L.
fn invert_unit_lower(li: u32) {
    // 1. Column `col` of diagonal block b0 / BLOCK: x[r] = -sum_{s<r} L[r][s] x[s] below
    // the diagonal, 1 on it, 0 above.
    let b0 = li % CHUNK - li % BLOCK;
    let col = li % BLOCK;
    var x: array<f32, TILE16>;
    if li < CHUNK {
        {
            let r = 0u;
            var acc = 0.0;
            {
                let s = 0u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            x[r] = select(-acc, select(0.0, 1.0, r == col), r <= col);
        }
        {
            let r = 1u;
            var acc = 0.0;
            {
                let s = 0u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            x[r] = select(-acc, select(0.0, 1.0, r == col), r <= col);
        }
        {
            let r = 2u;
            var acc = 0.0;
            {
                let s = 0u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            x[r] = select(-acc, select(0.0, 1.0, r == col), r <= col);
        }
        {
            let r = 3u;
            var acc = 0.0;
            {
                let s = 0u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            x[r] = select(-acc, select(0.0, 1.0, r == col), r <= col);
        }
        {
            let r = 4u;
            var acc = 0.0;
            {
                let s = 0u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            x[r] = select(-acc, select(0.0, 1.0, r == col), r <= col);
        }
        {
            let r = 5u;
            var acc = 0.0;
            {
                let s = 0u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            x[r] = select(-acc, select(0.0, 1.0, r == col), r <= col);
        }
        {
            let r = 6u;
            var acc = 0.0;
            {
                let s = 0u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            x[r] = select(-acc, select(0.0, 1.0, r == col), r <= col);
        }
        {
            let r = 7u;
            var acc = 0.0;
            {
                let s = 0u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            x[r] = select(-acc, select(0.0, 1.0, r == col), r <= col);
        }
        {
            let r = 8u;
            var acc = 0.0;
            {
                let s = 0u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            x[r] = select(-acc, select(0.0, 1.0, r == col), r <= col);
        }
        {
            let r = 9u;
            var acc = 0.0;
            {
                let s = 0u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            x[r] = select(-acc, select(0.0, 1.0, r == col), r <= col);
        }
        {
            let r = 10u;
            var acc = 0.0;
            {
                let s = 0u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            x[r] = select(-acc, select(0.0, 1.0, r == col), r <= col);
        }
        {
            let r = 11u;
            var acc = 0.0;
            {
                let s = 0u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            x[r] = select(-acc, select(0.0, 1.0, r == col), r <= col);
        }
        {
            let r = 12u;
            var acc = 0.0;
            {
                let s = 0u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            x[r] = select(-acc, select(0.0, 1.0, r == col), r <= col);
        }
        {
            let r = 13u;
            var acc = 0.0;
            {
                let s = 0u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            x[r] = select(-acc, select(0.0, 1.0, r == col), r <= col);
        }
        {
            let r = 14u;
            var acc = 0.0;
            {
                let s = 0u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            x[r] = select(-acc, select(0.0, 1.0, r == col), r <= col);
        }
        {
            let r = 15u;
            var acc = 0.0;
            {
                let s = 0u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += l_get(tri(b0 + r) + b0 + s) * x[s];
                }
            }
            x[r] = select(-acc, select(0.0, 1.0, r == col), r <= col);
        }
    }
    workgroupBarrier(); // L's diagonal blocks are read
    if li < CHUNK {
        {
            let r = 0u;
            if r > col {
                l_set(tri(b0 + r) + b0 + col, x[r]);
            }
        }
        {
            let r = 1u;
            if r > col {
                l_set(tri(b0 + r) + b0 + col, x[r]);
            }
        }
        {
            let r = 2u;
            if r > col {
                l_set(tri(b0 + r) + b0 + col, x[r]);
            }
        }
        {
            let r = 3u;
            if r > col {
                l_set(tri(b0 + r) + b0 + col, x[r]);
            }
        }
        {
            let r = 4u;
            if r > col {
                l_set(tri(b0 + r) + b0 + col, x[r]);
            }
        }
        {
            let r = 5u;
            if r > col {
                l_set(tri(b0 + r) + b0 + col, x[r]);
            }
        }
        {
            let r = 6u;
            if r > col {
                l_set(tri(b0 + r) + b0 + col, x[r]);
            }
        }
        {
            let r = 7u;
            if r > col {
                l_set(tri(b0 + r) + b0 + col, x[r]);
            }
        }
        {
            let r = 8u;
            if r > col {
                l_set(tri(b0 + r) + b0 + col, x[r]);
            }
        }
        {
            let r = 9u;
            if r > col {
                l_set(tri(b0 + r) + b0 + col, x[r]);
            }
        }
        {
            let r = 10u;
            if r > col {
                l_set(tri(b0 + r) + b0 + col, x[r]);
            }
        }
        {
            let r = 11u;
            if r > col {
                l_set(tri(b0 + r) + b0 + col, x[r]);
            }
        }
        {
            let r = 12u;
            if r > col {
                l_set(tri(b0 + r) + b0 + col, x[r]);
            }
        }
        {
            let r = 13u;
            if r > col {
                l_set(tri(b0 + r) + b0 + col, x[r]);
            }
        }
        {
            let r = 14u;
            if r > col {
                l_set(tri(b0 + r) + b0 + col, x[r]);
            }
        }
        {
            let r = 15u;
            if r > col {
                l_set(tri(b0 + r) + b0 + col, x[r]);
            }
        }
    }
    workgroupBarrier(); // T's diagonal blocks are in place

    // 2. The merges.
    if CHUNK >= 32u {
        merge(li, 16u);
    }
    if CHUNK >= 64u {
        merge(li, 32u);
    }
}

// One level of merges: pairs of diagonal blocks of width w, the pair p's A at rows
// and columns 2 w p .., B below it. X (the pair's w x w) is in the stage at
// p w^2 + i w + j, as [..][BLOCK] rows. An invocation makes a 4 x 4 block of each
// product: 8 values loaded a term for 16 multiply-adds (each load of a triangle's
// element costs an address of its own). Ends on a barrier.
fn merge(li: u32, w: u32) {
    let blocks = CHUNK * w / 32u; // 4 x 4 blocks of the CHUNK / (2 w) pairs' X
    let ramp = vec4(0u, 1u, 2u, 3u);
    // X = L_BA T_AA: X[i][j] = sum_{s >= j} L[b + i][a + s] T[a + s][a + j].
    for (var n = 0u; n < strides(li, blocks, WG_SIZE); n++) {
        let q = merge_block(li + n * WG_SIZE, w);
        let cols = q.j + ramp;
        let lrows = tri4(q.b + q.i + ramp) + q.a; // L_BA's rows i .. i + 3, at column a
        var x0 = vec4(0.0); // X[i ..][j], then columns j + 1, j + 2, j + 3
        var x1 = vec4(0.0);
        var x2 = vec4(0.0);
        var x3 = vec4(0.0);
        var ts = tri(q.a + q.j) + q.a; // T_AA's row s, at column a
        for (var s = q.j; s < w; s++) {
            let l = vec4(l_get(lrows.x + s), l_get(lrows.y + s), l_get(lrows.z + s), l_get(lrows.w + s));
            // T[a + s][a + j ..]: below the diagonal from the triangle (where not, an
            // element of row s's own read and not used), 1 on it, 0 above.
            let at = ts + min(cols, vec4(s - 1u));
            let below = vec4(l_get(at.x), l_get(at.y), l_get(at.z), l_get(at.w));
            let t = select(select(vec4(0.0), vec4(1.0), cols == vec4(s)), below, vec4(s) > cols);
            x0 += t.x * l;
            x1 += t.y * l;
            x2 += t.z * l;
            x3 += t.w * l;
            ts += q.a + s;
        }
        x_set4(q, 0u, x0);
        x_set4(q, 1u, x1);
        x_set4(q, 2u, x2);
        x_set4(q, 3u, x3);
    }
    workgroupBarrier(); // X is complete; L_BA is read
    // T_BA = -T_BB X: T[b + i][a + j] = -sum_{s <= i} T[b + i][b + s] X[s][j].
    for (var n = 0u; n < strides(li, blocks, WG_SIZE); n++) {
        let q = merge_block(li + n * WG_SIZE, w);
        let rows = q.i + ramp;
        let trows = tri4(q.b + rows) + q.b; // T_BB's rows i .. i + 3, at column b
        var y0 = vec4(0.0); // T_BA[i ..][j], then columns j + 1, j + 2, j + 3
        var y1 = vec4(0.0);
        var y2 = vec4(0.0);
        var y3 = vec4(0.0);
        for (var s = 0u; s < q.i + 4u; s++) {
            let at = trows + min(vec4(s), rows - vec4(1u));
            let below = vec4(l_get(at.x), l_get(at.y), l_get(at.z), l_get(at.w));
            let t = select(select(vec4(0.0), vec4(1.0), rows == vec4(s)), below, vec4(s) < rows);
            let xs = vec4(x_get(q, s, 0u), x_get(q, s, 1u), x_get(q, s, 2u), x_get(q, s, 3u));
            y0 += xs.x * t;
            y1 += xs.y * t;
            y2 += xs.z * t;
            y3 += xs.w * t;
        }
        let out = tri4(q.b + rows) + q.a + q.j;
        t_ba_set4(out, 0u, y0);
        t_ba_set4(out, 1u, y1);
        t_ba_set4(out, 2u, y2);
        t_ba_set4(out, 3u, y3);
    }
    workgroupBarrier(); // T_BA is in place; X is read
}

// tri of four rows.
fn tri4(i: vec4<u32>) -> vec4<u32> {
    return vec4(tri(i.x), tri(i.y), tri(i.z), tri(i.w));
}

// A 4 x 4 block of a merge's products: rows i .. i + 3 and columns j .. j + 3 of its
// pair's X (and T_BA), the pair's blocks at rows a (A) and b (B).
struct MergeBlock {
    a: u32,
    b: u32,
    i: u32,
    j: u32,
    x0: u32, // where the pair's X begins in the stage
    w: u32,
}

fn merge_block(e: u32, w: u32) -> MergeBlock {
    let per_pair = w * w / 16u;
    let p = e / per_pair;
    let r = e % per_pair;
    let a = 2u * w * p;
    return MergeBlock(a, a + w, 4u * (r / (w / 4u)), 4u * (r % (w / 4u)), p * w * w, w);
}

// X's element (s, q.j + dj) of q's pair (its row s, any of the pair's rows).
fn x_get(q: MergeBlock, s: u32, dj: u32) -> f32 {
    let at = q.x0 + s * q.w + q.j + dj;
    return stage_at(at / BLOCK, at % BLOCK);
}

// X's rows q.i .. q.i + 3 at column q.j + dj.
fn x_set4(q: MergeBlock, dj: u32, v: vec4<f32>) {
    for (var di = 0u; di < 4u; di++) {
        let at = q.x0 + (q.i + di) * q.w + q.j + dj;
        stage_set(at / BLOCK, at % BLOCK, v[di]);
    }
}

// -v into T_BA's rows at `out` (each row's element at column j) plus dj.
fn t_ba_set4(out: vec4<u32>, dj: u32, v: vec4<f32>) {
    for (var di = 0u; di < 4u; di++) {
        l_set(out[di] + dj, -v[di]);
    }
}

// record_chunked's first pass on vector units (the fast path's where no adapter has
// cooperative matrices; chunk_prep_coop.wgsl is the same pass on matrix units): one
// workgroup of 256 invocations per (b, hv, chunk of CHUNK = 64 steps), independent of
// every other, all in f32 but the stored tiles. It writes what the walk and the output
// pass read (cpu_fast.rs is its twin):
//   tiles   W = diag(gam) A0 diag(beta) K, gam Q, (G_end K)^T and M = Gam o (Q K^T),
//           as the f16 16 x 16 tiles of chunk_tiles.wgsl
//   u       U = (Gam o A0) diag(beta) V, f32                         [C][Dv]
//   decay   gam[i], G(C-1, j), gam[C-1]                              [3C]
// with A0 = (I + tril(diag(beta) K K^T, -1))^-1 from k and beta alone and Gam by
// running products (the decay-free solve: cpu_fast.rs has its identity). Phases,
// barriers between:
//   1. the gates (wgsl/chunk_gates.wgsl)
//   2. K K^T and Q K^T over blocks of KB key columns staged in f32 (the next block's
//      loads in flight through each block's products); an invocation makes the
//      elements (ri + 16 m, cj + 16 n), n <= m, of both: 10 of 16, the rest above the
//      diagonal. gam Q's and (G_end K)^T's tiles on the way.
//   3. L = beta K K^T's strict lower triangle into l_sh; Q K^T's lower one staged
//   4. M out, four columns a store, Gam along the rows
//   5. A0 = (I + L)^-1 in l_sh (wgsl/chunk_solve.wgsl)
//   6. A = A0 diag(beta) into `a_sh`'s row blocks (the diagonal beta, zeros above it)
//   7. W = diag(gam) A K: an invocation rows r + 16 m, eight key columns, k staged
//      16 steps at a time over the solve's triangle (the next block's loads in flight
//      through each block's products); then A becomes Gam o A in place and U = A V the
//      same way, 128 value columns a pass.
// A past the grid's end (a folded grid) redoes the last workgroup and writes nothing.

// The Gram products' blocks: KB key columns, rows of SQ vec4s (one past the block's,
// so that the rows a quarter of a subgroup reads fall in different banks).
const KB: u32 = 16u;
const KBLOCKS: u32 = TILE_DK / KB;
const SQ: u32 = KB / 4u + 1u;
// `a_sh` in four lives:
//   phase 2       k's and q's staged blocks, [C][SQ] each, q's from QS
//   phases 3-4    Q K^T's lower triangle, row i at i (i + 1) / 2 (f32 elements)
//   phase 5       the solve's stage, [C][BLOCK] (stage_at)
//   phases 6-7    A's rows: row i of block b = i / 16 holds columns 0 .. 16 (b + 1) - 1,
//                 from a_row(i), a row's vec4s one past a multiple of 4 (in different
//                 banks); 16 x (5 + 9 + 13 + 17) vec4s
const QS: u32 = CHUNK * SQ;
const A_LEN: u32 = 16u * (5u + 9u + 13u + 17u);
var<workgroup> a_sh: array<vec4<f32>, max(2u * QS, A_LEN)>;
// L's, then A0's, strict lower triangle (wgsl/chunk_solve.wgsl's `tri`, f32 elements);
// in phase 7 the staged block of k or v: KV_STEPS steps of TILE_DK columns, a step's
// row contiguous (`kv_at`).
const KV_STEPS: u32 = 16u;
var<workgroup> l_sh: array<vec4<f32>, max((CHUNK * (CHUNK - 1u) / 2u + 3u) / 4u, KV_STEPS * TILE_DK / 4u)>;

fn l_get(at: u32) -> f32 {
    return l_sh[at / 4u][at % 4u];
}

fn l_set(at: u32, x: f32) {
    l_sh[at / 4u][at % 4u] = x;
}

// Where the staged block's step j (of KV_STEPS) has its column octet o (two vec4s).
fn kv_at(j: u32, o: u32) -> u32 {
    return j * (TILE_DK / 4u) + 2u * o;
}

// The f32 element `at` of `a_sh` (its three scalar lives).
fn a_get(at: u32) -> f32 {
    return a_sh[at / 4u][at % 4u];
}

fn a_set(at: u32, x: f32) {
    a_sh[at / 4u][at % 4u] = x;
}

fn stage_at(row: u32, c: u32) -> f32 {
    return a_get(row * BLOCK + c);
}

fn stage_set(row: u32, c: u32, x: f32) {
    a_set(row * BLOCK + c, x);
}

// Where A's row i begins in `a_sh` (vec4s): the blocks above it, then its rows.
fn a_row(i: u32) -> u32 {
    let b = i / 16u;
    return 16u * (b * (2u * b + 3u)) + (i % 16u) * (4u * b + 5u);
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

// Eight columns from c of step j's k (`is_v` false) or v, 0 at a dead step and past Dk
// or Dv.
fn octet(d: GdnDims, h: Head, t0: u32, j: u32, c: u32, is_v: bool) -> array<vec4<f32>, 2> {
    var r = array<vec4<f32>, 2>(vec4(0.0), vec4(0.0));
    if live_sh[j] == 0.0h {
        return r;
    }
    let t = t0 + j;
    if !is_v {
        let row = qk_row(d, h.b, t, h.hk);
        r[0] = load_k(row, c, d.key_dim);
        r[1] = load_k(row, c + 4u, d.key_dim);
        return r;
    }
    let i = v_index(d, h.b, t, h.hv, c);
    {
        let p = 0u;
        let dv = c + 2u * p;
        var x = vec2(0.0);
        if dv + 1u < d.value_dim {
            x = load2_v(i + 2u * p);
        } else if dv < d.value_dim {
            x.x = load1_v(i + 2u * p);
        }
        r[p / 2u][2u * (p % 2u)] = x.x;
        r[p / 2u][2u * (p % 2u) + 1u] = x.y;
    }
    {
        let p = 1u;
        let dv = c + 2u * p;
        var x = vec2(0.0);
        if dv + 1u < d.value_dim {
            x = load2_v(i + 2u * p);
        } else if dv < d.value_dim {
            x.x = load1_v(i + 2u * p);
        }
        r[p / 2u][2u * (p % 2u)] = x.x;
        r[p / 2u][2u * (p % 2u) + 1u] = x.y;
    }
    {
        let p = 2u;
        let dv = c + 2u * p;
        var x = vec2(0.0);
        if dv + 1u < d.value_dim {
            x = load2_v(i + 2u * p);
        } else if dv < d.value_dim {
            x.x = load1_v(i + 2u * p);
        }
        r[p / 2u][2u * (p % 2u)] = x.x;
        r[p / 2u][2u * (p % 2u) + 1u] = x.y;
    }
    {
        let p = 3u;
        let dv = c + 2u * p;
        var x = vec2(0.0);
        if dv + 1u < d.value_dim {
            x = load2_v(i + 2u * p);
        } else if dv < d.value_dim {
            x.x = load1_v(i + 2u * p);
        }
        r[p / 2u][2u * (p % 2u)] = x.x;
        r[p / 2u][2u * (p % 2u) + 1u] = x.y;
    }
    return r;
}

// A's rows r + 16 m (m < ROW_GROUPS) times the chunk's k or v (`is_v`) at eight columns
// from c0 + 8 (li / 16) (c0: the pass's first of TILE_DK columns). A row of block b has
// 16 (b + 1) columns in `a_sh`, zeros above the diagonal: block column jb enters the rows
// of blocks m >= jb. Invocation li stages step li / 16 of each block at column octet
// li % 16. Call in workgroup-uniform control flow (its barriers); `l_sh` is free.
fn a_times(li: u32, d: GdnDims, h: Head, t0: u32, c0: u32, is_v: bool) -> array<array<vec4<f32>, 2>, ROW_GROUPS> {
    let r = li % 16u;
    let oc = li / 16u;
    var acc: array<array<vec4<f32>, 2>, ROW_GROUPS>;
    var rows: array<u32, ROW_GROUPS>;
    {
        let m = 0u;
        rows[m] = a_row(r + 16u * m);
    }
    {
        let m = 1u;
        rows[m] = a_row(r + 16u * m);
    }
    {
        let m = 2u;
        rows[m] = a_row(r + 16u * m);
    }
    {
        let m = 3u;
        rows[m] = a_row(r + 16u * m);
    }
    var x = octet(d, h, t0, oc, c0 + 8u * r, is_v);
    for (var jb = 0u; jb < ROW_GROUPS; jb++) {
        l_sh[kv_at(oc, r)] = x[0];
        l_sh[kv_at(oc, r) + 1u] = x[1];
        workgroupBarrier(); // the block is staged
        if jb + 1u < ROW_GROUPS {
            x = octet(d, h, t0, KV_STEPS * (jb + 1u) + oc, c0 + 8u * r, is_v);
        }
        {
            let jq = 0u;
            var a: array<vec4<f32>, ROW_GROUPS>;
            {
                let m = 0u;
                if m >= jb {
                    a[m] = a_sh[rows[m] + 4u * jb + jq];
                }
            }
            {
                let m = 1u;
                if m >= jb {
                    a[m] = a_sh[rows[m] + 4u * jb + jq];
                }
            }
            {
                let m = 2u;
                if m >= jb {
                    a[m] = a_sh[rows[m] + 4u * jb + jq];
                }
            }
            {
                let m = 3u;
                if m >= jb {
                    a[m] = a_sh[rows[m] + 4u * jb + jq];
                }
            }
            {
                let y = 0u;
                let at = kv_at(4u * jq + y, oc);
                let lo = l_sh[at];
                let hi = l_sh[at + 1u];
                {
                    let m = 0u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 1u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 2u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 3u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
            }
            {
                let y = 1u;
                let at = kv_at(4u * jq + y, oc);
                let lo = l_sh[at];
                let hi = l_sh[at + 1u];
                {
                    let m = 0u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 1u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 2u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 3u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
            }
            {
                let y = 2u;
                let at = kv_at(4u * jq + y, oc);
                let lo = l_sh[at];
                let hi = l_sh[at + 1u];
                {
                    let m = 0u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 1u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 2u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 3u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
            }
            {
                let y = 3u;
                let at = kv_at(4u * jq + y, oc);
                let lo = l_sh[at];
                let hi = l_sh[at + 1u];
                {
                    let m = 0u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 1u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 2u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 3u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
            }
        }
        {
            let jq = 1u;
            var a: array<vec4<f32>, ROW_GROUPS>;
            {
                let m = 0u;
                if m >= jb {
                    a[m] = a_sh[rows[m] + 4u * jb + jq];
                }
            }
            {
                let m = 1u;
                if m >= jb {
                    a[m] = a_sh[rows[m] + 4u * jb + jq];
                }
            }
            {
                let m = 2u;
                if m >= jb {
                    a[m] = a_sh[rows[m] + 4u * jb + jq];
                }
            }
            {
                let m = 3u;
                if m >= jb {
                    a[m] = a_sh[rows[m] + 4u * jb + jq];
                }
            }
            {
                let y = 0u;
                let at = kv_at(4u * jq + y, oc);
                let lo = l_sh[at];
                let hi = l_sh[at + 1u];
                {
                    let m = 0u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 1u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 2u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 3u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
            }
            {
                let y = 1u;
                let at = kv_at(4u * jq + y, oc);
                let lo = l_sh[at];
                let hi = l_sh[at + 1u];
                {
                    let m = 0u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 1u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 2u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 3u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
            }
            {
                let y = 2u;
                let at = kv_at(4u * jq + y, oc);
                let lo = l_sh[at];
                let hi = l_sh[at + 1u];
                {
                    let m = 0u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 1u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 2u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 3u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
            }
            {
                let y = 3u;
                let at = kv_at(4u * jq + y, oc);
                let lo = l_sh[at];
                let hi = l_sh[at + 1u];
                {
                    let m = 0u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 1u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 2u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 3u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
            }
        }
        {
            let jq = 2u;
            var a: array<vec4<f32>, ROW_GROUPS>;
            {
                let m = 0u;
                if m >= jb {
                    a[m] = a_sh[rows[m] + 4u * jb + jq];
                }
            }
            {
                let m = 1u;
                if m >= jb {
                    a[m] = a_sh[rows[m] + 4u * jb + jq];
                }
            }
            {
                let m = 2u;
                if m >= jb {
                    a[m] = a_sh[rows[m] + 4u * jb + jq];
                }
            }
            {
                let m = 3u;
                if m >= jb {
                    a[m] = a_sh[rows[m] + 4u * jb + jq];
                }
            }
            {
                let y = 0u;
                let at = kv_at(4u * jq + y, oc);
                let lo = l_sh[at];
                let hi = l_sh[at + 1u];
                {
                    let m = 0u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 1u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 2u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 3u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
            }
            {
                let y = 1u;
                let at = kv_at(4u * jq + y, oc);
                let lo = l_sh[at];
                let hi = l_sh[at + 1u];
                {
                    let m = 0u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 1u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 2u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 3u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
            }
            {
                let y = 2u;
                let at = kv_at(4u * jq + y, oc);
                let lo = l_sh[at];
                let hi = l_sh[at + 1u];
                {
                    let m = 0u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 1u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 2u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 3u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
            }
            {
                let y = 3u;
                let at = kv_at(4u * jq + y, oc);
                let lo = l_sh[at];
                let hi = l_sh[at + 1u];
                {
                    let m = 0u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 1u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 2u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 3u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
            }
        }
        {
            let jq = 3u;
            var a: array<vec4<f32>, ROW_GROUPS>;
            {
                let m = 0u;
                if m >= jb {
                    a[m] = a_sh[rows[m] + 4u * jb + jq];
                }
            }
            {
                let m = 1u;
                if m >= jb {
                    a[m] = a_sh[rows[m] + 4u * jb + jq];
                }
            }
            {
                let m = 2u;
                if m >= jb {
                    a[m] = a_sh[rows[m] + 4u * jb + jq];
                }
            }
            {
                let m = 3u;
                if m >= jb {
                    a[m] = a_sh[rows[m] + 4u * jb + jq];
                }
            }
            {
                let y = 0u;
                let at = kv_at(4u * jq + y, oc);
                let lo = l_sh[at];
                let hi = l_sh[at + 1u];
                {
                    let m = 0u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 1u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 2u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 3u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
            }
            {
                let y = 1u;
                let at = kv_at(4u * jq + y, oc);
                let lo = l_sh[at];
                let hi = l_sh[at + 1u];
                {
                    let m = 0u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 1u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 2u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 3u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
            }
            {
                let y = 2u;
                let at = kv_at(4u * jq + y, oc);
                let lo = l_sh[at];
                let hi = l_sh[at + 1u];
                {
                    let m = 0u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 1u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 2u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 3u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
            }
            {
                let y = 3u;
                let at = kv_at(4u * jq + y, oc);
                let lo = l_sh[at];
                let hi = l_sh[at + 1u];
                {
                    let m = 0u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 1u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 2u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
                {
                    let m = 3u;
                    if m >= jb {
                        acc[m][0] += a[m][y] * lo;
                        acc[m][1] += a[m][y] * hi;
                    }
                }
            }
        }
        workgroupBarrier(); // the block is read
    }
    return acc;
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

    // 3. L's strict lower triangle (0 at dead steps: their k and beta are) and Q K^T's
    // lower one.
    {
        let m = 0u;
        {
            let n = 0u;
            let i = ri + 16u * m;
            let j = cj + 16u * n;
            if n <= m && j < i {
                l_set(tri(i) + j, beta_sh[i] * kk[m][n]);
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
                l_set(tri(i) + j, beta_sh[i] * kk[m][n]);
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
                l_set(tri(i) + j, beta_sh[i] * kk[m][n]);
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
                l_set(tri(i) + j, beta_sh[i] * kk[m][n]);
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
                l_set(tri(i) + j, beta_sh[i] * kk[m][n]);
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
                l_set(tri(i) + j, beta_sh[i] * kk[m][n]);
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
                l_set(tri(i) + j, beta_sh[i] * kk[m][n]);
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
                l_set(tri(i) + j, beta_sh[i] * kk[m][n]);
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
                l_set(tri(i) + j, beta_sh[i] * kk[m][n]);
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
                l_set(tri(i) + j, beta_sh[i] * kk[m][n]);
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
                l_set(tri(i) + j, beta_sh[i] * kk[m][n]);
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
                l_set(tri(i) + j, beta_sh[i] * kk[m][n]);
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
                l_set(tri(i) + j, beta_sh[i] * kk[m][n]);
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
                l_set(tri(i) + j, beta_sh[i] * kk[m][n]);
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
                l_set(tri(i) + j, beta_sh[i] * kk[m][n]);
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
                l_set(tri(i) + j, beta_sh[i] * kk[m][n]);
            }
            if n <= m && j <= i {
                a_set(i * (i + 1u) / 2u + j, qk[m][n]);
            }
        }
    }
    workgroupBarrier();

    // 4. M = Gam o (Q K^T), zeros above the diagonal, four columns an invocation.
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
        if in_grid {
            store_tile4(tiles + M_AT + tile_at(i, j, CHUNK), gam_row4(i, j) * x);
        }
    }
    workgroupBarrier(); // Q K^T is read: `a_sh` is the solve's stage

    // 5. A0 (ends on a barrier).
    invert_unit_lower(li);

    // 6. A = A0 diag(beta) into its row blocks, a vec4 an invocation.
    for (var p = 0u; p < strides(li, A_LEN, WG_SIZE); p++) {
        let e = li + p * WG_SIZE;
        let b = a_block(e);
        let i = 16u * b + (e - a_row(16u * b)) / (4u * b + 5u);
        let q = e - a_row(i);
        var v = vec4(0.0);
        for (var y = 0u; y < 4u; y++) {
            let j = 4u * q + y;
            if j < i {
                v[y] = l_get(tri(i) + j) * beta_sh[j];
            } else if j == i {
                v[y] = beta_sh[i];
            }
        }
        if q < 4u * (b + 1u) {
            a_sh[e] = v;
        }
    }
    workgroupBarrier();

    // 7. W, eight key columns from 8 (li / 16) (TILE_DK of them in all), rows li % 16 +
    // 16 m.
    let r = li % 16u;
    let wc = 8u * (li / 16u);
    let w = a_times(li, d, h, t0, 0u, false);
    {
        let m = 0u;
        let i = r + 16u * m;
        if in_grid {
            store_tile4(tiles + W_AT + tile_at(i, wc, TILE_DK), gam_sh[i] * w[m][0]);
            store_tile4(tiles + W_AT + tile_at(i, wc + 4u, TILE_DK), gam_sh[i] * w[m][1]);
        }
    }
    {
        let m = 1u;
        let i = r + 16u * m;
        if in_grid {
            store_tile4(tiles + W_AT + tile_at(i, wc, TILE_DK), gam_sh[i] * w[m][0]);
            store_tile4(tiles + W_AT + tile_at(i, wc + 4u, TILE_DK), gam_sh[i] * w[m][1]);
        }
    }
    {
        let m = 2u;
        let i = r + 16u * m;
        if in_grid {
            store_tile4(tiles + W_AT + tile_at(i, wc, TILE_DK), gam_sh[i] * w[m][0]);
            store_tile4(tiles + W_AT + tile_at(i, wc + 4u, TILE_DK), gam_sh[i] * w[m][1]);
        }
    }
    {
        let m = 3u;
        let i = r + 16u * m;
        if in_grid {
            store_tile4(tiles + W_AT + tile_at(i, wc, TILE_DK), gam_sh[i] * w[m][0]);
            store_tile4(tiles + W_AT + tile_at(i, wc + 4u, TILE_DK), gam_sh[i] * w[m][1]);
        }
    }
    // A becomes Gam o A (Gam[i][i] = 1, zeros above the diagonal).
    for (var p = 0u; p < strides(li, A_LEN, WG_SIZE); p++) {
        let e = li + p * WG_SIZE;
        let b = a_block(e);
        let i = 16u * b + (e - a_row(16u * b)) / (4u * b + 5u);
        let q = e - a_row(i);
        if q < 4u * (b + 1u) {
            a_sh[e] *= gam_row4(i, 4u * q);
        }
    }
    workgroupBarrier();
    // U over the value columns, TILE_DK a pass, eight an invocation.
    for (var p = 0u; p < strides(0u, d.value_dim, TILE_DK); p++) {
        let c = p * TILE_DK + wc;
        let u = a_times(li, d, h, t0, p * TILE_DK, true);
        {
            let m = 0u;
            let at = (ch * CHUNK + r + 16u * m) * d.value_dim + c;
            if in_grid {
                store_u8(d, at, c, u[m]);
            }
        }
        {
            let m = 1u;
            let at = (ch * CHUNK + r + 16u * m) * d.value_dim + c;
            if in_grid {
                store_u8(d, at, c, u[m]);
            }
        }
        {
            let m = 2u;
            let at = (ch * CHUNK + r + 16u * m) * d.value_dim + c;
            if in_grid {
                store_u8(d, at, c, u[m]);
            }
        }
        {
            let m = 3u;
            let at = (ch * CHUNK + r + 16u * m) * d.value_dim + c;
            if in_grid {
                store_u8(d, at, c, u[m]);
            }
        }
    }
}

// The block of A's rows that `a_sh`'s vec4 e lies in.
fn a_block(e: u32) -> u32 {
    return select(select(select(0u, 1u, e >= a_row(16u)), 2u, e >= a_row(32u)), 3u, e >= a_row(48u));
}

// U's eight values from element `at` (value column c), four a store where Dv is a
// multiple of 4 (`at` is then one too), within Dv.
fn store_u8(d: GdnDims, at: u32, c: u32, v: array<vec4<f32>, 2>) {
    for (var x = 0u; x < 2u; x++) {
        let dv = c + 4u * x;
        if d.value_dim % 4u == 0u && dv < d.value_dim {
            store4_u((at + 4u * x) / 4u, bitcast<vec4<u32>>(v[x]));
        } else {
            for (var y = 0u; y < 4u; y++) {
                if dv + y < d.value_dim {
                    store_u(at + 4u * x + y, bitcast<u32>(v[x][y]));
                }
            }
        }
    }
}
