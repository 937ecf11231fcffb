enable f16;
enable wgpu_cooperative_matrix;

// deltatape kernel chunk_wu_coop.f32.f32.f32.workgroup.l1r32g1t1c64
const HAS_K: bool = true;
const HAS_V: bool = true;
const HAS_MASK: bool = false;
const HAS_DECAY: bool = true;
const HAS_AMAT: bool = true;
const HAS_TILES: bool = true;
const HAS_U: bool = true;
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
const ROWS: u32 = 32u;
const GROUPS: u32 = 1u;
const RPT: u32 = 1u;
const CHUNK: u32 = 64u;
const COOP: bool = true;
const LANE_ELEMS: u32 = 8u;
const TILE16: u32 = 16u;

@group(0) @binding(1) var<storage, read> k_buf: array<f32>;
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

@group(0) @binding(2) var<storage, read> v_buf: array<f32>;
fn load1_v(i: u32) -> f32 {
    let x = v_buf[i];
    return x;
}

@group(0) @binding(3) var<storage, read> decay_buf: array<u32>;
fn load_decay(i: u32) -> u32 {
    return decay_buf[i];
}

@group(0) @binding(4) var<storage, read> amat_buf: array<f16>;
fn load1_amat(i: u32) -> f32 {
    let x = amat_buf[i];
    return f32(x);
}

@group(0) @binding(5) var<storage, read_write> tiles_buf: array<f16>;
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

@group(0) @binding(6) var<storage, read_write> u_buf: array<u32>;
fn load_u(i: u32) -> u32 {
    return u_buf[i];
}
fn store_u(i: u32, v: u32) {
    u_buf[i] = v;
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

// The first pass's split form hands the W / U pass A = A0 diag(beta) and Gam o A,
// each in two f16 parts (hi, lo), per (b, hv, chunk): parts 0, 1 (A) and 2, 3
// (Gam o A), each [CHUNK][CHUNK] as 16 x 16 tiles.
fn amat_at(ch: u32, part: u32, i: u32, j: u32) -> u32 {
    return (ch * 4u + part) * CHUNK * CHUNK + tile_at(i, j, CHUNK);
}

// x clamped to f16's finite range when it is finite and beyond it, so rounding to f16
// never makes an infinity of a finite value; infinities and NaN pass through.
fn to_f16_range(x: f32) -> f32 {
    let big = abs(x) > 65504.0 && abs(x) <= 0x1.fffffep+127f;
    return select(x, clamp(x, -65504.0, 65504.0), big);
}

// record_chunked's W and U on cooperative matrices (the first pass's split form, after
// chunk_prep_coop with `amat` bound): one workgroup of 8 subgroups of 32 per (b, hv,
// chunk, block of BW columns), each independent of every other. The first WBLOCKS
// blocks are W's key columns, the rest U's value columns; with A = A0 diag(beta) and
// Gam o A from the first pass (two f16 parts each, `amat_at`):
//   W = diag(gam) A K     (f16 tiles, `W_AT`; zero columns past Dk)
//   U = (Gam o A) V       (f32, [C][Dv])
// k and v enter in one f16 part, zero at dead steps, as in chunk_prep_coop's own
// phase 6, so both forms compute the same values. Subgroup sg makes output tile
// (sg / 2, sg % 2) over the four inner tiles, both parts of A: 8 products. Without COOP
// (`chunk_wu`, the twin) the products are lane loops over the same memory.

const SUBGROUP_WIDTH: u32 = 32u;
const BW: u32 = 32u;
const WBLOCKS: u32 = TILE_DK / BW;
// Row strides of the staged block (f16) and of the output (f32), padded as elsewhere.
const BSS: u32 = BW + 8u;
const FS: u32 = BW + 4u;

var<workgroup> bs: array<f16, CHUNK * BSS>;
var<workgroup> fs: array<f32, CHUNK * FS>;
var<workgroup> gam_sh: array<f32, CHUNK>;

// ---- Tile products: A a 16 x 16 f16 tile of `amat_buf` at a_at (row-major, stride
// 16), B one of `bs` at b_at (stride BSS), sums in f32; `acc_store` puts a subgroup's
// tile into `fs` (stride FS). ----
alias Acc = coop_mat16x16<f32, C>;

fn acc_zero() -> Acc {
    return coop_mat16x16<f32, C>();
}

fn mma(acc: Acc, lane: u32, a_at: u32, b_at: u32) -> Acc {
    let a = coopLoadT<coop_mat16x16<f16, A>>(&amat_buf[a_at], 16u);
    let b = coopLoadT<coop_mat16x16<f16, B>>(&bs[b_at], BSS);
    return coopMultiplyAdd(a, b, acc);
}

fn acc_store(acc: Acc, lane: u32, at: u32) {
    coopStoreT(acc, &fs[at], FS);
}

fn kernel_main(li: u32, wg_in: u32, unused: u32) {
    // No early return (naga then takes the products as outside uniform control flow).
    let in_grid = wg_in < params.workgroups;
    let wg = min(wg_in, params.workgroups - 1u);
    let blocks = WBLOCKS + (params.dims.value_dim + BW - 1u) / BW;
    let blk = wg % blocks;
    let chunk = chunk_at(wg / blocks, li); // wgsl/chunk_at.wgsl
    let d = chunk.d;
    let h = chunk.h;
    let ch = chunk.ch;
    let t0 = chunk.n * CHUNK;
    let sg = li / SUBGROUP_WIDTH;
    let lane = li % SUBGROUP_WIDTH;
    let is_w = blk < WBLOCKS;

    // The block of k (W) or v (U), zero at dead steps and past Dk or Dv.
    for (var e = li; e < CHUNK * BW; e += WG_SIZE) {
        let i = e / BW;
        let c = e % BW;
        let t = t0 + i;
        var live = t < d.steps;
        var x = 0.0;
        if is_w {
            let col = blk * BW + c;
            if live && col < d.key_dim {
                x = load1_k(qk_row(d, h.b, t, h.hk) + col);
            }
        } else {
            let dv = (blk - WBLOCKS) * BW + c;
            if live && dv < d.value_dim {
                x = load1_v(v_index(d, h.b, t, h.hv, dv));
            }
        }
        bs[i * BSS + c] = f16(to_f16_range(x));
    }
    if li < CHUNK {
        gam_sh[li] = bitcast<f32>(load_decay(ch * 3u * CHUNK + li));
    }
    workgroupBarrier();

    // Output tile (rt, ct) over the four inner tiles, A's two parts.
    let rt = sg / 2u;
    let ct = sg % 2u;
    let part = select(2u, 0u, is_w);
    var acc = acc_zero();
    for (var kt = 0u; kt < CHUNK / 16u; kt++) {
        let b = kt * 16u * BSS + ct * 16u;
        acc = mma(acc, lane, amat_at(ch, part, rt * 16u, kt * 16u), b);
        acc = mma(acc, lane, amat_at(ch, part + 1u, rt * 16u, kt * 16u), b);
    }
    acc_store(acc, lane, rt * 16u * FS + ct * 16u);
    workgroupBarrier();

    // Out: W's rows scaled by gam and rounded into its tiles, or U in f32.
    for (var e = li; e < CHUNK * BW; e += WG_SIZE) {
        let i = e / BW;
        let c = e % BW;
        let v = fs[i * FS + c];
        if is_w {
            if in_grid {
                let tiles = ch * TILES_PER_CHUNK;
                store1_tiles(tiles + W_AT + tile_at(i, blk * BW + c, TILE_DK), to_f16_range(gam_sh[i] * v));
            }
        } else {
            let dv = (blk - WBLOCKS) * BW + c;
            if in_grid && dv < d.value_dim {
                store_u((ch * CHUNK + i) * d.value_dim + dv, bitcast<u32>(v));
            }
        }
    }
}
