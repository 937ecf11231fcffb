enable f16;

// deltatape kernel chunk_walk.f32.f32.f32.workgroup.l1r32g1t1c64
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
const ROWS: u32 = 32u;
const GROUPS: u32 = 1u;
const RPT: u32 = 1u;
const CHUNK: u32 = 64u;
const XR: u32 = 4u;
const PART_KEY_OCTETS: u32 = 8u;
const HALF_KEY_OCTETS: u32 = 4u;
const PART_STEP_OCTETS: u32 = 4u;

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

@group(0) @binding(6) var<storage, read> tiles_buf: array<vec4<u32>>;
fn load_tiles(i: u32) -> u32 {
    return tiles_buf[i >> 2u][i & 3u];
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

// record_chunked's walk on vector units (the fast path's second pass where no adapter
// has cooperative matrices): the same work, memory and math as chunk_walk_coop.wgsl
// (cpu_fast.rs has it), one workgroup of 256 invocations per (b, hv, block of ROWS
// value rows), through the head's chunks in order. Per chunk, with the first pass's
// f16 tiles and s16 the state rounded to f16:
//   delta = U - W s16^T                         (record's delta, the tape's)
//   S^T   = gam_C S^T + (G_end K)^T f16(delta)
// Each product is register-tiled: an invocation keeps a small block of outputs and
// reads each operand once for all of them, the tiles eight f16 at a time. The tiles
// come through `stage` a quarter of the chunk's at a time (`part_at`: W's two halves of
// key columns, then (G_end K)^T's two halves of steps), each copied by the whole
// workgroup in coalesced 16-byte words (`tiles_buf` is bound as vec4<u32> words) while
// the part before it is in the products: a word is loaded once, not by each of the
// eight invocations that read it, and its latency is hidden behind a part's sums.
//   - W s16^T: invocation li makes steps t2 = 2 (li / 8) and t2 + 1 at value rows xv =
//     XR (li % 8) .. + XR - 1 (XR = ROWS / 8, adjacent, so a bf16 word of the tape's
//     delta has one writer), from `sw` (s16, a value row's keys contiguous). With
//     subgroup operations (SUBGROUP) invocations li and li ^ 1 make one block of four
//     steps t4 .. t4 + 3 by XR rows instead, each over every other key octet (half the
//     loads a multiply-add), then add their halves by a shuffle: li keeps steps
//     t2 = t4 + 2 (li % 2) and t2 + 1.
//   - The state: invocation li holds S^T at keys 4 (li / 8) .. + 3 and value rows
//     li % 8 + 8 j (j < XR) in registers, in f32, for the whole walk; delta reaches it
//     through `dw` (f16(delta), a value row's steps contiguous).
// `sw` and `dw` hold f16 (the values are f16 already), eight to a 16-byte word like the
// tiles: the products are bound by their loads from workgroup memory more than by the
// conversions (docs/PERFORMANCE.md), so every operand is read eight values a load.
// `stage` holds two parts (part p in half p % 2), so the walk needs one barrier a part,
// after its copy: every invocation reaches part p's only when done with part p - 1,
// whose half part p + 1's copy takes after it; it has written f16(delta) into `dw`
// before part 2's (the state's product reads it after) and the new s16 into `sw`
// before the next chunk's part 0's (W's product reads it after).

// Words (eight f16) a row of `dw`: one past the row, so that the eight rows a quarter
// of a subgroup reads at one column (li % 8 + 8 j) fall in different banks.
const DW: u32 = CHUNK / 8u + 1u;
var<workgroup> dw: array<vec4<u32>, ROWS * DW>;
// `sw`'s rows are read XR apart (xv + j), so a row starts SW_SKEW words later every XR
// rows (`sw_row`): the rows (and, with SUBGROUP, the pairs' two key octets) a quarter
// of a subgroup reads fall in different banks too.
const SW_SKEW: u32 = 1u;
var<workgroup> sw: array<vec4<u32>, ROWS * TILE_DK / 8u + 16u>;

// Where `sw`'s value row v starts, in words.
fn sw_row(v: u32) -> u32 {
    return v * (TILE_DK / 8u) + SW_SKEW * (v / XR);
}
// A quarter of a chunk's tile operands (half of W, or of (G_end K)^T): 4096 f16 as words
// of eight.
const STAGE_WORDS: u32 = CHUNK * TILE_DK / 16u;
var<workgroup> stage: array<vec4<u32>, 2u * STAGE_WORDS>;

// Where word w (of STAGE_WORDS) of part `part` of the chunk whose tiles start at `tiles`
// is in `tiles_buf` (in words). Parts 0 and 1: W's key columns 64 part .. + 63 (4 tile
// columns); parts 2 and 3: (G_end K)^T's steps 32 (part - 2) .. + 31 (2 tile columns).
// In `stage` a part is a matrix 64 (or 32) wide as tiles (chunk_tiles' block_word).
fn part_at(tiles: u32, part: u32, w: u32) -> u32 {
    var at = tiles + W_AT + block_word(0u, 4u * part, 4u, TILE_DK, w);
    if part >= 2u {
        at = tiles + KT_AT + block_word(0u, 2u * (part - 2u), 2u, CHUNK, w);
    }
    return at / 8u;
}

// Invocation li's two words of part `part`.
fn part_load(tiles: u32, part: u32, li: u32) -> array<vec4<u32>, 2> {
    return array<vec4<u32>, 2>(
        tiles_buf[part_at(tiles, part, li)],
        tiles_buf[part_at(tiles, part, li + WG_SIZE)],
    );
}

// Into part `part`'s half of `stage`.
fn part_store(li: u32, part: u32, x: array<vec4<u32>, 2>) {
    let b = (part % 2u) * STAGE_WORDS;
    stage[b + li] = x[0];
    stage[b + li + WG_SIZE] = x[1];
}

// W's keys c .. c + 7 (c a multiple of 8, within part c / 64) at step t, from its half
// of `stage`.
fn w_at(t: u32, c: u32) -> u32 {
    return ((c / 64u) % 2u) * STAGE_WORDS + tile_at(t, c % 64u, 64u) / 8u;
}

// (G_end K)^T's steps t .. t + 7 (t a multiple of 8, within part 2 + t / 32) at key k,
// from its half of `stage`.
fn kt_at(k: u32, t: u32) -> u32 {
    return (t / 32u) * STAGE_WORDS + tile_at(k, t % 32u, 32u) / 8u;
}

// x as the products read it: rounded to f16 (within its range).
fn f16r(x: vec4<f32>) -> vec4<f16> {
    let r = vec4(to_f16_range(x.x), to_f16_range(x.y), to_f16_range(x.z), to_f16_range(x.w));
    return vec4<f16>(r);
}

// s16 at value row v (of the block), keys c4 .. c4 + 3 (c4 a multiple of 4): half of
// one of `sw`'s words.
fn sw_set(v: u32, c4: u32, x: vec4<f16>) {
    let at = sw_row(v) + c4 / 8u;
    let h = (c4 / 4u) % 2u;
    sw[at][2u * h] = pack2x16float(vec2<f32>(x.xy));
    sw[at][2u * h + 1u] = pack2x16float(vec2<f32>(x.zw));
}

fn sw_get(v: u32, c4: u32) -> vec4<f16> {
    let at = sw_row(v) + c4 / 8u;
    let h = (c4 / 4u) % 2u;
    return vec4<f16>(vec4(unpack2x16float(sw[at][2u * h]), unpack2x16float(sw[at][2u * h + 1u])));
}

// Element c of a state row from `row`, zero past Dk.
fn state_in(row: u32, c: u32, dk: u32) -> f32 {
    if c < dk {
        return load1_state_in(row + c);
    }
    return 0.0;
}

// The tape's delta at step t, value rows dv (even) and dv + 1: a and b, where they
// exist.
fn tape_pair(d: GdnDims, h: Head, t: u32, dv: u32, a: f32, b: f32) {
    if t < d.steps && dv < d.value_dim {
        let at = v_index(d, h.b, t, h.hv, dv);
        if dv + 1u < d.value_dim {
            store2_delta(at, a, b);
        } else {
            // The last row of an odd Dv (never bf16: the host refuses it).
            store1_delta(at, a);
        }
    }
}

fn kernel_main(li: u32, wg_in: u32, unused: u32) {
    // A workgroup past the grid's end (a folded grid) walks the last one's chunks and
    // writes nothing (its barriers stay in uniform control flow).
    let in_grid = wg_in < params.workgroups;
    let wg = min(wg_in, params.workgroups - 1u);
    let rb = wg % params.row_blocks;
    let hc = head_chunks(wg / params.row_blocks, li); // wgsl/chunk_at.wgsl
    let d = hc.d;
    let h = hc.h;
    let v0 = rb * ROWS;
    let pad = padded_value_dim(d.value_dim);
    // The W product's block: steps t2, t2 + 1 at rows xv .. xv + XR - 1 (with SUBGROUP
    // the pair's t4 .. t4 + 3, over the key octets of parity hk).
    let t2 = 2u * (li / 8u);
    let xv = XR * (li % 8u);
    // The state's block: keys c4 .. c4 + 3 at rows sv + 8 j.
    let c4 = 4u * (li / 8u);
    let sv = li % 8u;

    // S^T in registers (zero past Dk and Dv, so it stays zero there), s16 in `sw`.
    var s: array<vec4<f32>, XR>;
    {
        let j = 0u;
        let v = sv + 8u * j;
        var x = vec4<f32>(0.0);
        if v0 + v < d.value_dim {
            let row = state_row(d, h.b, h.hv, v0 + v);
            x = vec4<f32>(
                state_in(row, c4, d.key_dim),
                state_in(row, c4 + 1u, d.key_dim),
                state_in(row, c4 + 2u, d.key_dim),
                state_in(row, c4 + 3u, d.key_dim),
            );
        }
        s[j] = x;
        sw_set(v, c4, f16r(x));
    }
    {
        let j = 1u;
        let v = sv + 8u * j;
        var x = vec4<f32>(0.0);
        if v0 + v < d.value_dim {
            let row = state_row(d, h.b, h.hv, v0 + v);
            x = vec4<f32>(
                state_in(row, c4, d.key_dim),
                state_in(row, c4 + 1u, d.key_dim),
                state_in(row, c4 + 2u, d.key_dim),
                state_in(row, c4 + 3u, d.key_dim),
            );
        }
        s[j] = x;
        sw_set(v, c4, f16r(x));
    }
    {
        let j = 2u;
        let v = sv + 8u * j;
        var x = vec4<f32>(0.0);
        if v0 + v < d.value_dim {
            let row = state_row(d, h.b, h.hv, v0 + v);
            x = vec4<f32>(
                state_in(row, c4, d.key_dim),
                state_in(row, c4 + 1u, d.key_dim),
                state_in(row, c4 + 2u, d.key_dim),
                state_in(row, c4 + 3u, d.key_dim),
            );
        }
        s[j] = x;
        sw_set(v, c4, f16r(x));
    }
    {
        let j = 3u;
        let v = sv + 8u * j;
        var x = vec4<f32>(0.0);
        if v0 + v < d.value_dim {
            let row = state_row(d, h.b, h.hv, v0 + v);
            x = vec4<f32>(
                state_in(row, c4, d.key_dim),
                state_in(row, c4 + 1u, d.key_dim),
                state_in(row, c4 + 2u, d.key_dim),
                state_in(row, c4 + 3u, d.key_dim),
            );
        }
        s[j] = x;
        sw_set(v, c4, f16r(x));
    }
    // The first chunk's first part in flight.
    var pre = array<vec4<u32>, 2>(vec4(0u), vec4(0u));
    if hc.count > 0u {
        pre = part_load(hc.first * TILES_PER_CHUNK, 0u, li);
    }
    workgroupBarrier();

    for (var n = 0u; n < hc.count; n++) {
        let ch = hc.first + n;
        let tiles = ch * TILES_PER_CHUNK;

        // The state at the chunk's start, for the output pass.
        {
            let j = 0u;
            let v = v0 + sv + 8u * j;
            let x = sw_get(sv + 8u * j, c4);
            starts_buf[start_at(ch, pad, c4, v)] = x.x;
            starts_buf[start_at(ch, pad, c4 + 1u, v)] = x.y;
            starts_buf[start_at(ch, pad, c4 + 2u, v)] = x.z;
            starts_buf[start_at(ch, pad, c4 + 3u, v)] = x.w;
        }
        {
            let j = 1u;
            let v = v0 + sv + 8u * j;
            let x = sw_get(sv + 8u * j, c4);
            starts_buf[start_at(ch, pad, c4, v)] = x.x;
            starts_buf[start_at(ch, pad, c4 + 1u, v)] = x.y;
            starts_buf[start_at(ch, pad, c4 + 2u, v)] = x.z;
            starts_buf[start_at(ch, pad, c4 + 3u, v)] = x.w;
        }
        {
            let j = 2u;
            let v = v0 + sv + 8u * j;
            let x = sw_get(sv + 8u * j, c4);
            starts_buf[start_at(ch, pad, c4, v)] = x.x;
            starts_buf[start_at(ch, pad, c4 + 1u, v)] = x.y;
            starts_buf[start_at(ch, pad, c4 + 2u, v)] = x.z;
            starts_buf[start_at(ch, pad, c4 + 3u, v)] = x.w;
        }
        {
            let j = 3u;
            let v = v0 + sv + 8u * j;
            let x = sw_get(sv + 8u * j, c4);
            starts_buf[start_at(ch, pad, c4, v)] = x.x;
            starts_buf[start_at(ch, pad, c4 + 1u, v)] = x.y;
            starts_buf[start_at(ch, pad, c4 + 2u, v)] = x.z;
            starts_buf[start_at(ch, pad, c4 + 3u, v)] = x.w;
        }

        // W s16^T over the keys, eight at a time, in W's two parts. U and the chunk's
        // decay in flight through them.
        var x0: array<f32, XR>;
        var x1: array<f32, XR>;
        var u0: array<f32, XR>;
        var u1: array<f32, XR>;
        var last = 0.0;
        for (var part = 0u; part < 2u; part++) {
            part_store(li, part, pre);
            workgroupBarrier(); // the part is staged
            pre = part_load(tiles, part + 1u, li);
            if part == 0u {
                last = bitcast<f32>(load_decay(ch * 3u * CHUNK + 2u * CHUNK));
                {
                    let j = 0u;
                    let dv = v0 + xv + j;
                    if dv < d.value_dim {
                        u0[j] = bitcast<f32>(load_u((ch * CHUNK + t2) * d.value_dim + dv));
                        u1[j] = bitcast<f32>(load_u((ch * CHUNK + t2 + 1u) * d.value_dim + dv));
                    }
                }
                {
                    let j = 1u;
                    let dv = v0 + xv + j;
                    if dv < d.value_dim {
                        u0[j] = bitcast<f32>(load_u((ch * CHUNK + t2) * d.value_dim + dv));
                        u1[j] = bitcast<f32>(load_u((ch * CHUNK + t2 + 1u) * d.value_dim + dv));
                    }
                }
                {
                    let j = 2u;
                    let dv = v0 + xv + j;
                    if dv < d.value_dim {
                        u0[j] = bitcast<f32>(load_u((ch * CHUNK + t2) * d.value_dim + dv));
                        u1[j] = bitcast<f32>(load_u((ch * CHUNK + t2 + 1u) * d.value_dim + dv));
                    }
                }
                {
                    let j = 3u;
                    let dv = v0 + xv + j;
                    if dv < d.value_dim {
                        u0[j] = bitcast<f32>(load_u((ch * CHUNK + t2) * d.value_dim + dv));
                        u1[j] = bitcast<f32>(load_u((ch * CHUNK + t2 + 1u) * d.value_dim + dv));
                    }
                }
            }
            {
                let co = 0u;
                let c = 64u * part + 8u * co;
                let w0 = f16x8(stage[w_at(t2, c)]);
                let w1 = f16x8(stage[w_at(t2 + 1u, c)]);
                {
                    let j = 0u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 1u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 2u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 3u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
            }
            {
                let co = 1u;
                let c = 64u * part + 8u * co;
                let w0 = f16x8(stage[w_at(t2, c)]);
                let w1 = f16x8(stage[w_at(t2 + 1u, c)]);
                {
                    let j = 0u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 1u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 2u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 3u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
            }
            {
                let co = 2u;
                let c = 64u * part + 8u * co;
                let w0 = f16x8(stage[w_at(t2, c)]);
                let w1 = f16x8(stage[w_at(t2 + 1u, c)]);
                {
                    let j = 0u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 1u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 2u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 3u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
            }
            {
                let co = 3u;
                let c = 64u * part + 8u * co;
                let w0 = f16x8(stage[w_at(t2, c)]);
                let w1 = f16x8(stage[w_at(t2 + 1u, c)]);
                {
                    let j = 0u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 1u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 2u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 3u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
            }
            {
                let co = 4u;
                let c = 64u * part + 8u * co;
                let w0 = f16x8(stage[w_at(t2, c)]);
                let w1 = f16x8(stage[w_at(t2 + 1u, c)]);
                {
                    let j = 0u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 1u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 2u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 3u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
            }
            {
                let co = 5u;
                let c = 64u * part + 8u * co;
                let w0 = f16x8(stage[w_at(t2, c)]);
                let w1 = f16x8(stage[w_at(t2 + 1u, c)]);
                {
                    let j = 0u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 1u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 2u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 3u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
            }
            {
                let co = 6u;
                let c = 64u * part + 8u * co;
                let w0 = f16x8(stage[w_at(t2, c)]);
                let w1 = f16x8(stage[w_at(t2 + 1u, c)]);
                {
                    let j = 0u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 1u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 2u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 3u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
            }
            {
                let co = 7u;
                let c = 64u * part + 8u * co;
                let w0 = f16x8(stage[w_at(t2, c)]);
                let w1 = f16x8(stage[w_at(t2 + 1u, c)]);
                {
                    let j = 0u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 1u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 2u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
                {
                    let j = 3u;
                    let s8 = f16x8(sw[sw_row(xv + j) + c / 8u]);
                    x0[j] += dot(w0[0], s8[0]) + dot(w0[1], s8[1]);
                    x1[j] += dot(w1[0], s8[0]) + dot(w1[1], s8[1]);
                }
            }
        }

        // delta = U - W s16^T: the tape's, and f16(delta) for the state's product and
        // the output pass.
        {
            let j = 0u;
            let v = xv + j;
            let dv = v0 + v;
            var da = 0.0;
            var db = 0.0;
            if dv < d.value_dim {
                da = u0[j] - x0[j];
                db = u1[j] - x1[j];
            }
            let r = f16r(vec4<f32>(da, db, 0.0, 0.0));
            dw[v * DW + t2 / 8u][(t2 % 8u) / 2u] = pack2x16float(vec2<f32>(r.xy));
            deltas16_buf[delta16_at(ch, pad, t2, dv)] = r.x;
            deltas16_buf[delta16_at(ch, pad, t2 + 1u, dv)] = r.y;
            x0[j] = da;
            x1[j] = db;
        }
        {
            let j = 1u;
            let v = xv + j;
            let dv = v0 + v;
            var da = 0.0;
            var db = 0.0;
            if dv < d.value_dim {
                da = u0[j] - x0[j];
                db = u1[j] - x1[j];
            }
            let r = f16r(vec4<f32>(da, db, 0.0, 0.0));
            dw[v * DW + t2 / 8u][(t2 % 8u) / 2u] = pack2x16float(vec2<f32>(r.xy));
            deltas16_buf[delta16_at(ch, pad, t2, dv)] = r.x;
            deltas16_buf[delta16_at(ch, pad, t2 + 1u, dv)] = r.y;
            x0[j] = da;
            x1[j] = db;
        }
        {
            let j = 2u;
            let v = xv + j;
            let dv = v0 + v;
            var da = 0.0;
            var db = 0.0;
            if dv < d.value_dim {
                da = u0[j] - x0[j];
                db = u1[j] - x1[j];
            }
            let r = f16r(vec4<f32>(da, db, 0.0, 0.0));
            dw[v * DW + t2 / 8u][(t2 % 8u) / 2u] = pack2x16float(vec2<f32>(r.xy));
            deltas16_buf[delta16_at(ch, pad, t2, dv)] = r.x;
            deltas16_buf[delta16_at(ch, pad, t2 + 1u, dv)] = r.y;
            x0[j] = da;
            x1[j] = db;
        }
        {
            let j = 3u;
            let v = xv + j;
            let dv = v0 + v;
            var da = 0.0;
            var db = 0.0;
            if dv < d.value_dim {
                da = u0[j] - x0[j];
                db = u1[j] - x1[j];
            }
            let r = f16r(vec4<f32>(da, db, 0.0, 0.0));
            dw[v * DW + t2 / 8u][(t2 % 8u) / 2u] = pack2x16float(vec2<f32>(r.xy));
            deltas16_buf[delta16_at(ch, pad, t2, dv)] = r.x;
            deltas16_buf[delta16_at(ch, pad, t2 + 1u, dv)] = r.y;
            x0[j] = da;
            x1[j] = db;
        }
        // The tape's delta, two value rows a store (a bf16 word whole).
        {
            let j = 0u;
            if in_grid && j % 2u == 1u {
                let e = j & ~1u;
                let t = n * CHUNK + t2;
                tape_pair(d, h, t, v0 + xv + e, x0[e], x0[j]);
                tape_pair(d, h, t + 1u, v0 + xv + e, x1[e], x1[j]);
            }
        }
        {
            let j = 1u;
            if in_grid && j % 2u == 1u {
                let e = j & ~1u;
                let t = n * CHUNK + t2;
                tape_pair(d, h, t, v0 + xv + e, x0[e], x0[j]);
                tape_pair(d, h, t + 1u, v0 + xv + e, x1[e], x1[j]);
            }
        }
        {
            let j = 2u;
            if in_grid && j % 2u == 1u {
                let e = j & ~1u;
                let t = n * CHUNK + t2;
                tape_pair(d, h, t, v0 + xv + e, x0[e], x0[j]);
                tape_pair(d, h, t + 1u, v0 + xv + e, x1[e], x1[j]);
            }
        }
        {
            let j = 3u;
            if in_grid && j % 2u == 1u {
                let e = j & ~1u;
                let t = n * CHUNK + t2;
                tape_pair(d, h, t, v0 + xv + e, x0[e], x0[j]);
                tape_pair(d, h, t + 1u, v0 + xv + e, x1[e], x1[j]);
            }
        }

        // The state through the chunk: S^T = gam_C S^T + (G_end K)^T f16(delta), the
        // steps eight at a time, in (G_end K)^T's two parts; the next chunk's first
        // part in flight through the last.
        {
            let j = 0u;
            s[j] = last * s[j];
        }
        {
            let j = 1u;
            s[j] = last * s[j];
        }
        {
            let j = 2u;
            s[j] = last * s[j];
        }
        {
            let j = 3u;
            s[j] = last * s[j];
        }
        for (var part = 2u; part < 4u; part++) {
            part_store(li, part, pre);
            workgroupBarrier(); // the part is staged
            if part == 2u {
                pre = part_load(tiles, 3u, li);
            } else if n + 1u < hc.count {
                pre = part_load(tiles + TILES_PER_CHUNK, 0u, li);
            }
            {
                let to = 0u;
                let t = 32u * (part - 2u) + 8u * to;
                let k0 = f16x8(stage[kt_at(c4, t)]);
                let k1 = f16x8(stage[kt_at(c4 + 1u, t)]);
                let k2 = f16x8(stage[kt_at(c4 + 2u, t)]);
                let k3 = f16x8(stage[kt_at(c4 + 3u, t)]);
                {
                    let j = 0u;
                    let v = sv + 8u * j;
                    let d8 = f16x8(dw[v * DW + t / 8u]);
                    s[j] += vec4<f32>(
                        dot(k0[0], d8[0]) + dot(k0[1], d8[1]),
                        dot(k1[0], d8[0]) + dot(k1[1], d8[1]),
                        dot(k2[0], d8[0]) + dot(k2[1], d8[1]),
                        dot(k3[0], d8[0]) + dot(k3[1], d8[1]),
                    );
                }
                {
                    let j = 1u;
                    let v = sv + 8u * j;
                    let d8 = f16x8(dw[v * DW + t / 8u]);
                    s[j] += vec4<f32>(
                        dot(k0[0], d8[0]) + dot(k0[1], d8[1]),
                        dot(k1[0], d8[0]) + dot(k1[1], d8[1]),
                        dot(k2[0], d8[0]) + dot(k2[1], d8[1]),
                        dot(k3[0], d8[0]) + dot(k3[1], d8[1]),
                    );
                }
                {
                    let j = 2u;
                    let v = sv + 8u * j;
                    let d8 = f16x8(dw[v * DW + t / 8u]);
                    s[j] += vec4<f32>(
                        dot(k0[0], d8[0]) + dot(k0[1], d8[1]),
                        dot(k1[0], d8[0]) + dot(k1[1], d8[1]),
                        dot(k2[0], d8[0]) + dot(k2[1], d8[1]),
                        dot(k3[0], d8[0]) + dot(k3[1], d8[1]),
                    );
                }
                {
                    let j = 3u;
                    let v = sv + 8u * j;
                    let d8 = f16x8(dw[v * DW + t / 8u]);
                    s[j] += vec4<f32>(
                        dot(k0[0], d8[0]) + dot(k0[1], d8[1]),
                        dot(k1[0], d8[0]) + dot(k1[1], d8[1]),
                        dot(k2[0], d8[0]) + dot(k2[1], d8[1]),
                        dot(k3[0], d8[0]) + dot(k3[1], d8[1]),
                    );
                }
            }
            {
                let to = 1u;
                let t = 32u * (part - 2u) + 8u * to;
                let k0 = f16x8(stage[kt_at(c4, t)]);
                let k1 = f16x8(stage[kt_at(c4 + 1u, t)]);
                let k2 = f16x8(stage[kt_at(c4 + 2u, t)]);
                let k3 = f16x8(stage[kt_at(c4 + 3u, t)]);
                {
                    let j = 0u;
                    let v = sv + 8u * j;
                    let d8 = f16x8(dw[v * DW + t / 8u]);
                    s[j] += vec4<f32>(
                        dot(k0[0], d8[0]) + dot(k0[1], d8[1]),
                        dot(k1[0], d8[0]) + dot(k1[1], d8[1]),
                        dot(k2[0], d8[0]) + dot(k2[1], d8[1]),
                        dot(k3[0], d8[0]) + dot(k3[1], d8[1]),
                    );
                }
                {
                    let j = 1u;
                    let v = sv + 8u * j;
                    let d8 = f16x8(dw[v * DW + t / 8u]);
                    s[j] += vec4<f32>(
                        dot(k0[0], d8[0]) + dot(k0[1], d8[1]),
                        dot(k1[0], d8[0]) + dot(k1[1], d8[1]),
                        dot(k2[0], d8[0]) + dot(k2[1], d8[1]),
                        dot(k3[0], d8[0]) + dot(k3[1], d8[1]),
                    );
                }
                {
                    let j = 2u;
                    let v = sv + 8u * j;
                    let d8 = f16x8(dw[v * DW + t / 8u]);
                    s[j] += vec4<f32>(
                        dot(k0[0], d8[0]) + dot(k0[1], d8[1]),
                        dot(k1[0], d8[0]) + dot(k1[1], d8[1]),
                        dot(k2[0], d8[0]) + dot(k2[1], d8[1]),
                        dot(k3[0], d8[0]) + dot(k3[1], d8[1]),
                    );
                }
                {
                    let j = 3u;
                    let v = sv + 8u * j;
                    let d8 = f16x8(dw[v * DW + t / 8u]);
                    s[j] += vec4<f32>(
                        dot(k0[0], d8[0]) + dot(k0[1], d8[1]),
                        dot(k1[0], d8[0]) + dot(k1[1], d8[1]),
                        dot(k2[0], d8[0]) + dot(k2[1], d8[1]),
                        dot(k3[0], d8[0]) + dot(k3[1], d8[1]),
                    );
                }
            }
            {
                let to = 2u;
                let t = 32u * (part - 2u) + 8u * to;
                let k0 = f16x8(stage[kt_at(c4, t)]);
                let k1 = f16x8(stage[kt_at(c4 + 1u, t)]);
                let k2 = f16x8(stage[kt_at(c4 + 2u, t)]);
                let k3 = f16x8(stage[kt_at(c4 + 3u, t)]);
                {
                    let j = 0u;
                    let v = sv + 8u * j;
                    let d8 = f16x8(dw[v * DW + t / 8u]);
                    s[j] += vec4<f32>(
                        dot(k0[0], d8[0]) + dot(k0[1], d8[1]),
                        dot(k1[0], d8[0]) + dot(k1[1], d8[1]),
                        dot(k2[0], d8[0]) + dot(k2[1], d8[1]),
                        dot(k3[0], d8[0]) + dot(k3[1], d8[1]),
                    );
                }
                {
                    let j = 1u;
                    let v = sv + 8u * j;
                    let d8 = f16x8(dw[v * DW + t / 8u]);
                    s[j] += vec4<f32>(
                        dot(k0[0], d8[0]) + dot(k0[1], d8[1]),
                        dot(k1[0], d8[0]) + dot(k1[1], d8[1]),
                        dot(k2[0], d8[0]) + dot(k2[1], d8[1]),
                        dot(k3[0], d8[0]) + dot(k3[1], d8[1]),
                    );
                }
                {
                    let j = 2u;
                    let v = sv + 8u * j;
                    let d8 = f16x8(dw[v * DW + t / 8u]);
                    s[j] += vec4<f32>(
                        dot(k0[0], d8[0]) + dot(k0[1], d8[1]),
                        dot(k1[0], d8[0]) + dot(k1[1], d8[1]),
                        dot(k2[0], d8[0]) + dot(k2[1], d8[1]),
                        dot(k3[0], d8[0]) + dot(k3[1], d8[1]),
                    );
                }
                {
                    let j = 3u;
                    let v = sv + 8u * j;
                    let d8 = f16x8(dw[v * DW + t / 8u]);
                    s[j] += vec4<f32>(
                        dot(k0[0], d8[0]) + dot(k0[1], d8[1]),
                        dot(k1[0], d8[0]) + dot(k1[1], d8[1]),
                        dot(k2[0], d8[0]) + dot(k2[1], d8[1]),
                        dot(k3[0], d8[0]) + dot(k3[1], d8[1]),
                    );
                }
            }
            {
                let to = 3u;
                let t = 32u * (part - 2u) + 8u * to;
                let k0 = f16x8(stage[kt_at(c4, t)]);
                let k1 = f16x8(stage[kt_at(c4 + 1u, t)]);
                let k2 = f16x8(stage[kt_at(c4 + 2u, t)]);
                let k3 = f16x8(stage[kt_at(c4 + 3u, t)]);
                {
                    let j = 0u;
                    let v = sv + 8u * j;
                    let d8 = f16x8(dw[v * DW + t / 8u]);
                    s[j] += vec4<f32>(
                        dot(k0[0], d8[0]) + dot(k0[1], d8[1]),
                        dot(k1[0], d8[0]) + dot(k1[1], d8[1]),
                        dot(k2[0], d8[0]) + dot(k2[1], d8[1]),
                        dot(k3[0], d8[0]) + dot(k3[1], d8[1]),
                    );
                }
                {
                    let j = 1u;
                    let v = sv + 8u * j;
                    let d8 = f16x8(dw[v * DW + t / 8u]);
                    s[j] += vec4<f32>(
                        dot(k0[0], d8[0]) + dot(k0[1], d8[1]),
                        dot(k1[0], d8[0]) + dot(k1[1], d8[1]),
                        dot(k2[0], d8[0]) + dot(k2[1], d8[1]),
                        dot(k3[0], d8[0]) + dot(k3[1], d8[1]),
                    );
                }
                {
                    let j = 2u;
                    let v = sv + 8u * j;
                    let d8 = f16x8(dw[v * DW + t / 8u]);
                    s[j] += vec4<f32>(
                        dot(k0[0], d8[0]) + dot(k0[1], d8[1]),
                        dot(k1[0], d8[0]) + dot(k1[1], d8[1]),
                        dot(k2[0], d8[0]) + dot(k2[1], d8[1]),
                        dot(k3[0], d8[0]) + dot(k3[1], d8[1]),
                    );
                }
                {
                    let j = 3u;
                    let v = sv + 8u * j;
                    let d8 = f16x8(dw[v * DW + t / 8u]);
                    s[j] += vec4<f32>(
                        dot(k0[0], d8[0]) + dot(k0[1], d8[1]),
                        dot(k1[0], d8[0]) + dot(k1[1], d8[1]),
                        dot(k2[0], d8[0]) + dot(k2[1], d8[1]),
                        dot(k3[0], d8[0]) + dot(k3[1], d8[1]),
                    );
                }
            }
        }
        {
            let j = 0u;
            sw_set(sv + 8u * j, c4, f16r(s[j]));
        }
        {
            let j = 1u;
            sw_set(sv + 8u * j, c4, f16r(s[j]));
        }
        {
            let j = 2u;
            sw_set(sv + 8u * j, c4, f16r(s[j]));
        }
        {
            let j = 3u;
            sw_set(sv + 8u * j, c4, f16r(s[j]));
        }
    }

    {
        let j = 0u;
        let v = sv + 8u * j;
        if in_grid && !hc.skipped && v0 + v < d.value_dim && c4 < d.key_dim {
            store_state_out(state_row(d, h.b, h.hv, v0 + v), c4, d.key_dim, s[j]);
        }
    }
    {
        let j = 1u;
        let v = sv + 8u * j;
        if in_grid && !hc.skipped && v0 + v < d.value_dim && c4 < d.key_dim {
            store_state_out(state_row(d, h.b, h.hv, v0 + v), c4, d.key_dim, s[j]);
        }
    }
    {
        let j = 2u;
        let v = sv + 8u * j;
        if in_grid && !hc.skipped && v0 + v < d.value_dim && c4 < d.key_dim {
            store_state_out(state_row(d, h.b, h.hv, v0 + v), c4, d.key_dim, s[j]);
        }
    }
    {
        let j = 3u;
        let v = sv + 8u * j;
        if in_grid && !hc.skipped && v0 + v < d.value_dim && c4 < d.key_dim {
            store_state_out(state_row(d, h.b, h.hv, v0 + v), c4, d.key_dim, s[j]);
        }
    }
}
