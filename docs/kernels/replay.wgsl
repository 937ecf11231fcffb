// deltatape kernel replay.f32.f32.f32.workgroup.l16r32g2t4c8.v4
const HAS_TAPE_DELTA: bool = true;
const HAS_TAPE_K: bool = true;
const HAS_TAPE_K_GROUPED: bool = false;
const HAS_TAPE_G: bool = true;
const HAS_SNAPSHOT: bool = true;
const HAS_ACCEPTED: bool = true;
const HAS_STATE_OUT: bool = true;
const HAS_MASK: bool = false;
const HAS_STATUS: bool = false;
const WG_SIZE: u32 = 128u;
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
const HAS_LAYER: bool = false;
const LANES: u32 = 16u;
const ROWS: u32 = 32u;
const GROUPS: u32 = 2u;
const RPT: u32 = 4u;
const CHUNK: u32 = 8u;
const KQ_ITEMS: u32 = 2u;
const V_ITEMS: u32 = 2u;
const PAIRS_OUTPUTS: bool = false;
const PAIRS_IN_THREAD: bool = false;
const FOLD: bool = false;
const EARLY_FOLD: bool = false;
const SCALED_STATE: bool = false;
const STEPS_PER_SUM: u32 = 1u;
const STEP_VALUES: u32 = 4u;
const STEP_SUMS: u32 = 1u;
const MULTI_STEP: bool = false;
const QK_OWNED: u32 = 1u;
const V_OWNED: u32 = 1u;

@group(0) @binding(1) var<storage, read> tape_delta_buf: array<f32>;
fn load1_tape_delta(i: u32) -> f32 {
    let x = tape_delta_buf[i];
    return x;
}
alias tape_delta_raw1 = f32;
fn raw1_tape_delta(i: u32) -> tape_delta_raw1 {
    return tape_delta_buf[i];
}
fn unpack1_tape_delta(x: tape_delta_raw1, i: u32) -> f32 {
    return x;
}

@group(0) @binding(2) var<storage, read> tape_k_buf: array<vec4<f32>>;
fn load1_tape_k(i: u32) -> f32 {
    let x = tape_k_buf[i >> 2u][i & 3u];
    return x;
}
alias tape_k_raw1 = f32;
fn raw1_tape_k(i: u32) -> tape_k_raw1 {
    return tape_k_buf[i >> 2u][i & 3u];
}
fn unpack1_tape_k(x: tape_k_raw1, i: u32) -> f32 {
    return x;
}
fn load_tape_k(base: u32, i: u32, n: u32) -> vec4<f32> {
    let x = tape_k_buf[(base + i) >> 2u];
    return select(vec4<f32>(0.0), x, i < n);
}
alias tape_k_raw = vec4<f32>;
fn raw_tape_k(base: u32, i: u32, n: u32) -> tape_k_raw {
    return tape_k_buf[(base + i) >> 2u];
}
fn unpack_tape_k(x: tape_k_raw, i: u32, n: u32) -> vec4<f32> {
    return select(vec4<f32>(0.0), x, i < n);
}

@group(0) @binding(3) var<storage, read> tape_g_buf: array<f32>;
fn load1_tape_g(i: u32) -> f32 {
    let x = tape_g_buf[i];
    return x;
}
alias tape_g_raw1 = f32;
fn raw1_tape_g(i: u32) -> tape_g_raw1 {
    return tape_g_buf[i];
}
fn unpack1_tape_g(x: tape_g_raw1, i: u32) -> f32 {
    return x;
}

@group(0) @binding(4) var<storage, read> snapshot_buf: array<vec4<f32>>;
fn load1_snapshot(i: u32) -> f32 {
    let x = snapshot_buf[i >> 2u][i & 3u];
    return x;
}
alias snapshot_raw1 = f32;
fn raw1_snapshot(i: u32) -> snapshot_raw1 {
    return snapshot_buf[i >> 2u][i & 3u];
}
fn unpack1_snapshot(x: snapshot_raw1, i: u32) -> f32 {
    return x;
}
fn load_snapshot(base: u32, i: u32, n: u32) -> vec4<f32> {
    let x = snapshot_buf[(base + i) >> 2u];
    return select(vec4<f32>(0.0), x, i < n);
}
alias snapshot_raw = vec4<f32>;
fn raw_snapshot(base: u32, i: u32, n: u32) -> snapshot_raw {
    return snapshot_buf[(base + i) >> 2u];
}
fn unpack_snapshot(x: snapshot_raw, i: u32, n: u32) -> vec4<f32> {
    return select(vec4<f32>(0.0), x, i < n);
}

@group(0) @binding(5) var<storage, read> accepted_buf: array<u32>;
fn load_accepted(i: u32) -> u32 {
    return accepted_buf[i];
}

@group(0) @binding(6) var<storage, read_write> state_out_buf: array<vec4<f32>>;
fn load1_state_out(i: u32) -> f32 {
    let x = state_out_buf[i >> 2u][i & 3u];
    return x;
}
alias state_out_raw1 = f32;
fn raw1_state_out(i: u32) -> state_out_raw1 {
    return state_out_buf[i >> 2u][i & 3u];
}
fn unpack1_state_out(x: state_out_raw1, i: u32) -> f32 {
    return x;
}
fn load_state_out(base: u32, i: u32, n: u32) -> vec4<f32> {
    let x = state_out_buf[(base + i) >> 2u];
    return select(vec4<f32>(0.0), x, i < n);
}
alias state_out_raw = vec4<f32>;
fn raw_state_out(base: u32, i: u32, n: u32) -> state_out_raw {
    return state_out_buf[(base + i) >> 2u];
}
fn unpack_state_out(x: state_out_raw, i: u32, n: u32) -> vec4<f32> {
    return select(vec4<f32>(0.0), x, i < n);
}
fn store_state_out(base: u32, i: u32, n: u32, v: vec4<f32>) {
    if i < n {
        state_out_buf[(base + i) >> 2u] = v;
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

// Everything a state-row kernel's step reads besides the state (k, record's q, the
// row's v or the tape's delta, the gates, the mask) is staged CHUNK steps at a time in
// workgroup memory: k (and q) are the same for every row of the head, and each staged
// value an invocation reads serves its RPT rows. The next chunk's global loads are
// issued before the current chunk is computed and land in registers (the next_*
// variables), so their latency hides behind the arithmetic instead of stalling every
// step.

const STAGED: u32 = GROUPS * LANES; // vec4s of one k (or q) row

// Index of the v (or delta) element that slot i of a chunk staged from step t0 holds:
// step t0 + i / ROWS, row row_base + i % ROWS clamped to the head's last row.
fn staged_row_index(d: GdnDims, b: u32, hv: u32, row_base: u32, t0: u32, i: u32) -> u32 {
    return v_index(d, b, t0 + i / ROWS, hv, min(row_base + i % ROWS, d.value_dim - 1u));
}

// The state-row kernels' tiling (record, replay, fold_record). One workgroup serves
// ROWS rows dv of one (b, hv) head (shape.wgsl's row_tile). LANES lanes share a row, and
// each invocation holds RPT rows: lane j keeps the state elements of groups
// i = (m * LANES + j) * 4, m < GROUPS, of each of its rows in registers for all T steps
// (the #unroll loops over m, rr and j keep every array index constant, so the arrays
// stay in registers). An invocation whose row lies past Dv holds the clamped last row
// and never stores it.

@group(0) @binding(0) var<uniform> params: GdnParams;

alias StateTile = array<vec4<f32>, GROUPS * RPT>;

// The entry's call (wgsl/entry.wgsl): workgroup `wg`'s tile, handed to the root's
// row_kernel (past the grid, nothing).
fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let d = params.dims;
    row_kernel(d, row_tile(d, params.row_blocks, wg, li), li, sg);
}

// The rows first_dv .. first_dv + RPT of head (b, hv) into `s`, from the state the
// root's load_start_state reads.
fn load_tile(s: ptr<function, StateTile>, d: GdnDims, b: u32, hv: u32, first_dv: u32, lane: u32) {
    {
        let rr = 0u;
        let srow = state_row(d, b, hv, min(first_dv + rr, d.value_dim - 1u));
        {
            let m = 0u;
            (*s)[rr * GROUPS + m] = load_start_state(srow, lane_col(m, lane), d.key_dim);
        }
        {
            let m = 1u;
            (*s)[rr * GROUPS + m] = load_start_state(srow, lane_col(m, lane), d.key_dim);
        }
    }
    {
        let rr = 1u;
        let srow = state_row(d, b, hv, min(first_dv + rr, d.value_dim - 1u));
        {
            let m = 0u;
            (*s)[rr * GROUPS + m] = load_start_state(srow, lane_col(m, lane), d.key_dim);
        }
        {
            let m = 1u;
            (*s)[rr * GROUPS + m] = load_start_state(srow, lane_col(m, lane), d.key_dim);
        }
    }
    {
        let rr = 2u;
        let srow = state_row(d, b, hv, min(first_dv + rr, d.value_dim - 1u));
        {
            let m = 0u;
            (*s)[rr * GROUPS + m] = load_start_state(srow, lane_col(m, lane), d.key_dim);
        }
        {
            let m = 1u;
            (*s)[rr * GROUPS + m] = load_start_state(srow, lane_col(m, lane), d.key_dim);
        }
    }
    {
        let rr = 3u;
        let srow = state_row(d, b, hv, min(first_dv + rr, d.value_dim - 1u));
        {
            let m = 0u;
            (*s)[rr * GROUPS + m] = load_start_state(srow, lane_col(m, lane), d.key_dim);
        }
        {
            let m = 1u;
            (*s)[rr * GROUPS + m] = load_start_state(srow, lane_col(m, lane), d.key_dim);
        }
    }
}

// The state rows an invocation holds (tile_load.wgsl), stored by the root's
// store_end_state: only the rows that lie inside the head, each by the one invocation
// that holds it.
fn store_tile(s: ptr<function, StateTile>, d: GdnDims, b: u32, hv: u32, first_dv: u32, lane: u32) {
    {
        let rr = 0u;
        if first_dv + rr < d.value_dim {
            let srow = state_row(d, b, hv, first_dv + rr);
            {
                let m = 0u;
                store_end_state(srow, lane_col(m, lane), d.key_dim, (*s)[rr * GROUPS + m]);
            }
            {
                let m = 1u;
                store_end_state(srow, lane_col(m, lane), d.key_dim, (*s)[rr * GROUPS + m]);
            }
        }
    }
    {
        let rr = 1u;
        if first_dv + rr < d.value_dim {
            let srow = state_row(d, b, hv, first_dv + rr);
            {
                let m = 0u;
                store_end_state(srow, lane_col(m, lane), d.key_dim, (*s)[rr * GROUPS + m]);
            }
            {
                let m = 1u;
                store_end_state(srow, lane_col(m, lane), d.key_dim, (*s)[rr * GROUPS + m]);
            }
        }
    }
    {
        let rr = 2u;
        if first_dv + rr < d.value_dim {
            let srow = state_row(d, b, hv, first_dv + rr);
            {
                let m = 0u;
                store_end_state(srow, lane_col(m, lane), d.key_dim, (*s)[rr * GROUPS + m]);
            }
            {
                let m = 1u;
                store_end_state(srow, lane_col(m, lane), d.key_dim, (*s)[rr * GROUPS + m]);
            }
        }
    }
    {
        let rr = 3u;
        if first_dv + rr < d.value_dim {
            let srow = state_row(d, b, hv, first_dv + rr);
            {
                let m = 0u;
                store_end_state(srow, lane_col(m, lane), d.key_dim, (*s)[rr * GROUPS + m]);
            }
            {
                let m = 1u;
                store_end_state(srow, lane_col(m, lane), d.key_dim, (*s)[rr * GROUPS + m]);
            }
        }
    }
}

// The steps of sequence b that replay (or fold_record's fold) folds: accepted[b]
// clamped to T. A count on the GPU is data the host could not check: one above T is
// clamped and, when a status buffer is bound, flagged there (by the first row block of
// the first value head: once per sequence). The whole workgroup serves one sequence,
// so the count is uniform: it reaches every invocation through workgroup memory.

var<workgroup> steps_shared: u32;

fn accepted_steps(d: GdnDims, b: u32, hv: u32, row_base: u32, li: u32) -> u32 {
    if li == 0u {
        let given = load_accepted(b);
        steps_shared = min(given, d.steps);
    }
    return workgroupUniformLoad(&steps_shared);
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

// Replay's fold (docs/SPEC.md "replay"): S = S * g_t + k_t delta_t over the first
// `steps` steps of a tape, onto the state rows an invocation holds in registers (the
// tiling of tile_load.wgsl); no reduction. Replay folds its tape, a masked step
// keeping S (select); fold_record (FOLD) the pending tape's accepted steps before its
// own record steps, with record's vec4 gate_stage (g in x).
//
// Staged as record's steps are, CHUNK steps at a time in the root's k_stage, row_stage
// (the tape's delta) and gate_stage; the next chunk's global loads are issued
// (fetch_fold_chunk, into the next_fold_* registers) before the current chunk is folded.

alias FoldKRaw = tape_k_raw;
alias FoldDeltaRaw = tape_delta_raw1;
alias FoldGRaw = tape_g_raw1;
var<private> next_fold_k: array<FoldKRaw, KQ_ITEMS>;
var<private> next_fold_delta: array<FoldDeltaRaw, V_ITEMS>;
var<private> next_fold_g: FoldGRaw;

// Issue the global loads of the tape's steps t0 .. t0 + CHUNK (t0 < steps).
fn fetch_fold_chunk(d: GdnDims, b: u32, hv: u32, hk: u32, row_base: u32, t0: u32, steps: u32, li: u32) {
    let n = min(CHUNK, steps - t0);
    {
        let j = 0u;
        let i = li + j * WG_SIZE;
        if i / STAGED < n {
            next_fold_k[j] = raw_tape_k(tape_k_row(d, b, t0 + i / STAGED, hv), (i % STAGED) * 4u, d.key_dim);
        }
    }
    {
        let j = 1u;
        let i = li + j * WG_SIZE;
        if i / STAGED < n {
            next_fold_k[j] = raw_tape_k(tape_k_row(d, b, t0 + i / STAGED, hv), (i % STAGED) * 4u, d.key_dim);
        }
    }
    {
        let j = 0u;
        let i = li + j * WG_SIZE;
        if i / ROWS < n {
            next_fold_delta[j] = raw1_tape_delta(staged_row_index(d, b, hv, row_base, t0, i));
        }
    }
    {
        let j = 1u;
        let i = li + j * WG_SIZE;
        if i / ROWS < n {
            next_fold_delta[j] = raw1_tape_delta(staged_row_index(d, b, hv, row_base, t0, i));
        }
    }
    if li < n {
        let gi = gate_index(d, b, t0 + li, hv);
        next_fold_g = raw1_tape_g(gi);
    }
}

// Convert the fetched chunk t0 .. t0 + CHUNK into workgroup memory (a delta's element
// index only picks the half of a bf16 word). Slots past the last step hold stale values
// nobody reads.
fn stage_fold_chunk(d: GdnDims, b: u32, hv: u32, row_base: u32, t0: u32, li: u32) {
    {
        let j = 0u;
        let i = li + j * WG_SIZE;
        if i < CHUNK * STAGED {
            let col = (i % STAGED) * 4u;
            k_stage[i] = unpack_tape_k(next_fold_k[j], col, d.key_dim);
        }
    }
    {
        let j = 1u;
        let i = li + j * WG_SIZE;
        if i < CHUNK * STAGED {
            let col = (i % STAGED) * 4u;
            k_stage[i] = unpack_tape_k(next_fold_k[j], col, d.key_dim);
        }
    }
    {
        let j = 0u;
        let i = li + j * WG_SIZE;
        if i < CHUNK * ROWS {
            let vi = staged_row_index(d, b, hv, row_base, t0, i);
            row_stage[i] = unpack1_tape_delta(next_fold_delta[j], vi);
        }
    }
    {
        let j = 1u;
        let i = li + j * WG_SIZE;
        if i < CHUNK * ROWS {
            let vi = staged_row_index(d, b, hv, row_base, t0, i);
            row_stage[i] = unpack1_tape_delta(next_fold_delta[j], vi);
        }
    }
    if li < CHUNK {
        let gi = gate_index(d, b, t0 + li, hv);
        // Unmasked kernels have no mask binding: every step is live.
        let live = true;
        gate_stage[li] = vec2<f32>(select(1.0, unpack1_tape_g(next_fold_g, gi), live), select(0.0, 1.0, live));
    }
}

// Fold steps 0 .. steps onto s, this invocation's rows (first_row + rr, lane `lane`),
// chunk by chunk; the caller has fetched the first chunk (fetch_fold_chunk at t0 = 0).
// `steps` is uniform over the workgroup (accepted_steps).
fn fold_steps(s: ptr<function, StateTile>, d: GdnDims, b: u32, hv: u32, hk: u32, row_base: u32, first_row: u32, lane: u32, steps: u32, li: u32) {
    for (var ci = 0u; ci < strides(0u, steps, CHUNK); ci++) {
        let t0 = ci * CHUNK;
        workgroupBarrier(); // the previous chunk has been read
        stage_fold_chunk(d, b, hv, row_base, t0, li);
        workgroupBarrier();
        if t0 + CHUNK < steps {
            fetch_fold_chunk(d, b, hv, hk, row_base, t0 + CHUNK, steps, li);
        }
        let n = min(CHUNK, steps - t0);
        for (var c = 0u; c < n; c++) {
            let gate = gate_stage[c];
            // Unmasked kernels know every step is live: the select folds away.
            let live = !HAS_MASK || gate.y != 0.0;
            var delta = array<f32, RPT>();
            {
                let rr = 0u;
                delta[rr] = row_stage[c * ROWS + first_row + rr];
            }
            {
                let rr = 1u;
                delta[rr] = row_stage[c * ROWS + first_row + rr];
            }
            {
                let rr = 2u;
                delta[rr] = row_stage[c * ROWS + first_row + rr];
            }
            {
                let rr = 3u;
                delta[rr] = row_stage[c * ROWS + first_row + rr];
            }
            {
                let m = 0u;
                let kk = k_stage[c * STAGED + m * LANES + lane];
                {
                    let rr = 0u;
                    (*s)[rr * GROUPS + m] = select((*s)[rr * GROUPS + m], (*s)[rr * GROUPS + m] * gate.x + kk * delta[rr], live);
                }
                {
                    let rr = 1u;
                    (*s)[rr * GROUPS + m] = select((*s)[rr * GROUPS + m], (*s)[rr * GROUPS + m] * gate.x + kk * delta[rr], live);
                }
                {
                    let rr = 2u;
                    (*s)[rr * GROUPS + m] = select((*s)[rr * GROUPS + m], (*s)[rr * GROUPS + m] * gate.x + kk * delta[rr], live);
                }
                {
                    let rr = 3u;
                    (*s)[rr * GROUPS + m] = select((*s)[rr * GROUPS + m], (*s)[rr * GROUPS + m] * gate.x + kk * delta[rr], live);
                }
            }
            {
                let m = 1u;
                let kk = k_stage[c * STAGED + m * LANES + lane];
                {
                    let rr = 0u;
                    (*s)[rr * GROUPS + m] = select((*s)[rr * GROUPS + m], (*s)[rr * GROUPS + m] * gate.x + kk * delta[rr], live);
                }
                {
                    let rr = 1u;
                    (*s)[rr * GROUPS + m] = select((*s)[rr * GROUPS + m], (*s)[rr * GROUPS + m] * gate.x + kk * delta[rr], live);
                }
                {
                    let rr = 2u;
                    (*s)[rr * GROUPS + m] = select((*s)[rr * GROUPS + m], (*s)[rr * GROUPS + m] * gate.x + kk * delta[rr], live);
                }
                {
                    let rr = 3u;
                    (*s)[rr * GROUPS + m] = select((*s)[rr * GROUPS + m], (*s)[rr * GROUPS + m] * gate.x + kk * delta[rr], live);
                }
            }
        }
    }
}

// state_replay (docs/SPEC.md "replay"): fold the first accepted[b] steps of the tape
// onto the pre-draft snapshot, S = S * g_t + k_t delta_t; no reduction
// (wgsl/fold_steps.wgsl, staged as wgsl/staging.wgsl says). accepted[b] is data on the
// GPU-resident path and cannot be checked on the host: it is clamped to T and flagged
// in `status` when bound (wgsl/accepted_count.wgsl, shared with fold_record). In place
// (no snapshot bound: the state is read from state_out and written back): every valid
// row is read and written by the one invocation that holds it, reads before writes. An
// invocation whose row lies past Dv reads the clamped last row, which another
// invocation may be writing, and discards what it read.

var<workgroup> k_stage: array<vec4<f32>, CHUNK * STAGED>;
var<workgroup> row_stage: array<f32, CHUNK * ROWS>; // the tape's delta
var<workgroup> gate_stage: array<vec2<f32>, CHUNK>; // g, live

fn load_start_state(srow: u32, col: u32, key_dim: u32) -> vec4<f32> {
    return load_snapshot(srow, col, key_dim);
}

fn store_end_state(srow: u32, col: u32, key_dim: u32, v: vec4<f32>) {
    store_state_out(srow, col, key_dim, v);
}

fn row_kernel(d: GdnDims, tile: RowTile, li: u32, sg: u32) {
    let hk = 0u; // unused: the tape's k is expanded to value heads
    let first_dv = tile.row_base + tile.first_row;
    var s: StateTile;
    load_tile(&s, d, tile.b, tile.hv, first_dv, tile.lane);
    let steps = accepted_steps(d, tile.b, tile.hv, tile.row_base, li);
    fetch_fold_chunk(d, tile.b, tile.hv, hk, tile.row_base, 0u, steps, li);
    fold_steps(&s, d, tile.b, tile.hv, hk, tile.row_base, tile.first_row, tile.lane, steps, li);
    store_tile(&s, d, tile.b, tile.hv, first_dv, tile.lane);
}
