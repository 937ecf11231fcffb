enable f16;
enable wgpu_cooperative_matrix;

// deltatape kernel chunk_out_coop.f32.f32.f32.workgroup.l1r128g1t1c64
const HAS_Y: bool = true;
const HAS_TILES: bool = true;
const HAS_STARTS: bool = true;
const HAS_DELTAS16: bool = true;
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
const ROWS: u32 = 128u;
const GROUPS: u32 = 1u;
const RPT: u32 = 1u;
const CHUNK: u32 = 64u;

@group(0) @binding(1) var<storage, read_write> y_buf: array<f32>;
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

@group(0) @binding(2) var<storage, read> tiles_buf: array<f16>;
fn load1_tiles(i: u32) -> f32 {
    let x = tiles_buf[i];
    return f32(x);
}

@group(0) @binding(3) var<storage, read> starts_buf: array<f16>;
fn load1_starts(i: u32) -> f32 {
    let x = starts_buf[i];
    return f32(x);
}

@group(0) @binding(4) var<storage, read> deltas16_buf: array<f16>;
fn load1_deltas16(i: u32) -> f32 {
    let x = deltas16_buf[i];
    return f32(x);
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

// record_chunked's output on cooperative matrices (the fast path's last pass): one
// workgroup of 8 subgroups of 32 per (b, hv, chunk, block of BLOCK = ROWS value
// columns, 128 where the padded Dv allows, else 64), each independent of every other.
// With the first pass's tiles and what the walk stored:
//   y = (gam Q) S_start^T + M delta
// over the chunk's 64 steps. Subgroup sg makes y's row tiles 2 (sg % 2) and
// 2 (sg % 2) + 1 at NCOL column tiles from NCOL (sg / 2): each A tile it loads serves
// NCOL products and each B tile two, which is what bounds the pass (the tiles' traffic
// from L2), in 2 NCOL independent chains of 12. y leaves through `ys` in two rounds,
// row tiles 0 and 2, then 1 and 3 (half the block at a time: 16 KiB at 128 columns).
// Where no adapter has the matrices the same pass runs on vector units (chunk_out.wgsl).

const SUBGROUP_WIDTH: u32 = 32u;
const KT: u32 = TILE_DK / 16u;
const CT: u32 = CHUNK / 16u;
const BLOCK: u32 = ROWS;
const NCOL: u32 = BLOCK / 64u;
const HALF: u32 = CHUNK / 2u;
// (step, value pair) elements of a round's half block per invocation.
const PAIRS: u32 = HALF * BLOCK / (2u * WG_SIZE);

var<workgroup> ys: array<f32, HALF * BLOCK>;

// ---- Tile products: A a 16 x 16 f16 tile of `tiles_buf` (row-major, stride 16), B
// one of `starts_buf` or `deltas16_buf` (the same), sums in f32. ----
alias Acc = coop_mat16x16<f32, C>;
alias ATile = coop_mat16x16<f16, A>;
alias BTile = coop_mat16x16<f16, B>;

fn acc_zero() -> Acc {
    return coop_mat16x16<f32, C>();
}

fn load_a(at: u32) -> ATile {
    return coopLoadT<coop_mat16x16<f16, A>>(&tiles_buf[at], 16u);
}

fn load_start(at: u32) -> BTile {
    return coopLoadT<coop_mat16x16<f16, B>>(&starts_buf[at], 16u);
}

fn load_delta(at: u32) -> BTile {
    return coopLoadT<coop_mat16x16<f16, B>>(&deltas16_buf[at], 16u);
}

fn mma(acc: Acc, a: ATile, b: BTile) -> Acc {
    return coopMultiplyAdd(a, b, acc);
}

fn acc_store(acc: Acc, at: u32) {
    coopStoreT(acc, &ys[at], BLOCK);
}

fn kernel_main(li: u32, wg_in: u32, unused: u32) {
    // No early return (naga then takes the products as outside uniform control flow).
    let in_grid = wg_in < params.workgroups;
    let wg = min(wg_in, params.workgroups - 1u);
    let pad = padded_value_dim(params.dims.value_dim);
    let blocks = pad / BLOCK;
    let cb = wg % blocks;
    let chunk = chunk_at(wg / blocks, li); // wgsl/chunk_at.wgsl
    let ch = chunk.ch;
    let base = ch * TILES_PER_CHUNK;
    let sg = li / SUBGROUP_WIDTH;
    let rp = sg % 2u;
    let cg = sg / 2u;
    let c0 = cb * BLOCK + cg * NCOL * 16u;

    var y00 = acc_zero();
    var y01 = acc_zero();
    var y10 = acc_zero();
    var y11 = acc_zero();
    for (var kt = 0u; kt < KT; kt++) {
        let a0 = load_a(base + QG_AT + (2u * rp * KT + kt) * 256u);
        let a1 = load_a(base + QG_AT + ((2u * rp + 1u) * KT + kt) * 256u);
        let b0 = load_start(start_at(ch, pad, kt * 16u, c0));
        y00 = mma(y00, a0, b0);
        y10 = mma(y10, a1, b0);
        if NCOL == 2u {
            let b1 = load_start(start_at(ch, pad, kt * 16u, c0 + 16u));
            y01 = mma(y01, a0, b1);
            y11 = mma(y11, a1, b1);
        }
    }
    for (var ct = 0u; ct < CT; ct++) {
        let a0 = load_a(base + M_AT + (2u * rp * CT + ct) * 256u);
        let a1 = load_a(base + M_AT + ((2u * rp + 1u) * CT + ct) * 256u);
        let b0 = load_delta(delta16_at(ch, pad, ct * 16u, c0));
        y00 = mma(y00, a0, b0);
        y10 = mma(y10, a1, b0);
        if NCOL == 2u {
            let b1 = load_delta(delta16_at(ch, pad, ct * 16u, c0 + 16u));
            y01 = mma(y01, a0, b1);
            y11 = mma(y11, a1, b1);
        }
    }
    // Round j: row tiles j and 2 + j, as `ys`' rows 0-15 and 16-31.
    let at = rp * 16u * BLOCK + cg * NCOL * 16u;
    acc_store(y00, at);
    if NCOL == 2u {
        acc_store(y01, at + 16u);
    }
    workgroupBarrier();
    y_out(chunk, cb, li, in_grid, 0u);
    workgroupBarrier();
    acc_store(y10, at);
    if NCOL == 2u {
        acc_store(y11, at + 16u);
    }
    workgroupBarrier();
    y_out(chunk, cb, li, in_grid, 1u);
}

// Round j's half block out of `ys`, two neighbouring values a write (a bf16 word has
// one writer).
fn y_out(chunk: ChunkAt, cb: u32, li: u32, in_grid: bool, j: u32) {
    let d = chunk.d;
    for (var l = 0u; l < PAIRS; l++) {
        let e = 2u * (li + l * WG_SIZE);
        let q = e / BLOCK;
        let t = chunk.n * CHUNK + (q / 16u) * 32u + j * 16u + q % 16u;
        let dv = cb * BLOCK + e % BLOCK;
        if in_grid && t < d.steps && dv < d.value_dim {
            let at = v_index(d, chunk.h.b, t, chunk.h.hv, dv);
            if dv + 1u < d.value_dim {
                store2_y(at, ys[e], ys[e + 1u]);
            } else {
                // The last row of an odd Dv (never bf16: the host refuses it).
                store1_y(at, ys[e]);
            }
        }
    }
}
