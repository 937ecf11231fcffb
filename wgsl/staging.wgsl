#provides STAGED, k_stage, row_stage, gate_stage, fetch_chunk, next_chunk
#requires GROUPS, LANES, ROWS, CHUNK, WG_SIZE, KQ_ITEMS, V_ITEMS, STAGE_Q, HAS_MASK
#requires GdnDims, RowTile, v_index, gate_index, mask_index
#requires fetch_k, fetch_row, fetch_gate
#if STAGE_Q
#provides q_stage
#requires fetch_q
#endif
#if HAS_MASK
#requires load_mask
#endif
// The steps of a draft as record and replay read them: staged CHUNK steps at a time in
// workgroup memory, so that each staged value an invocation reads serves its RPT rows,
// and the next chunk's global loads issued before the current chunk is computed (they
// land in the next_* registers and their latency hides behind the arithmetic). The
// kernel file says what a step's values are: fetch_k (and fetch_q when STAGE_Q) give a
// k (q) row's 4 columns from `col`, fetch_row a value of the workgroup's rows (v or the
// tape's delta), fetch_gate the step's (g, beta, live, 0).

const STAGED: u32 = GROUPS * LANES; // vec4s of one k (or q) row

var<workgroup> k_stage: array<vec4<f32>, CHUNK * STAGED>;
#if STAGE_Q
var<workgroup> q_stage: array<vec4<f32>, CHUNK * STAGED>;
#endif
var<workgroup> row_stage: array<f32, CHUNK * ROWS>;
var<workgroup> gate_stage: array<vec4<f32>, CHUNK>;

// One invocation's share of the next chunk, on its way from global to workgroup memory
// (private: registers, once the loops over j are unrolled).
var<private> next_k: array<vec4<f32>, KQ_ITEMS>;
#if STAGE_Q
var<private> next_q: array<vec4<f32>, KQ_ITEMS>;
#endif
var<private> next_row: array<f32, V_ITEMS>;
var<private> next_gate: vec4<f32>;

// Issue the global loads of the chunk of steps t0 .. t0 + CHUNK (t0 < steps).
fn fetch_chunk(d: GdnDims, tile: RowTile, hk: u32, t0: u32, steps: u32, li: u32) {
    let n = min(CHUNK, steps - t0);
    #unroll
    for (var j = 0u; j < KQ_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i / STAGED < n {
            next_k[j] = fetch_k(d, tile, hk, t0 + i / STAGED, (i % STAGED) * 4u);
#if STAGE_Q
            next_q[j] = fetch_q(d, tile, hk, t0 + i / STAGED, (i % STAGED) * 4u);
#endif
        }
    }
    #unroll
    for (var j = 0u; j < V_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i / ROWS < n {
            let dv = min(tile.row_base + i % ROWS, d.value_dim - 1u);
            next_row[j] = fetch_row(v_index(d, tile.b, t0 + i / ROWS, tile.hv, dv));
        }
    }
    if li < n {
        // Unmasked kernels have no mask binding: every step is live.
#if HAS_MASK
        let live = load_mask(mask_index(d, tile.b, t0 + li)) != 0u;
#else
        let live = true;
#endif
        next_gate = fetch_gate(d, tile, gate_index(d, tile.b, t0 + li, tile.hv), live);
    }
}

fn stage_chunk(li: u32) {
    #unroll
    for (var j = 0u; j < KQ_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i < CHUNK * STAGED {
            k_stage[i] = next_k[j];
#if STAGE_Q
            q_stage[i] = next_q[j];
#endif
        }
    }
    #unroll
    for (var j = 0u; j < V_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i < CHUNK * ROWS {
            row_stage[i] = next_row[j];
        }
    }
    if li < CHUNK {
        gate_stage[li] = next_gate;
    }
}

// Stage the chunk that starts at t0 (fetched by the previous call, or by fetch_chunk
// for t0 = 0) and fetch the one after it; returns the chunk's step count. Every
// invocation calls it, in uniform control flow (steps is uniform).
fn next_chunk(d: GdnDims, tile: RowTile, hk: u32, t0: u32, steps: u32, li: u32) -> u32 {
    workgroupBarrier(); // the previous chunk has been read
    stage_chunk(li);
    workgroupBarrier();
    if t0 + CHUNK < steps {
        fetch_chunk(d, tile, hk, t0 + CHUNK, steps, li);
    }
    return min(CHUNK, steps - t0);
}
