// deltatape kernel repeat.f32.f32.f32.workgroup.l1r256g4t1c1.v4
const HAS_SRC: bool = true;
const HAS_DST: bool = true;
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
const HAS_OFFSETS: bool = false;
const LANES: u32 = 1u;
const ROWS: u32 = 256u;
const GROUPS: u32 = 4u;
const RPT: u32 = 1u;
const CHUNK: u32 = 1u;

@group(0) @binding(1) var<storage, read> src_buf: array<vec4<f32>>;
fn load1_src(i: u32) -> f32 {
    let x = src_buf[i >> 2u][i & 3u];
    return x;
}
fn load_src(base: u32, i: u32, n: u32) -> vec4<f32> {
    let x = src_buf[(base + i) >> 2u];
    return select(vec4<f32>(0.0), x, i < n);
}

@group(0) @binding(2) var<storage, read_write> dst_buf: array<vec4<f32>>;
fn load1_dst(i: u32) -> f32 {
    let x = dst_buf[i >> 2u][i & 3u];
    return x;
}
fn load_dst(base: u32, i: u32, n: u32) -> vec4<f32> {
    let x = dst_buf[(base + i) >> 2u];
    return select(vec4<f32>(0.0), x, i < n);
}
fn store_dst(base: u32, i: u32, n: u32, v: vec4<f32>) {
    if i < n {
        dst_buf[(base + i) >> 2u] = v;
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

// repeat (SPEC.md "repeat"): the GQA head broadcast dst[n, h, i] = src[n, hk(h), i].
// Each invocation writes GROUPS groups of 4 consecutive dst elements (group m of
// workgroup w at ((w * GROUPS + m) * WG_SIZE + li) * 4, so every load and store of a
// subgroup is contiguous), and a bf16 word always has a single writer. VEC4
// (dim % 4 == 0): a group lies in one row.

struct RepeatParams {
    rows: u32,
    src_heads: u32,
    dst_heads: u32,
    dim: u32,
    gqa_layout: u32, // 0 = blocked, 1 = tiled
    dst_len: u32,    // rows * dst_heads * dim
    workgroups: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> params: RepeatParams;

// Index of src[n, hk(h), i] for dst element e.
fn repeat_src_index(e: u32) -> u32 {
    let row = e / params.dim;
    let n = row / params.dst_heads;
    let h = row % params.dst_heads;
    let hk = key_head(params.gqa_layout, h, params.src_heads, params.dst_heads);
    return (n * params.src_heads + hk) * params.dim + e % params.dim;
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    // All loads first: GROUPS loads in flight per invocation keep the memory busy.
    var v: array<vec4<f32>, GROUPS>;
    {
        let m = 0u;
        let e = ((wg * GROUPS + m) * WG_SIZE + li) * 4u;
        if e < params.dst_len {
            if VEC4 {
                v[m] = load_src(repeat_src_index(e), 0u, 4u);
            } else {
                for (var c = 0u; c < 4u; c++) {
                    v[m][c] = load1_src(repeat_src_index(min(e + c, params.dst_len - 1u)));
                }
            }
        }
    }
    {
        let m = 1u;
        let e = ((wg * GROUPS + m) * WG_SIZE + li) * 4u;
        if e < params.dst_len {
            if VEC4 {
                v[m] = load_src(repeat_src_index(e), 0u, 4u);
            } else {
                for (var c = 0u; c < 4u; c++) {
                    v[m][c] = load1_src(repeat_src_index(min(e + c, params.dst_len - 1u)));
                }
            }
        }
    }
    {
        let m = 2u;
        let e = ((wg * GROUPS + m) * WG_SIZE + li) * 4u;
        if e < params.dst_len {
            if VEC4 {
                v[m] = load_src(repeat_src_index(e), 0u, 4u);
            } else {
                for (var c = 0u; c < 4u; c++) {
                    v[m][c] = load1_src(repeat_src_index(min(e + c, params.dst_len - 1u)));
                }
            }
        }
    }
    {
        let m = 3u;
        let e = ((wg * GROUPS + m) * WG_SIZE + li) * 4u;
        if e < params.dst_len {
            if VEC4 {
                v[m] = load_src(repeat_src_index(e), 0u, 4u);
            } else {
                for (var c = 0u; c < 4u; c++) {
                    v[m][c] = load1_src(repeat_src_index(min(e + c, params.dst_len - 1u)));
                }
            }
        }
    }
    {
        let m = 0u;
        let e = ((wg * GROUPS + m) * WG_SIZE + li) * 4u;
        store_dst(0u, e, params.dst_len, v[m]);
    }
    {
        let m = 1u;
        let e = ((wg * GROUPS + m) * WG_SIZE + li) * 4u;
        store_dst(0u, e, params.dst_len, v[m]);
    }
    {
        let m = 2u;
        let e = ((wg * GROUPS + m) * WG_SIZE + li) * 4u;
        store_dst(0u, e, params.dst_len, v[m]);
    }
    {
        let m = 3u;
        let e = ((wg * GROUPS + m) * WG_SIZE + li) * 4u;
        store_dst(0u, e, params.dst_len, v[m]);
    }
}
