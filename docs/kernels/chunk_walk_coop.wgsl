enable f16;
enable wgpu_cooperative_matrix;

// deltatape kernel chunk_walk_coop.f32.f32.f32.workgroup.l1r16g1t1c64
const HAS_STATE_IN: bool = true;
const HAS_STATE_OUT: bool = true;
const HAS_DELTA: bool = true;
const HAS_U: bool = true;
const HAS_DECAY: bool = true;
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
const ROWS: u32 = 16u;
const GROUPS: u32 = 1u;
const RPT: u32 = 1u;
const CHUNK: u32 = 64u;

@group(0) @binding(1) var<storage, read> state_in_buf: array<f32>;
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

@group(0) @binding(2) var<storage, read_write> state_out_buf: array<f32>;
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

@group(0) @binding(3) var<storage, read_write> delta_buf: array<f32>;
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

@group(0) @binding(4) var<storage, read> u_buf: array<u32>;
fn load_u(i: u32) -> u32 {
    return u_buf[i];
}

@group(0) @binding(5) var<storage, read> decay_buf: array<u32>;
fn load_decay(i: u32) -> u32 {
    return decay_buf[i];
}

@group(0) @binding(6) var<storage, read> tiles_buf: array<f16>;
fn load1_tiles(i: u32) -> f32 {
    let x = tiles_buf[i];
    return f32(x);
}

@group(0) @binding(7) var<storage, read_write> starts_buf: array<f16>;
fn load1_starts(i: u32) -> f32 {
    let x = starts_buf[i];
    return f32(x);
}
fn store1_starts(i: u32, v: f32) {
    starts_buf[i] = f16(v);
}
fn store2_starts(i: u32, a: f32, b: f32) {
    starts_buf[i] = f16(a);
    starts_buf[i + 1u] = f16(b);
}

@group(0) @binding(8) var<storage, read_write> deltas16_buf: array<f16>;
fn load1_deltas16(i: u32) -> f32 {
    let x = deltas16_buf[i];
    return f32(x);
}
fn store1_deltas16(i: u32, v: f32) {
    deltas16_buf[i] = f16(v);
}
fn store2_deltas16(i: u32, a: f32, b: f32) {
    deltas16_buf[i] = f16(a);
    deltas16_buf[i + 1u] = f16(b);
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

// record_chunked's walk on cooperative matrices (the fast path's second pass): one
// workgroup of 8 subgroups of 32 per (b, hv, block of ROWS value rows), through the
// head's chunks in order (wgsl/chunk_at.wgsl), with nothing but the state's own
// recurrence on the chain. The block's transposed state S^T [TILE_DK][ROWS] stays in
// registers as f32 accumulators: subgroup sg holds key rows 16 sg .. 16 sg + 15,
// ROWS / 16 tiles. Per chunk, with the first pass's f16 tiles (cpu.rs beside it has the
// math):
//   delta = U - W S^T                          (record's delta, the tape's)
//   S^T   = gam_C S^T + (G_end K)^T delta
// Two products and two hand-offs through workgroup memory (S^T and delta to f16: WGSL
// cannot address a matrix's elements). y is left to the output pass, which reads what
// this pass stores for it: S^T at each chunk's start and delta, as f16 tiles
// (`chunk_tiles.wgsl`'s `start_at` and `delta16_at`). Every subgroup does the same
// fixed count of cooperative ops (naga wants them in workgroup-uniform control flow);
// a subgroup's role is read only in addresses. Where no adapter has the matrices the
// same pass runs on vector units (chunk_walk.wgsl).

const SUBGROUP_WIDTH: u32 = 32u;
// Column tiles of the block, key-row tiles of a chunk's W, chunk-row tiles.
const NB: u32 = ROWS / 16u;
const KT: u32 = TILE_DK / 16u;
const CT: u32 = CHUNK / 16u;
// (step, value pair) elements of a chunk per invocation.
const PAIRS: u32 = CHUNK * ROWS / (2u * WG_SIZE);
// delta's tiles each subgroup stores for the output pass.
const D_STORES: u32 = max(1u, CT * NB / 8u);
// Row strides of the f32 and f16 blocks in workgroup memory: padded so that a tile's
// rows fall in different banks (a stride of ROWS puts every row in the same ones).
const FS: u32 = ROWS + 4u;
const HS: u32 = ROWS + 8u;
// Elements of a subgroup's rows of S^T per lane.
const OWN: u32 = 16u * ROWS / SUBGROUP_WIDTH;

// The block's S^T in f32 ([TILE_DK][ROWS]) between the state's products and its f16
// copy; in between, the two halves of W S^T over the key tiles ([2][CHUNK][ROWS]).
var<workgroup> f32s: array<f32, TILE_DK * FS>;
var<workgroup> s16: array<f16, TILE_DK * HS>;
var<workgroup> d16: array<f16, CHUNK * HS>;

// ---- Tile ops: A operands are 16 x 16 f16 tiles of `tiles_buf` (row-major,
// stride 16), B operands tiles of `s16` or `d16` (row r, column j of tiles), sums
// and the state in f32. Written inline where they multiply: the same ops behind
// helper functions took 13% longer (docs/PERFORMANCE.md). ----
alias Acc = coop_mat16x16<f32, C>;
alias ATile = coop_mat16x16<f16, A>;

fn a_tile(at: u32) -> ATile {
    return coopLoadT<coop_mat16x16<f16, A>>(&tiles_buf[at], 16u);
}

fn a_none() -> ATile {
    return coop_mat16x16<f16, A>();
}

// A subgroup's tile of `f32s` at `at` (row stride FS).
fn acc_load(at: u32) -> Acc {
    return coopLoadT<coop_mat16x16<f32, C>>(&f32s[at], FS);
}

fn s_tile(r: u32, j: u32) -> coop_mat16x16<f16, B> {
    return coopLoadT<coop_mat16x16<f16, B>>(&s16[r * 16u * HS + j * 16u], HS);
}

fn d_tile(r: u32, j: u32) -> coop_mat16x16<f16, B> {
    return coopLoadT<coop_mat16x16<f16, B>>(&d16[r * 16u * HS + j * 16u], HS);
}

// s16's tile (r, j) to `starts_buf` at `at`, row-major.
fn start_out(r: u32, j: u32, at: u32) {
    let t = coopLoadT<coop_mat16x16<f16, B>>(&s16[r * 16u * HS + j * 16u], HS);
    coopStoreT(t, &starts_buf[at], 16u);
}

// d16's tile (r, j) to `deltas16_buf` at `at`, row-major.
fn delta_out(r: u32, j: u32, at: u32) {
    let t = coopLoadT<coop_mat16x16<f16, B>>(&d16[r * 16u * HS + j * 16u], HS);
    coopStoreT(t, &deltas16_buf[at], 16u);
}

// Where W's row tile `xr` over key tiles 4 xh .. 4 xh + 3 of scratch block ch is.
fn w_at(ch: u32, xr: u32, xh: u32) -> u32 {
    return ch * TILES_PER_CHUNK + W_AT + (xr * KT + xh * 4u) * 256u;
}

// Where (G_end K)^T's row tile `r` of scratch block ch is.
fn k_at(ch: u32, r: u32) -> u32 {
    return ch * TILES_PER_CHUNK + KT_AT + r * CT * 256u;
}

// Invocation li's pairs of U's [CHUNK][ROWS] block at scratch block ch, value rows
// from v0 (zero past Dv).
fn load_u_pairs(ch: u32, v0: u32, li: u32) -> array<f32, 2u * PAIRS> {
    let d = params.dims;
    var u: array<f32, 2u * PAIRS>;
    for (var l = 0u; l < PAIRS; l++) {
        let e = 2u * (li + l * WG_SIZE);
        let dv = v0 + e % ROWS;
        let at = (ch * CHUNK + e / ROWS) * d.value_dim + dv;
        u[2u * l] = 0.0;
        u[2u * l + 1u] = 0.0;
        if dv < d.value_dim {
            u[2u * l] = bitcast<f32>(load_u(at));
        }
        if dv + 1u < d.value_dim {
            u[2u * l + 1u] = bitcast<f32>(load_u(at + 1u));
        }
    }
    return u;
}

fn kernel_main(li: u32, wg_in: u32, unused: u32) {
    // No early return (naga then takes the products as outside uniform control flow):
    // a workgroup past the grid's end (a folded grid) walks the last one's chunks and
    // writes nothing.
    let in_grid = wg_in < params.workgroups;
    let wg = min(wg_in, params.workgroups - 1u);
    let rb = wg % params.row_blocks;
    let hc = head_chunks(wg / params.row_blocks, li); // wgsl/chunk_at.wgsl
    let d = hc.d;
    let h = hc.h;
    let v0 = rb * ROWS;
    let sg = li / SUBGROUP_WIDTH;
    let lane = li % SUBGROUP_WIDTH;
    // W S^T: row tile xr of the chunk over key tiles 4 xh .. 4 xh + 3.
    let xr = sg % CT;
    let xh = sg / CT;
    let pad = padded_value_dim(d.value_dim);

    // S^T[c][v] = S[v0 + v][c], zero past Dk and Dv (so it stays zero there).
    for (var e = li; e < TILE_DK * ROWS; e += WG_SIZE) {
        let v = e / TILE_DK;
        let c = e % TILE_DK;
        var x = 0.0;
        if v0 + v < d.value_dim && c < d.key_dim {
            x = load1_state_in(state_row(d, h.b, h.hv, v0 + v) + c);
        }
        f32s[c * FS + v] = x;
        s16[c * HS + v] = f16(to_f16_range(x));
    }
    workgroupBarrier();
    let own = sg * 16u * FS;
    let own16 = sg * 16u * HS;
    var s0 = acc_load(own);
    // Tiles past the block's NB alias the first ones and are never used.
    var s1 = acc_load(own + 16u % ROWS);
    var s2 = acc_load(own + 32u % ROWS);
    var s3 = acc_load(own + 48u % ROWS);
    workgroupBarrier();

    // The A operands of a chunk's products: W's row tile xr over this subgroup's half
    // of the key tiles, and (G_end K)^T's row tile sg; and this invocation's U. The
    // next chunk's are all loaded in one phase, after this one's state update (the
    // last use of each), and are in flight through the f16 copy of the state (3% faster
    // on an H100 than three phases with loads: docs/PERFORMANCE.md). (None at T = 0,
    // where the scratch is empty.)
    var w0 = a_none();
    var w1 = a_none();
    var w2 = a_none();
    var w3 = a_none();
    var k0 = a_none();
    var k1 = a_none();
    var k2 = a_none();
    var k3 = a_none();
    var u: array<f32, 2u * PAIRS>;
    if hc.count > 0u {
        w0 = a_tile(w_at(hc.first, xr, xh));
        w1 = a_tile(w_at(hc.first, xr, xh) + 256u);
        w2 = a_tile(w_at(hc.first, xr, xh) + 512u);
        w3 = a_tile(w_at(hc.first, xr, xh) + 768u);
        k0 = a_tile(k_at(hc.first, sg));
        k1 = a_tile(k_at(hc.first, sg) + 256u);
        k2 = a_tile(k_at(hc.first, sg) + 512u);
        k3 = a_tile(k_at(hc.first, sg) + 768u);
        u = load_u_pairs(hc.first, v0, li);
    }

    for (var n = 0u; n < hc.count; n++) {
        let ch = hc.first + n;
        let t0 = n * CHUNK;
        let last = bitcast<f32>(load_decay(ch * 3u * CHUNK + 2u * CHUNK));
        // The next chunk's block (this one's again after the last: loaded, never used).
        let next = hc.first + min(n + 1u, hc.count - 1u);

        // The state at the chunk's start, for the output pass (s16 holds it).
        for (var j = 0u; j < NB; j++) {
            start_out(sg, j, start_at(ch, pad, sg * 16u, v0 + j * 16u));
        }

        // Half of W S^T over the key tiles: [xh][xr tile rows][ROWS].
        let x_at = (xh * CHUNK + xr * 16u) * FS;
        for (var j = 0u; j < NB; j++) {
            var x = coop_mat16x16<f32, C>();
            x = coopMultiplyAdd(w0, s_tile(xh * 4u, j), x);
            x = coopMultiplyAdd(w1, s_tile(xh * 4u + 1u, j), x);
            x = coopMultiplyAdd(w2, s_tile(xh * 4u + 2u, j), x);
            x = coopMultiplyAdd(w3, s_tile(xh * 4u + 3u, j), x);
            coopStoreT(x, &f32s[x_at + j * 16u], FS);
        }
        workgroupBarrier();

        // delta = U - W S^T: the tape's, and in f16 for the products.
        for (var l = 0u; l < PAIRS; l++) {
            let e = 2u * (li + l * WG_SIZE);
            let x = e / ROWS * FS + e % ROWS;
            let da = u[2u * l] - f32s[x] - f32s[CHUNK * FS + x];
            let db = u[2u * l + 1u] - f32s[x + 1u] - f32s[CHUNK * FS + x + 1u];
            let y = e / ROWS * HS + e % ROWS;
            d16[y] = f16(to_f16_range(da));
            d16[y + 1u] = f16(to_f16_range(db));
            let t = t0 + e / ROWS;
            let dv = v0 + e % ROWS;
            if in_grid && t < d.steps && dv < d.value_dim {
                let at = v_index(d, h.b, t, h.hv, dv);
                if dv + 1u < d.value_dim {
                    store2_delta(at, da, db);
                } else {
                    // The last row of an odd Dv (never bf16: the host refuses it).
                    store1_delta(at, da);
                }
            }
        }
        workgroupBarrier();

        // delta's f16 tiles for the output pass, CT * NB of them over the 8 subgroups
        // (at NB = 1 subgroups 4 to 7 store the same values as 0 to 3 again).
        for (var l = 0u; l < D_STORES; l++) {
            let i = sg + 8u * l;
            let j = min(i / CT, NB - 1u);
            delta_out(i % CT, j, delta16_at(ch, pad, (i % CT) * 16u, v0 + j * 16u));
        }

        // The state through the chunk: this subgroup's key-row tile of S^T.
        s0 = last * s0;
        s0 = coopMultiplyAdd(k0, d_tile(0u, 0u), s0);
        s0 = coopMultiplyAdd(k1, d_tile(1u, 0u), s0);
        s0 = coopMultiplyAdd(k2, d_tile(2u, 0u), s0);
        s0 = coopMultiplyAdd(k3, d_tile(3u, 0u), s0);
        coopStoreT(s0, &f32s[own], FS);
        if NB > 1u {
            s1 = last * s1;
            s1 = coopMultiplyAdd(k0, d_tile(0u, 1u), s1);
            s1 = coopMultiplyAdd(k1, d_tile(1u, 1u), s1);
            s1 = coopMultiplyAdd(k2, d_tile(2u, 1u), s1);
            s1 = coopMultiplyAdd(k3, d_tile(3u, 1u), s1);
            coopStoreT(s1, &f32s[own + 16u % ROWS], FS);
        }
        if NB > 2u {
            s2 = last * s2;
            s2 = coopMultiplyAdd(k0, d_tile(0u, 2u), s2);
            s2 = coopMultiplyAdd(k1, d_tile(1u, 2u), s2);
            s2 = coopMultiplyAdd(k2, d_tile(2u, 2u), s2);
            s2 = coopMultiplyAdd(k3, d_tile(3u, 2u), s2);
            coopStoreT(s2, &f32s[own + 32u % ROWS], FS);
            s3 = last * s3;
            s3 = coopMultiplyAdd(k0, d_tile(0u, 3u), s3);
            s3 = coopMultiplyAdd(k1, d_tile(1u, 3u), s3);
            s3 = coopMultiplyAdd(k2, d_tile(2u, 3u), s3);
            s3 = coopMultiplyAdd(k3, d_tile(3u, 3u), s3);
            coopStoreT(s3, &f32s[own + 48u % ROWS], FS);
        }
        k0 = a_tile(k_at(next, sg));
        k1 = a_tile(k_at(next, sg) + 256u);
        k2 = a_tile(k_at(next, sg) + 512u);
        k3 = a_tile(k_at(next, sg) + 768u);
        w0 = a_tile(w_at(next, xr, xh));
        w1 = a_tile(w_at(next, xr, xh) + 256u);
        w2 = a_tile(w_at(next, xr, xh) + 512u);
        w3 = a_tile(w_at(next, xr, xh) + 768u);
        u = load_u_pairs(next, v0, li);
        workgroupBarrier();

        // S^T in f16 for the next chunk's products: each subgroup its own rows.
        for (var l = 0u; l < OWN; l++) {
            let e = lane + l * SUBGROUP_WIDTH;
            let r = sg * 16u + e / ROWS;
            s16[r * HS + e % ROWS] = f16(to_f16_range(f32s[r * FS + e % ROWS]));
        }
        workgroupBarrier();
    }

    // f32s holds the final S^T (the last chunk's stores, behind the last barrier).
    for (var e = li; e < ROWS * TILE_DK / 4u; e += WG_SIZE) {
        let v = e / (TILE_DK / 4u);
        let c = (e % (TILE_DK / 4u)) * 4u;
        if in_grid && !hc.skipped && v0 + v < d.value_dim && c < d.key_dim {
            let x = vec4<f32>(
                f32s[c * FS + v],
                f32s[(c + 1u) * FS + v],
                f32s[(c + 2u) * FS + v],
                f32s[(c + 3u) * FS + v],
            );
            store_state_out(state_row(d, h.b, h.hv, v0 + v), c, d.key_dim, x);
        }
    }
}
