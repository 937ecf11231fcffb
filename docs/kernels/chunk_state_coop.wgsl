enable f16;
enable wgpu_cooperative_matrix;

// deltatape kernel chunk_state_coop.f32.f32.f32.workgroup.l1r16g1t1c64
const HAS_STATE_IN: bool = true;
const HAS_Y: bool = true;
const HAS_STATE_OUT: bool = true;
const HAS_DELTA: bool = true;
const HAS_MASK: bool = false;
const HAS_U: bool = true;
const HAS_DECAY: bool = true;
const HAS_TILES: bool = true;
const HAS_SNAPSHOT: bool = false;
const HAS_STATUS: bool = false;
const HAS_OFFSETS: bool = false;
const LANES: u32 = 1u;
const ROWS: u32 = 16u;
const GROUPS: u32 = 1u;
const RPT: u32 = 1u;
const WG_SIZE: u32 = 256u;
const VEC4: bool = false;
const CHUNK: u32 = 64u;
const KQ_ITEMS: u32 = 1u;
const V_ITEMS: u32 = 4u;
const HAS_BF16: bool = false;
const SUBGROUP: bool = false;
const PAIRS_OUTPUTS: bool = false;
const PAIRS_IN_THREAD: bool = false;
const GATE_BF16: bool = false;
const FOLD: bool = false;
const EARLY_FOLD: bool = false;
const SCALED_STATE: bool = false;
const STATE_BF16: bool = false;
const STATE_F16: bool = false;
const ACT_BF16: bool = false;
const TAPE_BF16: bool = false;
const CONV_SPAN: u32 = 7u;
const CONV_PAIRS: u32 = 4u;

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

@group(0) @binding(2) var<storage, read_write> y_buf: array<f32>;
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

@group(0) @binding(3) var<storage, read_write> state_out_buf: array<f32>;
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

@group(0) @binding(4) var<storage, read_write> delta_buf: array<f32>;
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

@group(0) @binding(5) var<storage, read> u_buf: array<u32>;
fn load_u(i: u32) -> u32 {
    return u_buf[i];
}

@group(0) @binding(6) var<storage, read> decay_buf: array<u32>;
fn load_decay(i: u32) -> u32 {
    return decay_buf[i];
}

@group(0) @binding(7) var<storage, read> tiles_buf: array<f16>;
fn load1_tiles(i: u32) -> f32 {
    let x = tiles_buf[i];
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
    _pad1: u32,      // uniform layout: a struct member is 16-byte aligned
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

// The f16 operands of record_chunked's cooperative-matrix state pass, as the pack pass
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

// x clamped to f16's finite range when it is finite and beyond it, so rounding to f16
// never makes an infinity of a finite value; infinities and NaN pass through.
fn to_f16_range(x: f32) -> f32 {
    let big = abs(x) > 65504.0 && abs(x) <= 0x1.fffffep+127f;
    return select(x, clamp(x, -65504.0, 65504.0), big);
}

// record_chunked's state pass on cooperative matrices (16 x 16 x 16, f16 operands, f32
// accumulators): one workgroup of 8 subgroups of 32 per (b, hv, block of 16 value
// rows), through every chunk in order. The block's transposed state S^T [TILE_DK][16]
// stays in registers as f32 accumulators, one 16 x 16 tile per subgroup. Per chunk,
// with the pack pass's f16 tiles (cpu.rs beside it has the math):
//   delta = U - W S^T                         (record's delta)
//   y     = (gam Q) S^T + M delta
//   S^T   = gam_C S^T + (G_end K)^T delta
// Elementwise work (the f16 copy of S^T and of delta, U, the outputs in their dtypes,
// the bounds of T and Dv) goes through workgroup memory: WGSL cannot address a
// matrix's elements. naga wants every cooperative op in workgroup-uniform control flow,
// so each subgroup does the same fixed count of products, its role (which row tile,
// which operand) read only in addresses. Subgroups are 32 wide here (the host checks).

// Value rows per workgroup, and subgroups of it.
const BV: u32 = 16u;
const SUBGROUP_WIDTH: u32 = 32u;
// Row tiles of a chunk, and of the state's transpose (one per subgroup).
const CT: u32 = CHUNK / 16u;
const KT: u32 = TILE_DK / 16u;
// (step, value) elements of a chunk per invocation.
const EPT: u32 = CHUNK * BV / WG_SIZE;

var<workgroup> s32: array<f32, TILE_DK * BV>;
var<workgroup> s16: array<f16, TILE_DK * BV>;
// Rows [0, C): W S^T, then delta; rows [C, 2C): (gam Q) S^T.
var<workgroup> x32: array<f32, 2u * CHUNK * BV>;
// The two halves of M delta (the first and last C / 2 columns of M).
var<workgroup> y32: array<f32, 2u * CHUNK * BV>;
var<workgroup> d16: array<f16, CHUNK * BV>;

// The A operand tile at `at` of the pack pass's tiles.
fn a_tile(at: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&tiles_buf[at], 16u);
}

// The B operand tiles at `at` of the state's transpose and of delta, in f16.
fn s_tile(at: u32) -> coop_mat16x16<f16, B> {
    return coopLoadT<coop_mat16x16<f16, B>>(&s16[at], BV);
}

fn d_tile(at: u32) -> coop_mat16x16<f16, B> {
    return coopLoadT<coop_mat16x16<f16, B>>(&d16[at], BV);
}

fn kernel_main(li: u32, wg_in: u32, unused: u32) {
    // No early return (naga then takes the products as outside uniform control flow):
    // a workgroup past the grid's end (a folded grid) walks the last one's chunks and
    // writes nothing.
    let in_grid = wg_in < params.workgroups;
    let wg = min(wg_in, params.workgroups - 1u);
    let d = params.dims;
    let rb = wg % params.row_blocks;
    let head = wg / params.row_blocks;
    let h = head_at(d, params.gqa_layout, head);
    let v0 = rb * BV;
    let sg = li / SUBGROUP_WIDTH;

    // S^T[c][v] = S[v0 + v][c], zero past Dk and Dv (so it stays zero there).
    for (var e = li; e < TILE_DK * BV; e += WG_SIZE) {
        let v = e / TILE_DK;
        let c = e % TILE_DK;
        var x = 0.0;
        if v0 + v < d.value_dim && c < d.key_dim {
            x = load1_state_in(state_row(d, h.b, h.hv, v0 + v) + c);
        }
        s32[c * BV + v] = x;
    }
    workgroupBarrier();
    let s_at = sg * 256u;
    var s = coopLoadT<coop_mat16x16<f32, C>>(&s32[s_at], BV);

    // The subgroup's product in each phase: W or gam Q (role), row tile rt.
    let role = sg / CT;
    let rt = sg % CT;
    for (var n = 0u; n < params.chunks; n++) {
        let ch = head * params.chunks + n;
        let base = ch * TILES_PER_CHUNK;
        let t0 = n * CHUNK;
        let last = bitcast<f32>(load_decay(ch * 3u * CHUNK + 2u * CHUNK));
        // Every A operand of the chunk's products, loaded now so the loads are in flight
        // together rather than one round trip per product: this subgroup's row tile of W
        // or gam Q (8 tiles), of (G_end K)^T (4) and its half of M's row tile (2).
        let a_at = base + W_AT + role * QG_AT + rt * KT * 256u;
        let a0 = a_tile(a_at);
        let a1 = a_tile(a_at + 256u);
        let a2 = a_tile(a_at + 512u);
        let a3 = a_tile(a_at + 768u);
        let a4 = a_tile(a_at + 1024u);
        let a5 = a_tile(a_at + 1280u);
        let a6 = a_tile(a_at + 1536u);
        let a7 = a_tile(a_at + 1792u);
        let k_at = base + KT_AT + sg * CT * 256u;
        let k0 = a_tile(k_at);
        let k1 = a_tile(k_at + 256u);
        let k2 = a_tile(k_at + 512u);
        let k3 = a_tile(k_at + 768u);
        // M's column tiles role * 2 and role * 2 + 1 of row tile rt.
        let m_at = base + M_AT + (rt * CT + role * 2u) * 256u;
        let m0 = a_tile(m_at);
        let m1 = a_tile(m_at + 256u);
        var u: array<f32, EPT>;
        for (var l = 0u; l < EPT; l++) {
            let e = li + l * WG_SIZE;
            let dv = v0 + e % BV;
            var x = 0.0;
            if dv < d.value_dim {
                x = bitcast<f32>(load_u((ch * CHUNK + e / BV) * d.value_dim + dv));
            }
            u[l] = x;
        }

        // S^T in f16, the B operand of the first products.
        coopStoreT(s, &s32[s_at], BV);
        workgroupBarrier();
        for (var e = li; e < TILE_DK * BV; e += WG_SIZE) {
            s16[e] = f16(to_f16_range(s32[e]));
        }
        workgroupBarrier();

        // W S^T (role 0) or (gam Q) S^T (role 1), rows of row tile rt.
        var acc = coop_mat16x16<f32, C>();
        acc = coopMultiplyAdd(a0, s_tile(0u), acc);
        acc = coopMultiplyAdd(a1, s_tile(256u), acc);
        acc = coopMultiplyAdd(a2, s_tile(512u), acc);
        acc = coopMultiplyAdd(a3, s_tile(768u), acc);
        acc = coopMultiplyAdd(a4, s_tile(1024u), acc);
        acc = coopMultiplyAdd(a5, s_tile(1280u), acc);
        acc = coopMultiplyAdd(a6, s_tile(1536u), acc);
        acc = coopMultiplyAdd(a7, s_tile(1792u), acc);
        let xo = (role * CHUNK + rt * 16u) * BV;
        coopStoreT(acc, &x32[xo], BV);
        workgroupBarrier();

        // delta = U - W S^T, in f32 for the tape and in f16 for the products.
        for (var l = 0u; l < EPT; l++) {
            let e = li + l * WG_SIZE;
            let delta = u[l] - x32[e];
            x32[e] = delta;
            d16[e] = f16(to_f16_range(delta));
        }
        workgroupBarrier();

        // The state through the chunk: this subgroup's row tile of S^T.
        s = last * s;
        s = coopMultiplyAdd(k0, d_tile(0u), s);
        s = coopMultiplyAdd(k1, d_tile(256u), s);
        s = coopMultiplyAdd(k2, d_tile(512u), s);
        s = coopMultiplyAdd(k3, d_tile(768u), s);
        // M delta for row tile rt, over half (role) of M's column tiles.
        var ym = coop_mat16x16<f32, C>();
        ym = coopMultiplyAdd(m0, d_tile(role * 512u), ym);
        ym = coopMultiplyAdd(m1, d_tile(role * 512u + 256u), ym);
        let yo = (role * CHUNK + rt * 16u) * BV;
        coopStoreT(ym, &y32[yo], BV);
        workgroupBarrier();

        // y and delta out, two neighbouring values a write (a bf16 word has one writer).
        // The next chunk writes x32, y32 and d16 only after two more barriers.
        for (var p = li; p < CHUNK * BV / 2u; p += WG_SIZE) {
            let e = 2u * p;
            let t = t0 + e / BV;
            let dv = v0 + e % BV;
            if in_grid && t < d.steps && dv < d.value_dim {
                let ya = x32[CHUNK * BV + e] + y32[e] + y32[CHUNK * BV + e];
                let yb = x32[CHUNK * BV + e + 1u] + y32[e + 1u] + y32[CHUNK * BV + e + 1u];
                let at = v_index(d, h.b, t, h.hv, dv);
                if dv + 1u < d.value_dim {
                    store2_y(at, ya, yb);
                    store2_delta(at, x32[e], x32[e + 1u]);
                } else {
                    // The last row of an odd Dv (never bf16: the host refuses it).
                    store1_y(at, ya);
                    store1_delta(at, x32[e]);
                }
            }
        }
    }

    coopStoreT(s, &s32[s_at], BV);
    workgroupBarrier();
    for (var e = li; e < BV * TILE_DK / 4u; e += WG_SIZE) {
        let v = e / (TILE_DK / 4u);
        let c = (e % (TILE_DK / 4u)) * 4u;
        if in_grid && v0 + v < d.value_dim && c < d.key_dim {
            let x = vec4<f32>(
                s32[c * BV + v],
                s32[(c + 1u) * BV + v],
                s32[(c + 2u) * BV + v],
                s32[(c + 3u) * BV + v],
            );
            store_state_out(state_row(d, h.b, h.hv, v0 + v), c, d.key_dim, x);
        }
    }
}
