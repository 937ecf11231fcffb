enable f16;

// deltatape kernel chunk_out.f32.f32.f32.workgroup.l1r128g1t1c64
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
const YS: u32 = 4u;
const F16_WORD: u32 = 8u;

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

@group(0) @binding(2) var<storage, read> tiles_buf: array<vec4<u32>>;
fn load_tiles(i: u32) -> u32 {
    return tiles_buf[i >> 2u][i & 3u];
}

@group(0) @binding(3) var<storage, read> starts_buf: array<vec4<u32>>;
fn load_starts(i: u32) -> u32 {
    return starts_buf[i >> 2u][i & 3u];
}

@group(0) @binding(4) var<storage, read> deltas16_buf: array<vec4<u32>>;
fn load_deltas16(i: u32) -> u32 {
    return deltas16_buf[i >> 2u][i & 3u];
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

// record_chunked's output on vector units (the fast path's last pass where no adapter
// has cooperative matrices): the same sums as chunk_out_coop.wgsl, one workgroup of 256
// invocations per (b, hv, chunk, block of BLOCK = ROWS value columns, 128 where the
// padded Dv allows, else 64), each independent of every other:
//   y = (gam Q) S_start^T + M delta
// over the chunk's 64 steps. Invocation li makes y at steps YS (li / OCTETS) .. + YS - 1
// (YS = BLOCK / 32) and the block's columns 8 (li % OCTETS) .. + 7 (OCTETS = BLOCK / 8).
// The operands come through `stage` in six parts, each copied by the whole workgroup in
// coalesced 16-byte words (every tile binding is vec4<u32> words) while the part
// before it is in the sums: parts 0-3 the start state's keys 32 p .. + 31 at the
// block's columns (B) with gam Q's at those keys (A), parts 4 and 5 delta's steps
// 32 (p - 4) .. + 31 (B) with M's at those steps (A). Part p goes into half p % 2 of
// `stage`, so one barrier a part serves, after its copy: every invocation reaches part
// p's only when done with part p - 1, whose half part p + 1's copy takes after it.
// Per eight keys (or steps) an invocation reads YS words of A and eight of B for 64 YS
// multiply-adds. M is zero above its diagonal, so the invocation skips its steps past
// its last. y leaves from registers, two neighbouring values a write (a bf16 word has
// one writer).

const BLOCK: u32 = ROWS;
// The block's column octets: 2048 / BLOCK step groups of YS steps cover the chunk.
const OCTETS: u32 = BLOCK / 8u;
// A part: B's 32 rows of BLOCK columns from word 0, A's 64 rows of 32 after them.
const B_WORDS: u32 = 32u * BLOCK / 8u;
const A_WORDS: u32 = B_WORDS;
const PART_WORDS: u32 = A_WORDS + CHUNK * 32u / 8u;
var<workgroup> stage: array<vec4<u32>, 2u * PART_WORDS>;

// Where word w of a part's B (w < B_WORDS; 32 rows of the block's columns from row r0)
// is in its binding, in words: the start state's or delta's scratch block at `at`
// (`pad` columns wide), at the block's tile columns from `cb` (chunk_tiles' block_word).
fn b_word(at: u32, pad: u32, cb: u32, r0: u32, w: u32) -> u32 {
    return (at + block_word(r0 / 16u, cb * BLOCK / 16u, BLOCK / 16u, pad, w)) / 8u;
}

// Where word w of part p's A (64 rows of 32) is in the tiles binding: gam Q's key
// columns 32 p .. (p < 4), or M's step columns 32 (p - 4) ...
fn a_word(base: u32, p: u32, w: u32) -> u32 {
    var at = base + QG_AT + block_word(0u, 2u * p, 2u, TILE_DK, w);
    if p >= 4u {
        at = base + M_AT + block_word(0u, 2u * (p - 4u), 2u, CHUNK, w);
    }
    return at / 8u;
}

// Invocation li's words of part p: B's li and li + WG_SIZE (where B has them), A's li.
fn part_load(ch: u32, pad: u32, cb: u32, p: u32, li: u32) -> array<vec4<u32>, 3> {
    var r = array<vec4<u32>, 3>(vec4(0u), vec4(0u), vec4(0u));
    let base = ch * TILES_PER_CHUNK;
    r[2] = tiles_buf[a_word(base, p, li)];
    if p < 4u {
        let at = ch * TILE_DK * pad;
        r[0] = starts_buf[b_word(at, pad, cb, 32u * p, li)];
        if li + WG_SIZE < B_WORDS {
            r[1] = starts_buf[b_word(at, pad, cb, 32u * p, li + WG_SIZE)];
        }
    } else {
        let at = ch * CHUNK * pad;
        r[0] = deltas16_buf[b_word(at, pad, cb, 32u * (p - 4u), li)];
        if li + WG_SIZE < B_WORDS {
            r[1] = deltas16_buf[b_word(at, pad, cb, 32u * (p - 4u), li + WG_SIZE)];
        }
    }
    return r;
}

// Into part p's half of `stage`.
fn part_store(li: u32, p: u32, x: array<vec4<u32>, 3>) {
    let o = (p % 2u) * PART_WORDS;
    stage[o + li] = x[0];
    if li + WG_SIZE < B_WORDS {
        stage[o + li + WG_SIZE] = x[1];
    }
    stage[o + A_WORDS + li] = x[2];
}

// B's row r (of the part's 32) at the block's columns c .. c + 7, in the half of
// `stage` from word o.
fn b_at(o: u32, r: u32, c: u32) -> u32 {
    return o + tile_at(r, c, BLOCK) / 8u;
}

// A's row t (of 64) at the part's columns k .. k + 7 (k < 32), in the half of `stage`
// from word o.
fn a_at(o: u32, t: u32, k: u32) -> u32 {
    return o + A_WORDS + tile_at(t, k, 32u) / 8u;
}

fn kernel_main(li: u32, wg_in: u32, unused: u32) {
    let in_grid = wg_in < params.workgroups;
    let wg = min(wg_in, params.workgroups - 1u);
    let pad = padded_value_dim(params.dims.value_dim);
    let blocks = pad / BLOCK;
    let cb = wg % blocks;
    let chunk = chunk_at(wg / blocks, li); // wgsl/chunk_at.wgsl
    let ch = chunk.ch;
    let t0 = YS * (li / OCTETS);
    let c = 8u * (li % OCTETS);

    var lo: array<vec4<f32>, YS>;
    var hi: array<vec4<f32>, YS>;
    var pre = part_load(ch, pad, cb, 0u, li);
    for (var p = 0u; p < 6u; p++) {
        part_store(li, p, pre);
        let o = (p % 2u) * PART_WORDS;
        workgroupBarrier(); // the part is staged
        if p + 1u < 6u {
            pre = part_load(ch, pad, cb, p + 1u, li);
        }
        // (gam Q) S_start^T over the part's keys, or M delta over its steps up to the
        // invocation's last (M is zero past it).
        for (var k = 0u; k < 32u; k += 8u) {
            if p < 4u || 32u * (p - 4u) + k < t0 + YS {
                var a: array<array<vec4<f32>, 2>, YS>;
                {
                    let i = 0u;
                    a[i] = f16x8(stage[a_at(o, t0 + i, k)]);
                }
                {
                    let i = 1u;
                    a[i] = f16x8(stage[a_at(o, t0 + i, k)]);
                }
                {
                    let i = 2u;
                    a[i] = f16x8(stage[a_at(o, t0 + i, k)]);
                }
                {
                    let i = 3u;
                    a[i] = f16x8(stage[a_at(o, t0 + i, k)]);
                }
                {
                    let e = 0u;
                    let b = f16x8(stage[b_at(o, k + e, c)]);
                    {
                        let i = 0u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 1u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 2u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 3u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                }
                {
                    let e = 1u;
                    let b = f16x8(stage[b_at(o, k + e, c)]);
                    {
                        let i = 0u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 1u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 2u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 3u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                }
                {
                    let e = 2u;
                    let b = f16x8(stage[b_at(o, k + e, c)]);
                    {
                        let i = 0u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 1u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 2u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 3u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                }
                {
                    let e = 3u;
                    let b = f16x8(stage[b_at(o, k + e, c)]);
                    {
                        let i = 0u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 1u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 2u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 3u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                }
                {
                    let e = 4u;
                    let b = f16x8(stage[b_at(o, k + e, c)]);
                    {
                        let i = 0u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 1u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 2u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 3u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                }
                {
                    let e = 5u;
                    let b = f16x8(stage[b_at(o, k + e, c)]);
                    {
                        let i = 0u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 1u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 2u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 3u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                }
                {
                    let e = 6u;
                    let b = f16x8(stage[b_at(o, k + e, c)]);
                    {
                        let i = 0u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 1u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 2u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 3u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                }
                {
                    let e = 7u;
                    let b = f16x8(stage[b_at(o, k + e, c)]);
                    {
                        let i = 0u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 1u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 2u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                    {
                        let i = 3u;
                        let x = a[i][e / 4u][e % 4u];
                        lo[i] += x * b[0];
                        hi[i] += x * b[1];
                    }
                }
            }
        }
    }

    let d = chunk.d;
    {
        let i = 0u;
        let t = chunk.n * CHUNK + t0 + i;
        if in_grid && t < d.steps {
            let at = v_index(d, chunk.h.b, t, chunk.h.hv, 0u);
            y_pair(d, at, c, lo[i].x, lo[i].y);
            y_pair(d, at, c + 2u, lo[i].z, lo[i].w);
            y_pair(d, at, c + 4u, hi[i].x, hi[i].y);
            y_pair(d, at, c + 6u, hi[i].z, hi[i].w);
        }
    }
    {
        let i = 1u;
        let t = chunk.n * CHUNK + t0 + i;
        if in_grid && t < d.steps {
            let at = v_index(d, chunk.h.b, t, chunk.h.hv, 0u);
            y_pair(d, at, c, lo[i].x, lo[i].y);
            y_pair(d, at, c + 2u, lo[i].z, lo[i].w);
            y_pair(d, at, c + 4u, hi[i].x, hi[i].y);
            y_pair(d, at, c + 6u, hi[i].z, hi[i].w);
        }
    }
    {
        let i = 2u;
        let t = chunk.n * CHUNK + t0 + i;
        if in_grid && t < d.steps {
            let at = v_index(d, chunk.h.b, t, chunk.h.hv, 0u);
            y_pair(d, at, c, lo[i].x, lo[i].y);
            y_pair(d, at, c + 2u, lo[i].z, lo[i].w);
            y_pair(d, at, c + 4u, hi[i].x, hi[i].y);
            y_pair(d, at, c + 6u, hi[i].z, hi[i].w);
        }
    }
    {
        let i = 3u;
        let t = chunk.n * CHUNK + t0 + i;
        if in_grid && t < d.steps {
            let at = v_index(d, chunk.h.b, t, chunk.h.hv, 0u);
            y_pair(d, at, c, lo[i].x, lo[i].y);
            y_pair(d, at, c + 2u, lo[i].z, lo[i].w);
            y_pair(d, at, c + 4u, hi[i].x, hi[i].y);
            y_pair(d, at, c + 6u, hi[i].z, hi[i].w);
        }
    }
}

// y at value columns dv (even) and dv + 1 of the row at `row`: a and b, where they
// exist.
fn y_pair(d: GdnDims, row: u32, dv: u32, a: f32, b: f32) {
    if dv + 1u < d.value_dim {
        store2_y(row + dv, a, b);
    } else if dv < d.value_dim {
        // The last column of an odd Dv (never bf16: the host refuses it).
        store1_y(row + dv, a);
    }
}
