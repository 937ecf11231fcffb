enable f16;
enable wgpu_cooperative_matrix;

// deltatape kernel chunk_prep_coop.f32.f32.f32.workgroup.l1r1g1t1c64.v4
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

// v's elements i and i + 1 as f32 (the fast path's first passes stage v in pairs): one
// word where bf16 pairs them (i even), else two loads.
fn load2_v(i: u32) -> vec2<f32> {
    return vec2(load1_v(i), load1_v(i + 1u));
}

// record_chunked's first pass on the fast path's matrix units (chunk_prep.wgsl is the
// same pass on vector units, in f32): one workgroup of 8 subgroups of 32 per (b, hv,
// chunk of CHUNK = 64 steps), independent of every other. cpu_fast.rs beside it is its
// twin (and has the decay-free solve's identity). From q, k, v, g and beta it writes
// what the walk and the output pass read:
//   tiles   W = diag(gam) A0 diag(beta) K, gam Q, (G_end K)^T and M = Gam o (Q K^T),
//           as the f16 16 x 16 tiles of chunk_tiles.wgsl
//   u       U = (Gam o A0) diag(beta) V, f32                         [C][Dv]
//   decay   gam[i], G(C-1, j), gam[C-1]                              [3C]
// with A0 = (I + tril(diag(beta) K K^T, -1))^-1 from k and beta alone, and Gam[i][j] =
// g[j+1] ... g[i] by running products (no ratio): T = Gam o A0 is the gated solve's
// inverse. Phases, barriers between:
//   1. the gates; gam and G_end by running products (wgsl/chunk_gates.wgsl)
//   2. K K^T and Q K^T over blocks of KB key columns staged in f16 (the next block's
//      loads in flight through each block's products); gam Q's and (G_end K)^T's
//      tiles on the way
//   3. the Gram products through `fs` in three rounds of 8 tiles: M out (four columns a
//      store, Gam along the rows), L0 = beta K K^T (strictly lower) into A in two f16
//      parts
//   4. A0's four 16 x 16 diagonal blocks by forward substitution (an invocation a
//      column)
//   5. the merges 16 -> 32 -> 64 as tile products, X = L0_21 A0_11, A0_21 = -A0_22 X
//      (X in tiles of A's upper right block); A = A0 diag(beta) over A's stored
//      tiles, four values an invocation
//   6. W over 4 blocks of 32 key columns, then (A masked by Gam) U over the value
//      columns, 32 at a time: subgroup sg makes the tile at row tile sg % 4, column
//      tile sg / 4 over the 4 inner tiles (its row of A's tiles loaded once for W's
//      blocks and once for U's); its lanes scale, round and store
// Precision: A and the merges' operands in two f16 parts (hi + lo, about 22 bits); k
// and q in the Gram products in two parts where the activations are f32 (GROUPS = 1:
// blocks of 16 columns), else in one (GROUPS = 2: f16 holds bf16 and f16 exactly within
// its range); k and v in W's and U's products in one; f32 sums. Each stored tile is
// rounded to f16 once, clamped into its range (to_f16_range). naga wants every
// cooperative op in workgroup-uniform control flow: no early return, each subgroup does
// the same fixed sequence of products, its role read only in addresses; a workgroup
// past the grid's end (a folded grid) redoes the last one and writes nothing.

const SUBGROUP_WIDTH: u32 = 32u;
const SG_COUNT: u32 = WG_SIZE / SUBGROUP_WIDTH;
// The Gram products' blocks: KB key columns, row stride KS in f16 (padded: a tile's
// rows fall in different banks); k and q in PARTS parts.
const KB: u32 = 16u * GROUPS;
const KS: u32 = KB + 8u;
const KBLOCKS: u32 = TILE_DK / KB;
const PARTS: u32 = 3u - GROUPS;
// The row stride of (G_end K)^T's block in f16 (33 words: the transposing stores of a
// subgroup's four-column quads fall in different banks); W's and U's blocks of BW
// columns; `fs`'s row stride in f32 (8 slots of 16 x 16 as a [C][32] block, unpadded:
// see below).
const HS: u32 = CHUNK + 2u;
const BW: u32 = 32u;
const FS: u32 = 32u;
const KW_BLOCKS: u32 = TILE_DK / BW;
// The f16 array, in two lives. Phases 1-2: the staged blocks, K's then Q's parts
// ([C][KS] each, the low part GLO on), then (G_end K)^T's block ([KB][HS]).
const GK: u32 = 0u;
const GLO: u32 = CHUNK * KS;
const GQ: u32 = PARTS * CHUNK * KS;
const GT: u32 = 2u * PARTS * CHUNK * KS;
const GRAM_LEN: u32 = GT + KB * HS;
// Phases 3-6: A (C = 64) as 16 x 16 tiles of 256 contiguous values (`a_tile`): the 10
// on and below the diagonal (tile (r, c) at r (r + 1) / 2 + c), their low parts AL on;
// then the 4 of the upper right 32 x 32 block (the merges' X: tile (r, c) at
// 2 r + c - 2 from XT), their low parts XL on; then one zero tile, which stands for the
// two tiles above the diagonal blocks (0, 1) and (2, 3), and for every tile above the
// diagonal in phase 6, in both parts (its low part is itself). In phase 6 X's 8 tiles
// hold the staged block of k or v ([C][BW] as 4 x 2 tiles, `bs_at`).
const AL: u32 = 10u * 256u;
const XT: u32 = 2u * AL;
const XL: u32 = 4u * 256u;
const ZT: u32 = XT + 2u * XL;
const BS: u32 = XT;
const SOLVE_LEN: u32 = ZT + 256u;
// All of it in 24480 bytes (24496 over packed sequences): NVIDIA's Vulkan driver gives
// an SM about 52 KiB of workgroup memory (`coop_micro resident`, docs/PERFORMANCE.md), so
// at most 24 KiB a workgroup lets two of them share an SM, which takes the pass from one
// workgroup's latency at a time to two. Hence A's unpadded tiles, `fs` unpadded and the
// live flags in f16.

var<workgroup> h16: array<f16, max(GRAM_LEN, SOLVE_LEN)>;
var<workgroup> fs: array<f32, CHUNK * FS>;

fn half16(x: f32) -> f16 {
    return f16(to_f16_range(x));
}

fn f16_range4(v: vec4<f32>) -> vec4<f32> {
    return vec4(to_f16_range(v.x), to_f16_range(v.y), to_f16_range(v.z), to_f16_range(v.w));
}

// Four consecutive values of a tile's row from `at` (a multiple of 4) in one store.
fn store_tile4(at: u32, v: vec4<f32>) {
    store_tiles(at, 0u, 4u, v);
}

// Four consecutive f16 values of `h16` from `at`, as f32.
fn h16x4(at: u32) -> vec4<f32> {
    return vec4(f32(h16[at]), f32(h16[at + 1u]), f32(h16[at + 2u]), f32(h16[at + 3u]));
}

// x in two f16 parts, hi = x rounded to f16 (to nearest even, into f16's range) and lo =
// the rest rounded: (hi, lo). hi's value in f32 comes from x's bits, not from the round
// trip f32(f16(x)): NVIDIA's Vulkan compiler folds that trip into x, so x - f32(f16(x))
// was 0 and every low part vanished on the H100 (this pass's lane-loop twin, since
// replaced, off its CPU twin by exactly what zero low parts give, and A and f32 q and k
// in one part).
fn split2(x: f32) -> vec2<f16> {
    let y = to_f16_range(x);
    let a = abs(y);
    var hi = y; // infinities and NaN (the low part 0)
    if a < 0x1p-14f {
        // f16's subnormals: multiples of 2^-24 (the scalings are exact)
        hi = round(y * 0x1p24f) * 0x1p-24f;
    } else if a <= 65504.0 {
        // 11 significant bits, the 13 dropped rounded to nearest even
        let b = bitcast<u32>(y);
        hi = bitcast<f32>((b + 0xfffu + ((b >> 13u) & 1u)) & 0xffffe000u);
    }
    return vec2(f16(hi), f16(select(0.0, y - hi, a <= 65504.0)));
}

// x into the f16 array at `at` in two parts, the low one `low` further on.
fn put2(at: u32, low: u32, x: f32) {
    let p = split2(x);
    h16[at] = p.x;
    h16[at + low] = p.y;
}

// Four neighbouring values into A's tiles from `at` in two parts (`put2`).
fn put2x4(at: u32, v: vec4<f32>) {
    for (var x = 0u; x < 4u; x++) {
        put2(at + x, AL, v[x]);
    }
}

fn get2(at: u32, low: u32) -> f32 {
    return f32(h16[at]) + f32(h16[at + low]);
}

// Where tile (r, c) of A begins in `h16` (its high part), 0 <= r, c < 4.
fn a_tile(r: u32, c: u32) -> u32 {
    if c <= r {
        return (r * (r + 1u) / 2u + c) * 256u;
    }
    if r < 2u && c >= 2u {
        return XT + (2u * r + c - 2u) * 256u;
    }
    return ZT;
}

// Where A's element (i, j) is (its high part).
fn a_at(i: u32, j: u32) -> u32 {
    return a_tile(i / 16u, j / 16u) + (i % 16u) * 16u + j % 16u;
}

// The row and column of the element at `at` (below AL) of A's 10 stored tiles.
fn a_elem(at: u32) -> vec2<u32> {
    let t = at / 256u;
    let r = select(select(select(0u, 1u, t >= 1u), 2u, t >= 3u), 3u, t >= 6u);
    let c = t - r * (r + 1u) / 2u;
    return vec2(r * 16u + (at % 256u) / 16u, c * 16u + at % 16u);
}

// Tile (rt, kt) of A in phase 6, the zero tile above the diagonal.
fn a6_tile(rt: u32, kt: u32) -> u32 {
    return select(ZT, a_tile(rt, kt), kt <= rt);
}

// How far the low part is from the high part at `at` (a high part's place): none in
// the zero tile.
fn low_of(at: u32) -> u32 {
    return select(select(AL, XL, at >= XT), 0u, at >= ZT);
}

// Where slot s is in `fs`: row tile s % 4, column tile s / 4.
fn slot_at(s: u32) -> u32 {
    return (s % 4u) * 16u * FS + (s / 4u) * 16u;
}

// ---- Tile products: acc + A B, f16 operands in `h16` (A row-major at a_at, row
// stride sa; B row-major at b_at, or for `mma_t` the transpose of the row-major block
// at b_at), f32 sums; `acc_store` puts a subgroup's tile into `fs` row-major. ----
alias Acc = coop_mat16x16<f32, C>;

fn acc_zero() -> Acc {
    return coop_mat16x16<f32, C>();
}

fn mma(acc: Acc, a_at: u32, sa: u32, b_at: u32, sb: u32) -> Acc {
    let a = coopLoadT<coop_mat16x16<f16, A>>(&h16[a_at], sa);
    let b = coopLoadT<coop_mat16x16<f16, B>>(&h16[b_at], sb);
    return coopMultiplyAdd(a, b, acc);
}

// B^T of a row-major block: a column-major load.
fn mma_t(acc: Acc, a_at: u32, sa: u32, b_at: u32, sb: u32) -> Acc {
    let a = coopLoadT<coop_mat16x16<f16, A>>(&h16[a_at], sa);
    let b = coopLoad<coop_mat16x16<f16, B>>(&h16[b_at], sb);
    return coopMultiplyAdd(a, b, acc);
}

fn acc_store(acc: Acc, at: u32) {
    coopStoreT(acc, &fs[at], FS);
}

// An A operand loaded once from `h16` (row stride 16) for several products.
alias ATile = coop_mat16x16<f16, A>;

fn a_load(at: u32) -> ATile {
    return coopLoadT<coop_mat16x16<f16, A>>(&h16[at], 16u);
}

fn a_none() -> ATile {
    return coop_mat16x16<f16, A>();
}

// acc + a B, B row-major at b_at (row stride sb).
fn mma_a(acc: Acc, a: ATile, b_at: u32, sb: u32) -> Acc {
    let b = coopLoadT<coop_mat16x16<f16, B>>(&h16[b_at], sb);
    return coopMultiplyAdd(a, b, acc);
}

// acc + A B with both in two parts (hi hi + lo hi + hi lo), the low parts `alo` and
// `blo` further on.
fn mma2(acc: Acc, a_at: u32, sa: u32, alo: u32, b_at: u32, sb: u32, blo: u32) -> Acc {
    var r = mma(acc, a_at, sa, b_at, sb);
    r = mma(r, a_at + alo, sa, b_at, sb);
    return mma(r, a_at, sa, b_at + blo, sb);
}

// ---- Loads ----

// A lane's share of a [C][KB] block of q or k from key column c0: GROUPS vec4s, for
// e = li + m WG_SIZE row e / (KB / 4), columns (e % (KB / 4)) * 4 on (0 past T and
// past Dk; a dead step is zeroed where the block is staged).
struct Quads {
    a: vec4<f32>,
    b: vec4<f32>,
}

fn quad_row(li: u32, m: u32) -> u32 {
    return (li + m * WG_SIZE) / (KB / 4u);
}

fn quad_col(li: u32, m: u32) -> u32 {
    return ((li + m * WG_SIZE) % (KB / 4u)) * 4u;
}

fn load_quads(d: GdnDims, h: Head, t0: u32, li: u32, c0: u32, is_q: bool) -> Quads {
    var r = Quads(vec4(0.0), vec4(0.0));
    for (var m = 0u; m < GROUPS; m++) {
        let t = t0 + quad_row(li, m);
        var x = vec4(0.0);
        if t < d.steps {
            let row = qk_row(d, h.b, t, h.hk);
            let c = c0 + quad_col(li, m);
            if is_q {
                x = load_q(row, c, d.key_dim);
            } else {
                x = load_k(row, c, d.key_dim);
            }
        }
        if m == 0u {
            r.a = x;
        } else {
            r.b = x;
        }
    }
    return r;
}

// Quad m of a lane's share, zero at a dead step.
fn live_quad(x: Quads, li: u32, m: u32) -> vec4<f32> {
    return select(vec4(0.0), select(x.a, x.b, m == 1u), live_sh[quad_row(li, m)] != 0.0h);
}

// A lane's 8 values of W's [C][BW] block of k from key column c0: row li / 4, columns
// (li % 4) * 8 on (0 past T and past Dk).
fn load_k_block(d: GdnDims, h: Head, t0: u32, li: u32, c0: u32) -> Quads {
    let t = t0 + li / 4u;
    if t < d.steps {
        let row = qk_row(d, h.b, t, h.hk);
        let c = c0 + (li % 4u) * 8u;
        return Quads(load_k(row, c, d.key_dim), load_k(row, c + 4u, d.key_dim));
    }
    return Quads(vec4(0.0), vec4(0.0));
}

// A lane's 8 values of U's [C][BW] block of v from value column c0, in pairs: pair
// p = li + m WG_SIZE (m < 4) is row p / (BW / 2), columns 2 (p % (BW / 2)) and the next,
// in (a.xy, a.zw, b.xy, b.zw) (0 past T and past Dv).
fn load_v_block(d: GdnDims, h: Head, t0: u32, li: u32, c0: u32) -> Quads {
    var r = Quads(vec4(0.0), vec4(0.0));
    for (var m = 0u; m < 4u; m++) {
        let p = li + m * WG_SIZE;
        let t = t0 + p / (BW / 2u);
        let dv = c0 + (p % (BW / 2u)) * 2u;
        var x = vec2(0.0);
        if t < d.steps && dv < d.value_dim {
            let i = v_index(d, h.b, t, h.hv, dv);
            if dv + 1u < d.value_dim {
                x = load2_v(i);
            } else {
                x.x = load1_v(i);
            }
        }
        if m < 2u {
            r.a[2u * m] = x.x;
            r.a[2u * m + 1u] = x.y;
        } else {
            r.b[2u * m - 4u] = x.x;
            r.b[2u * m - 3u] = x.y;
        }
    }
    return r;
}

// Where the staged block's element (r, c) is: 4 x 2 tiles of 16 x 16 over X's.
fn bs_at(r: u32, c: u32) -> u32 {
    return BS + ((r / 16u) * 2u + c / 16u) * 256u + (r % 16u) * 16u + c % 16u;
}

// The Gram products' output tiles, three a subgroup (slot s = sg + 8 u): K K^T's 10
// tiles on and below the diagonal, Q K^T's 10, and 4 spare (Q K^T above the diagonal,
// unused). Each: row tile (bits 0-3), column tile (4-7), 1 for Q K^T (8), 1 if spare (9).
const SLOTS = array<u32, 24>(
    0x000u, 0x001u, 0x011u, 0x002u, 0x012u, 0x022u, 0x003u, 0x013u,
    0x023u, 0x033u, 0x100u, 0x101u, 0x111u, 0x102u, 0x112u, 0x122u,
    0x103u, 0x113u, 0x123u, 0x133u, 0x310u, 0x320u, 0x330u, 0x321u,
);

fn gram_products(acc: Acc, s: u32, ks: u32) -> Acc {
    let w = SLOTS[s];
    let a = select(GK, GQ, (w & 0x100u) != 0u) + (w & 15u) * 16u * KS + ks * 16u;
    let b = GK + ((w >> 4u) & 15u) * 16u * KS + ks * 16u;
    var r = mma_t(acc, a, KS, b, KS);
    if PARTS == 2u {
        r = mma_t(r, a + GLO, KS, b, KS);
        r = mma_t(r, a, KS, b + GLO, KS);
    }
    return r;
}

// Round u of the Gram products' tiles, in `fs`'s slots, four neighbouring columns of a
// row an invocation: M = Gam o (Q K^T) out (rows i of Q K^T's tiles; one store), L0 =
// beta K K^T's strictly lower elements into A in two parts (0 on and above the diagonal,
// where the forward substitution writes the diagonal blocks without reading them).
fn gram_round(u: u32, li: u32, tiles: u32, in_grid: bool) {
    let s = li / SUBGROUP_WIDTH;
    let w = SLOTS[s + SG_COUNT * u];
    if (w & 0x200u) != 0u {
        return;
    }
    let ti = (w & 15u) * 16u;
    let tj = ((w >> 4u) & 15u) * 16u;
    for (var m = 0u; m < 2u; m++) {
        let e = li % SUBGROUP_WIDTH + m * SUBGROUP_WIDTH;
        let r = e / 4u;
        let c = (e % 4u) * 4u;
        let i = ti + r;
        let j = tj + c;
        let at = slot_at(s) + r * FS + c;
        let x = vec4(fs[at], fs[at + 1u], fs[at + 2u], fs[at + 3u]);
        if (w & 0x100u) != 0u {
            let v = select(vec4(0.0), gam_row4(i, j) * x, cols4(j) <= vec4(i));
            if in_grid {
                store_tile4(tiles + M_AT + tile_at(i, j, CHUNK), f16_range4(v));
            }
        } else {
            let v = select(vec4(0.0), beta_sh[i] * x, cols4(j) < vec4(i));
            put2x4(a_tile(ti / 16u, tj / 16u) + r * 16u + c, v);
        }
    }
}

fn kernel_main(li: u32, wg_in: u32, unused: u32) {
    // No early return (naga then takes the products as outside uniform control flow).
    let in_grid = wg_in < params.workgroups;
    let chunk = chunk_at(min(wg_in, params.workgroups - 1u), li); // wgsl/chunk_at.wgsl
    let d = chunk.d;
    let h = chunk.h;
    let ch = chunk.ch;
    let t0 = chunk.n * CHUNK;
    let sg = li / SUBGROUP_WIDTH;
    let tiles = ch * TILES_PER_CHUNK;

    // 1. The gates (wgsl/chunk_gates.wgsl), the first block's loads in flight meanwhile.
    gates_in(li, d, h, t0);
    var kx = load_quads(d, h, t0, li, 0u, false);
    var qx = load_quads(d, h, t0, li, 0u, true);
    workgroupBarrier();
    gate_products(li);
    workgroupBarrier();
    decays_out(li, ch, in_grid);

    // 2. K K^T and Q K^T, KB key columns a block.
    var acc0 = acc_zero();
    var acc1 = acc_zero();
    var acc2 = acc_zero();
    for (var blk = 0u; blk < KBLOCKS; blk++) {
        let c0 = blk * KB;
        for (var m = 0u; m < GROUPS; m++) {
            let i = quad_row(li, m);
            let c = quad_col(li, m);
            let kv = live_quad(kx, li, m);
            let qv = live_quad(qx, li, m);
            // (G_end K)^T's block, transposed here from the lanes' k (one rounding); a
            // zero decay adds nothing, whatever k is.
            let e = end_sh[i];
            for (var x = 0u; x < 4u; x++) {
                if PARTS == 2u {
                    put2(GK + i * KS + c + x, GLO, kv[x]);
                    put2(GQ + i * KS + c + x, GLO, qv[x]);
                } else {
                    h16[GK + i * KS + c + x] = half16(kv[x]);
                    h16[GQ + i * KS + c + x] = half16(qv[x]);
                }
                h16[GT + (c + x) * HS + i] = half16(select(0.0, e * kv[x], e != 0.0));
            }
        }
        workgroupBarrier(); // the block is staged
        // The next block's loads in flight through this block's products (issued after
        // the barrier rather than before it: 2% faster on an H100).
        if blk + 1u < KBLOCKS {
            kx = load_quads(d, h, t0, li, c0 + KB, false);
            qx = load_quads(d, h, t0, li, c0 + KB, true);
        }
        for (var ks = 0u; ks < GROUPS; ks++) {
            acc0 = gram_products(acc0, sg, ks);
            acc1 = gram_products(acc1, sg + SG_COUNT, ks);
            acc2 = gram_products(acc2, sg + 2u * SG_COUNT, ks);
        }
        // gam Q's and (G_end K)^T's tiles of the block out, four neighbouring columns
        // an invocation and store (q from its staged parts).
        for (var m = 0u; m < GROUPS; m++) {
            let e = li + m * WG_SIZE;
            let i = e / (KB / 4u);
            let c = (e % (KB / 4u)) * 4u;
            var qv = h16x4(GQ + i * KS + c);
            if PARTS == 2u {
                qv += h16x4(GQ + GLO + i * KS + c);
            }
            let r = e / (CHUNK / 4u);
            let j = (e % (CHUNK / 4u)) * 4u;
            if in_grid {
                store_tile4(tiles + QG_AT + tile_at(i, c0 + c, TILE_DK), f16_range4(gam_sh[i] * qv));
                store_tile4(tiles + KT_AT + tile_at(c0 + r, j, CHUNK), h16x4(GT + r * HS + j));
            }
        }
        workgroupBarrier(); // the block is read
    }
    // W's first block of k (again: from L2), in flight through phases 3 to 5.
    var pre = load_k_block(d, h, t0, li, 0u);

    // 3. The Gram tiles through `fs`, 8 a round. Round 0 also zeroes A's zero tile and
    // M's tiles above the diagonal.
    acc_store(acc0, slot_at(sg));
    workgroupBarrier();
    gram_round(0u, li, tiles, in_grid);
    h16[ZT + li] = f16(0.0);
    for (var m = 0u; m < 2u; m++) {
        // 6 tiles, four values a store: (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
        let e = (li + m * WG_SIZE) * 4u;
        let tb = e / 256u;
        let rt = select(0u, select(1u, 2u, tb >= 5u), tb >= 3u);
        let ct = tb + 1u - select(0u, select(2u, 3u, tb >= 5u), tb >= 3u);
        let i = rt * 16u + (e % 256u) / 16u;
        let j = ct * 16u + e % 16u;
        if in_grid && tb < 6u {
            store_tile4(tiles + M_AT + tile_at(i, j, CHUNK), vec4(0.0));
        }
    }
    workgroupBarrier();
    acc_store(acc1, slot_at(sg));
    workgroupBarrier();
    gram_round(1u, li, tiles, in_grid);
    workgroupBarrier();
    acc_store(acc2, slot_at(sg));
    workgroupBarrier();
    gram_round(2u, li, tiles, in_grid);
    workgroupBarrier();

    // 4. A0's diagonal blocks, an invocation a column c of block b0 / 16:
    // X[r][c] = -sum_{s<r} L0[r][s] X[s][c], X[c][c] = 1, 0 above; in place of L0's
    // block after a barrier.
    var x: array<f32, TILE16>;
    let b0 = (li % CHUNK) - li % 16u;
    let dt = a_tile(b0 / 16u, b0 / 16u);
    let col = li % 16u;
    if li < CHUNK {
        {
            let r = 0u;
            var acc = 0.0;
            {
                let s = 0u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
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
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
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
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
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
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
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
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
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
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
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
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
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
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
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
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
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
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
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
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
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
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
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
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
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
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
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
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
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
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 1u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 2u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 3u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 4u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 5u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 6u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 7u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 8u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 9u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 10u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 11u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 12u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 13u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 14u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            {
                let s = 15u;
                if s < r {
                    acc += get2(dt + r * 16u + s, AL) * x[s];
                }
            }
            x[r] = select(-acc, select(0.0, 1.0, r == col), r <= col);
        }
    }
    workgroupBarrier();
    if li < CHUNK {
        {
            let r = 0u;
            put2(dt + r * 16u + col, AL, x[r]);
        }
        {
            let r = 1u;
            put2(dt + r * 16u + col, AL, x[r]);
        }
        {
            let r = 2u;
            put2(dt + r * 16u + col, AL, x[r]);
        }
        {
            let r = 3u;
            put2(dt + r * 16u + col, AL, x[r]);
        }
        {
            let r = 4u;
            put2(dt + r * 16u + col, AL, x[r]);
        }
        {
            let r = 5u;
            put2(dt + r * 16u + col, AL, x[r]);
        }
        {
            let r = 6u;
            put2(dt + r * 16u + col, AL, x[r]);
        }
        {
            let r = 7u;
            put2(dt + r * 16u + col, AL, x[r]);
        }
        {
            let r = 8u;
            put2(dt + r * 16u + col, AL, x[r]);
        }
        {
            let r = 9u;
            put2(dt + r * 16u + col, AL, x[r]);
        }
        {
            let r = 10u;
            put2(dt + r * 16u + col, AL, x[r]);
        }
        {
            let r = 11u;
            put2(dt + r * 16u + col, AL, x[r]);
        }
        {
            let r = 12u;
            put2(dt + r * 16u + col, AL, x[r]);
        }
        {
            let r = 13u;
            put2(dt + r * 16u + col, AL, x[r]);
        }
        {
            let r = 14u;
            put2(dt + r * 16u + col, AL, x[r]);
        }
        {
            let r = 15u;
            put2(dt + r * 16u + col, AL, x[r]);
        }
    }
    workgroupBarrier();

    // 5a. The merge 16 -> 32 of diagonal blocks (2p, 2p + 1), p = sg % 2:
    // X = L0[2p+1][2p] A0[2p][2p] (in X's tiles (0, 2) and (0, 3)), then
    // A0[2p+1][2p] = -A0[2p+1][2p+1] X.
    let p = sg % 2u;
    var y = mma2(acc_zero(), a_tile(2u * p + 1u, 2u * p), 16u, AL, a_tile(2u * p, 2u * p), 16u, AL);
    acc_store(y, slot_at(sg));
    workgroupBarrier();
    for (var m = 0u; m < 2u; m++) {
        let e = li + m * WG_SIZE;
        let q = e / 256u;
        let r = (e % 256u) / 16u;
        let c = e % 16u;
        put2(a_tile(0u, 2u + q) + r * 16u + c, XL, fs[slot_at(q) + r * FS + c]);
    }
    workgroupBarrier();
    y = mma2(acc_zero(), a_tile(2u * p + 1u, 2u * p + 1u), 16u, AL, a_tile(0u, 2u + p), 16u, XL);
    acc_store(y, slot_at(sg));
    workgroupBarrier();
    for (var m = 0u; m < 2u; m++) {
        let e = li + m * WG_SIZE;
        let q = e / 256u;
        let r = (e % 256u) / 16u;
        let c = e % 16u;
        put2(a_tile(2u * q + 1u, 2u * q) + r * 16u + c, AL, -fs[slot_at(q) + r * FS + c]);
    }
    workgroupBarrier();

    // 5b. The merge 32 -> 64, A the first 32 steps, B the last:
    // X2 = L0[B][A] A0[A][A] (in X's tiles), A0[B][A] = -A0[B][B] X2. Subgroup sg: output tile
    // o = sg % 4 (row tile 2 + o / 2, column tile o % 2) over half kh = sg / 4 of the
    // inner tiles; the lanes sum the halves.
    let o = sg % 4u;
    let kh = sg / 4u;
    let ro = 2u + o / 2u;
    let co = o % 2u;
    let b5 = a_tile(kh, co); // (0, 1): the zero tile
    y = mma2(acc_zero(), a_tile(ro, kh), 16u, AL, b5, 16u, low_of(b5));
    acc_store(y, slot_at(sg));
    workgroupBarrier();
    for (var m = 0u; m < 4u; m++) {
        let e = li + m * WG_SIZE;
        let q = e / 256u;
        let r = (e % 256u) / 16u;
        let c = e % 16u;
        let v = fs[slot_at(q) + r * FS + c] + fs[slot_at(q + 4u) + r * FS + c];
        put2(a_tile(q / 2u, 2u + q % 2u) + r * 16u + c, XL, v);
    }
    workgroupBarrier();
    let a5 = a_tile(ro, 2u + kh); // (2, 3): the zero tile
    y = mma2(acc_zero(), a5, 16u, low_of(a5), a_tile(kh, 2u + co), 16u, XL);
    acc_store(y, slot_at(sg));
    workgroupBarrier();

    // 5c. A0 complete (its last blocks from the halves); A = A0 diag(beta), W's left
    // operand: A's 10 stored tiles are 2560 contiguous values, four neighbouring
    // columns an invocation (the diagonal tiles' zeros above the diagonal stay zeros).
    // X's tiles are left as they are: phase 6 reads the zero tile above the diagonal,
    // not them, and stages its blocks over them.
    for (var m = 0u; m < (AL / 4u + WG_SIZE - 1u) / WG_SIZE; m++) {
        let at = (li + m * WG_SIZE) * 4u;
        if at < AL {
            let ij = a_elem(at);
            let i = ij.x;
            let j = ij.y;
            var a0 = h16x4(at) + h16x4(at + AL);
            if i >= 32u && j < 32u {
                let q = (i / 16u - 2u) * 2u + j / 16u;
                let f = (at % 256u) / 16u * FS + at % 16u;
                let h0 = slot_at(q) + f; // the two halves of the inner tiles
                let h1 = slot_at(q + 4u) + f;
                a0 = -(vec4(fs[h0], fs[h0 + 1u], fs[h0 + 2u], fs[h0 + 3u])
                    + vec4(fs[h1], fs[h1 + 1u], fs[h1 + 2u], fs[h1 + 3u]));
            }
            let b = vec4(beta_sh[j], beta_sh[j + 1u], beta_sh[j + 2u], beta_sh[j + 3u]);
            put2x4(at, select(vec4(0.0), a0 * b, cols4(j) <= vec4(i)));
        }
    }

    // 6. W = diag(gam) A K over KW_BLOCKS blocks of BW key columns, then U = (Gam o A) V
    // over the value columns: subgroup sg makes the block's tile at row tile sg % 4,
    // column tile sg / 4 over all 4 inner tiles, both parts (8 products; above the
    // diagonal the zero tile). Block `blk`'s tiles leave through `fs` after the next
    // barrier.
    let ublocks = (d.value_dim + BW - 1u) / BW;
    let rt = sg % 4u;
    let ct = sg / 4u;
    // The subgroup's row of A's tiles (kt = 0 .. 3), high and low parts, loaded once for
    // W's blocks and again for U's (after Gam's mask); above the diagonal the zero tile.
    var ah0 = a_none();
    var al0 = a_none();
    var ah1 = a_none();
    var al1 = a_none();
    var ah2 = a_none();
    var al2 = a_none();
    var ah3 = a_none();
    var al3 = a_none();
    for (var blk = 0u; blk < KW_BLOCKS + ublocks; blk++) {
        if blk > 0u {
            out_block(d, ch, tiles, in_grid, li, blk - 1u);
        }
        if blk == KW_BLOCKS {
            gam_mask_a(li);
        }
        // The block, zero at dead steps: k's (W), or v's (U).
        if blk < KW_BLOCKS {
            let r = li / 4u;
            let live = live_sh[r] != 0.0h;
            for (var c = 0u; c < 4u; c++) {
                let col = (li % 4u) * 8u + c;
                h16[bs_at(r, col)] = half16(select(0.0, pre.a[c], live));
                h16[bs_at(r, col + 4u)] = half16(select(0.0, pre.b[c], live));
            }
        } else {
            for (var m = 0u; m < 4u; m++) {
                let p = li + m * WG_SIZE;
                let r = p / (BW / 2u);
                let at = bs_at(r, (p % (BW / 2u)) * 2u);
                let live = live_sh[r] != 0.0h;
                let x = select(pre.b, pre.a, m < 2u);
                let even = m % 2u == 0u;
                h16[at] = half16(select(0.0, select(x.z, x.x, even), live));
                h16[at + 1u] = half16(select(0.0, select(x.w, x.y, even), live));
            }
        }
        workgroupBarrier(); // the block and A are staged; `fs` is read
        // The next block's loads in flight through this block's products (after the
        // barrier, as in phase 2).
        if blk + 1u < KW_BLOCKS {
            pre = load_k_block(d, h, t0, li, (blk + 1u) * BW);
        } else if blk + 1u < KW_BLOCKS + ublocks {
            pre = load_v_block(d, h, t0, li, (blk + 1u - KW_BLOCKS) * BW);
        }
        if blk == 0u || blk == KW_BLOCKS {
            ah0 = a_load(a6_tile(rt, 0u));
            al0 = a_load(a6_tile(rt, 0u) + low_of(a6_tile(rt, 0u)));
            ah1 = a_load(a6_tile(rt, 1u));
            al1 = a_load(a6_tile(rt, 1u) + low_of(a6_tile(rt, 1u)));
            ah2 = a_load(a6_tile(rt, 2u));
            al2 = a_load(a6_tile(rt, 2u) + low_of(a6_tile(rt, 2u)));
            ah3 = a_load(a6_tile(rt, 3u));
            al3 = a_load(a6_tile(rt, 3u) + low_of(a6_tile(rt, 3u)));
        }
        var out = mma_a(acc_zero(), ah0, bs_at(0u, ct * 16u), 16u);
        out = mma_a(out, al0, bs_at(0u, ct * 16u), 16u);
        out = mma_a(out, ah1, bs_at(16u, ct * 16u), 16u);
        out = mma_a(out, al1, bs_at(16u, ct * 16u), 16u);
        out = mma_a(out, ah2, bs_at(32u, ct * 16u), 16u);
        out = mma_a(out, al2, bs_at(32u, ct * 16u), 16u);
        out = mma_a(out, ah3, bs_at(48u, ct * 16u), 16u);
        out = mma_a(out, al3, bs_at(48u, ct * 16u), 16u);
        acc_store(out, slot_at(sg));
        workgroupBarrier(); // the products are in `fs`; the block is read
    }
    out_block(d, ch, tiles, in_grid, li, KW_BLOCKS + ublocks - 1u);
}

// A becomes Gam o A, U's left operand: its 10 stored tiles, four neighbouring columns
// an invocation (the diagonal tiles' zeros above the diagonal stay zeros).
fn gam_mask_a(li: u32) {
    for (var m = 0u; m < (AL / 4u + WG_SIZE - 1u) / WG_SIZE; m++) {
        let at = (li + m * WG_SIZE) * 4u;
        if at < AL {
            let ij = a_elem(at);
            let a = h16x4(at) + h16x4(at + AL);
            put2x4(at, select(vec4(0.0), gam_row4(ij.x, ij.y) * a, cols4(ij.y) <= vec4(ij.x)));
        }
    }
}

// Block `blk`'s [C][BW] output from `fs` ([C][FS], FS = BW), four neighbouring columns
// an invocation: W's rows scaled by gam and rounded to f16 into its tiles, or U's in
// f32 (one 16-byte store where Dv is a multiple of 4, so that the four are aligned).
fn out_block(d: GdnDims, ch: u32, tiles: u32, in_grid: bool, li: u32, blk: u32) {
    for (var m = 0u; m < CHUNK * BW / (4u * WG_SIZE); m++) {
        let e = li + m * WG_SIZE;
        let i = e / (BW / 4u);
        let c = (e % (BW / 4u)) * 4u;
        let at = i * FS + c;
        let v = vec4(fs[at], fs[at + 1u], fs[at + 2u], fs[at + 3u]);
        if blk < KW_BLOCKS {
            if in_grid {
                store_tile4(tiles + W_AT + tile_at(i, blk * BW + c, TILE_DK), f16_range4(gam_sh[i] * v));
            }
        } else {
            let dv = (blk - KW_BLOCKS) * BW + c;
            let u = (ch * CHUNK + i) * d.value_dim + dv;
            if in_grid && d.value_dim % 4u == 0u && dv < d.value_dim {
                store4_u(u / 4u, bitcast<vec4<u32>>(v));
            } else if in_grid {
                for (var x = 0u; x < 4u; x++) {
                    if dv + x < d.value_dim {
                        store_u(u + x, bitcast<u32>(v[x]));
                    }
                }
            }
        }
    }
}
