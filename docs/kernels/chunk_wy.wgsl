// deltatape kernel chunk_wy.f32.f32.f32.workgroup.l1r1g1t1c64
const HAS_Q: bool = true;
const HAS_K: bool = true;
const HAS_V: bool = true;
const HAS_G: bool = true;
const HAS_BETA: bool = true;
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
const ROWS: u32 = 1u;
const GROUPS: u32 = 1u;
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

@group(0) @binding(6) var<storage, read_write> w_buf: array<u32>;
fn load_w(i: u32) -> u32 {
    return w_buf[i];
}
fn store_w(i: u32, v: u32) {
    w_buf[i] = v;
}

@group(0) @binding(7) var<storage, read_write> u_buf: array<u32>;
fn load_u(i: u32) -> u32 {
    return u_buf[i];
}
fn store_u(i: u32, v: u32) {
    u_buf[i] = v;
}

@group(0) @binding(8) var<storage, read_write> m_buf: array<u32>;
fn load_m(i: u32) -> u32 {
    return m_buf[i];
}
fn store_m(i: u32, v: u32) {
    m_buf[i] = v;
}

@group(0) @binding(9) var<storage, read_write> decay_buf: array<u32>;
fn load_decay(i: u32) -> u32 {
    return decay_buf[i];
}
fn store_decay(i: u32, v: u32) {
    decay_buf[i] = v;
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

// record_chunked, first pass (cpu.rs beside it has the math): one workgroup per
// (b, hv, chunk of CHUNK steps: wgsl/chunk_at.wgsl), independent of every other chunk.
// It writes, in f32 (as u32 bits) to the scratch buffers:
//   m[i][j]     = G(i, j) q[i].k[j] for j <= i, else 0              [C][C]
//   w[i][:]     = rows of T diag(beta gam) K                           [C][Dk]
//   u[i][:]     = rows of T diag(beta) V                               [C][Dv]
//   decay[i]    = gam[i]; decay[C + j] = G(C - 1, j); decay[2C] = gam[C - 1]   [3C]
// with T = (I + L)^-1, L[i][j] = beta[i] G(i, j) k[i].k[j] (j < i). T is formed in
// workgroup memory, blockwise (16 x 16 blocks), and W and U are its products with
// staged tiles of K and V: every step of the solve is spread over the workgroup, with
// no per-invocation array to index dynamically. G(i, j) = g[j+1] * ... * g[i] is a
// running product over (j, i], formed only for j <= i. A masked step, and a step past
// T in the last chunk, is g = 1, beta = 0, k = q = v = 0.

// Columns of k and q staged per barrier pair (two vec4s a row).
const TK: u32 = 8u;
// Gram entries (i, j) each invocation accumulates.
const EPT: u32 = (CHUNK * CHUNK + WG_SIZE - 1u) / WG_SIZE;
// Vec4 columns of a W / U tile: one vec4 of the tile per invocation (CHUNK rows). With
// WG_SIZE = 256 and CHUNK <= 64 the stage also holds both Gram tiles (4 CHUNK vec4s).
const TW4: u32 = WG_SIZE / CHUNK;
const TW: u32 = 4u * TW4;

var<workgroup> gate_sh: array<f32, CHUNK>;
var<workgroup> beta_sh: array<f32, CHUNK>;
var<workgroup> gam_sh: array<f32, CHUNK>;
var<workgroup> live_sh: array<u32, CHUNK>;
// One vec4 per invocation, shared by the phases in turn: the k and q tiles of the Gram
// products ([C][TK] each, 4 C vec4s), the columns of T's diagonal blocks ([C][BLOCK]),
// a block row's partial products ([BLOCK][BLOCK] per block left of the diagonal) and the
// [C][TW] tiles of the W / U products.
var<workgroup> stage: array<vec4<f32>, WG_SIZE>;
// L[i][j] (j < i) at tri(i) + j; from the inverse on, T[i][j] in its place.
var<workgroup> l_sh: array<f32, CHUNK * (CHUNK - 1u) / 2u>;

// Element `at` of the triangle (wgsl/chunk_solve.wgsl).
fn l_get(at: u32) -> f32 {
    return l_sh[at];
}

fn l_set(at: u32, x: f32) {
    l_sh[at] = x;
}

// The stage as [..][BLOCK] scalars.
fn stage_at(row: u32, c: u32) -> f32 {
    let e = row * BLOCK + c;
    return stage[e / 4u][e % 4u];
}

fn stage_set(row: u32, c: u32, x: f32) {
    let e = row * BLOCK + c;
    stage[e / 4u][e % 4u] = x;
}

// Column c of a k (or q) row, 0 past Dk.
fn k_at(row: u32, c: u32, dk: u32) -> f32 {
    if c < dk {
        return load1_k(row + c);
    }
    return 0.0;
}

fn q_at(row: u32, c: u32, dk: u32) -> f32 {
    if c < dk {
        return load1_q(row + c);
    }
    return 0.0;
}

// Column col of step i's row of [diag(beta gam) K | diag(beta) V] (0 past both, and at a
// dead step, whatever its k and v hold).
fn wu_at(d: GdnDims, h: Head, t0: u32, i: u32, col: u32) -> f32 {
    if live_sh[i] == 0u {
        return 0.0;
    }
    let t = t0 + i;
    if col < d.key_dim {
        return beta_sh[i] * gam_sh[i] * load1_k(qk_row(d, h.b, t, h.hk) + col);
    }
    if col < d.key_dim + d.value_dim {
        return beta_sh[i] * load1_v(v_index(d, h.b, t, h.hv, col - d.key_dim));
    }
    return 0.0;
}

// Column col of [W | U]'s scratch row `row` (none past both).
fn wu_store(d: GdnDims, row: u32, col: u32, x: f32) {
    if col < d.key_dim {
        store_w(row * d.key_dim + col, bitcast<u32>(x));
    } else if col < d.key_dim + d.value_dim {
        store_u(row * d.value_dim + col - d.key_dim, bitcast<u32>(x));
    }
}

fn wu_fetch(d: GdnDims, h: Head, t0: u32, i: u32, col: u32) -> vec4<f32> {
    return vec4(
        wu_at(d, h, t0, i, col),
        wu_at(d, h, t0, i, col + 1u),
        wu_at(d, h, t0, i, col + 2u),
        wu_at(d, h, t0, i, col + 3u),
    );
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    // Uniform per workgroup: every barrier below is reached by all or none.
    if wg >= params.workgroups {
        return;
    }
    let chunk = chunk_at(wg, li);
    let d = chunk.d;
    let h = chunk.h;
    let ch = chunk.ch;
    let t0 = chunk.n * CHUNK;

    for (var i = li; i < CHUNK; i += WG_SIZE) {
        let t = t0 + i;
        var live = t < d.steps;
        var gv = 1.0;
        var bv = 0.0;
        if live {
            let gi = gate_index(d, h.b, t, h.hv);
            gv = load1_g(gi);
            bv = load1_beta(gi);
        }
        gate_sh[i] = gv;
        beta_sh[i] = bv;
        live_sh[i] = select(0u, 1u, live);
    }
    workgroupBarrier();
    if li == 0u {
        var acc = 1.0;
        for (var i = 0u; i < CHUNK; i++) {
            acc *= gate_sh[i];
            gam_sh[i] = acc;
        }
    }

    // K K^T and Q K^T, lower triangle, TK columns at a time.
    var kk: array<f32, EPT>;
    var qk: array<f32, EPT>;
    for (var m = 0u; m < EPT; m++) {
        kk[m] = 0.0;
        qk[m] = 0.0;
    }
    for (var tile = 0u; tile < strides(0u, d.key_dim, TK); tile++) {
        let c0 = tile * TK;
        workgroupBarrier(); // the previous tile is read
        // k rows at stage[2 i + x], q rows at stage[2 C + 2 i + x].
        for (var e = li; e < 4u * CHUNK; e += WG_SIZE) {
            let i = (e / 2u) % CHUNK;
            let c = c0 + (e % 2u) * 4u;
            var v = vec4(0.0);
            if live_sh[i] != 0u {
                let row = qk_row(d, h.b, t0 + i, h.hk);
                if e < 2u * CHUNK {
                    v = vec4(k_at(row, c, d.key_dim), k_at(row, c + 1u, d.key_dim),
                        k_at(row, c + 2u, d.key_dim), k_at(row, c + 3u, d.key_dim));
                } else {
                    v = vec4(q_at(row, c, d.key_dim), q_at(row, c + 1u, d.key_dim),
                        q_at(row, c + 2u, d.key_dim), q_at(row, c + 3u, d.key_dim));
                }
            }
            stage[e] = v;
        }
        workgroupBarrier();
        for (var m = 0u; m < EPT; m++) {
            let e = li + m * WG_SIZE;
            let i = e / CHUNK;
            let j = e % CHUNK;
            if e < CHUNK * CHUNK && j <= i {
                let k0 = stage[2u * j];
                let k1 = stage[2u * j + 1u];
                kk[m] += dot(stage[2u * i], k0) + dot(stage[2u * i + 1u], k1);
                qk[m] += dot(stage[2u * (CHUNK + i)], k0) + dot(stage[2u * (CHUNK + i) + 1u], k1);
            }
        }
    }

    let mbase = ch * CHUNK * CHUNK;
    for (var m = 0u; m < EPT; m++) {
        let e = li + m * WG_SIZE;
        let i = e / CHUNK;
        let j = e % CHUNK;
        if e < CHUNK * CHUNK {
            var r = 0.0;
            if j <= i {
                r = 1.0;
                for (var x = j + 1u; x < i + 1u; x++) {
                    r *= gate_sh[x];
                }
            }
            if j < i {
                l_sh[i * (i - 1u) / 2u + j] = beta_sh[i] * r * kk[m];
            }
            store_m(mbase + e, bitcast<u32>(r * qk[m]));
        }
    }
    let dbase = ch * 3u * CHUNK;
    for (var j = li; j < CHUNK; j += WG_SIZE) {
        var r = 1.0;
        for (var x = j + 1u; x < CHUNK; x++) {
            r *= gate_sh[x];
        }
        store_decay(dbase + j, bitcast<u32>(gam_sh[j]));
        store_decay(dbase + CHUNK + j, bitcast<u32>(r));
    }
    if li == 0u {
        store_decay(dbase + 2u * CHUNK, bitcast<u32>(gam_sh[CHUNK - 1u]));
    }
    workgroupBarrier(); // l_sh is complete

    // The first W / U tile's loads, in flight through the inverse: this invocation's
    // vec4 of each tile is row orow, columns oc .. oc + 3 of the tile.
    let orow = li / TW4;
    let ov = li % TW4;
    let oc = ov * 4u;
    var next = wu_fetch(d, h, t0, orow, oc);

    invert_unit_lower(li);

    // W and U: [W | U] = T [diag(beta gam) K | diag(beta) V], TW columns at a time, the
    // next tile's loads in flight through each tile's products. T is unit lower
    // triangular: row orow of the product is that row of the tile plus T[orow][s] times
    // the rows s < orow.
    let width = d.key_dim + d.value_dim;
    for (var tile = 0u; tile < strides(0u, width, TW); tile++) {
        let c0 = tile * TW;
        stage[li] = next;
        next = wu_fetch(d, h, t0, orow, c0 + TW + oc);
        workgroupBarrier(); // the tile is staged
        var acc = stage[li];
        let lrow = tri(orow);
        for (var s = 0u; s < orow; s++) {
            acc += l_sh[lrow + s] * stage[s * TW4 + ov];
        }
        let row = ch * CHUNK + orow;
        let col = c0 + oc;
        wu_store(d, row, col, acc.x);
        wu_store(d, row, col + 1u, acc.y);
        wu_store(d, row, col + 2u, acc.z);
        wu_store(d, row, col + 3u, acc.w);
        workgroupBarrier(); // the tile is read
    }
}
