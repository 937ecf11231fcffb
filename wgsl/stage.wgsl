// Staging of record and replay (the op's file defines the hooks). Everything a step
// reads besides the state is staged CHUNK steps at a time in workgroup memory: the k
// (and q) rows, the same for every row of the head; one value per row of the workgroup
// (v, or the tape's delta); one gate per step. The next chunk's global loads are issued
// before the current chunk is folded and land in registers (next_*: private arrays
// indexed by constants once the loops over j are unrolled), so their latency hides
// behind the arithmetic instead of stalling every step.
//
// Hooks: fetch_k / fetch_q (vec4 of a step's k / q row at column col), fetch_row_value
// (a row's value at v_index), fetch_gate (a step's Gate, the op's type alias) and
// fold_step (one step, reading the *_stage arrays).
#import shape
#provides STAGED, k_stage, row_stage, gate_stage, step_live, fetch_chunk, stage_chunk
#provides run_chunks
#requires fetch_k, fetch_row_value, fetch_gate, Gate, fold_step
#requires CHUNK, KQ_ITEMS, V_ITEMS, WG_SIZE, ROWS, GROUPS, LANES
#if STAGE_Q
#provides q_stage
#requires fetch_q
#endif
#if MASKED
#requires load_mask
#endif

const STAGED: u32 = GROUPS * LANES; // vec4s of one k (or q) row

var<workgroup> k_stage: array<vec4<f32>, CHUNK * STAGED>;
#if STAGE_Q
var<workgroup> q_stage: array<vec4<f32>, CHUNK * STAGED>;
#endif
var<workgroup> row_stage: array<f32, CHUNK * ROWS>;
var<workgroup> gate_stage: array<Gate, CHUNK>;

// One invocation's share of the next chunk, on its way to workgroup memory.
var<private> next_k: array<vec4<f32>, KQ_ITEMS>;
#if STAGE_Q
var<private> next_q: array<vec4<f32>, KQ_ITEMS>;
#endif
var<private> next_row: array<f32, V_ITEMS>;
var<private> next_gate: Gate;

// Whether step t of sequence b counts (unmasked kernels: always, and selects fold away).
fn step_live(d: GdnDims, b: u32, t: u32) -> bool {
#if MASKED
    return load_mask(mask_index(d, b, t)) != 0u;
#else
    return true;
#endif
}

// Issue the global loads of the chunk of steps t0 .. t0 + CHUNK (t0 < steps).
fn fetch_chunk(d: GdnDims, b: u32, hv: u32, hk: u32, row_base: u32, t0: u32, steps: u32, li: u32) {
    let n = min(CHUNK, steps - t0);
    #unroll
    for (var j = 0u; j < KQ_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i / STAGED < n {
            next_k[j] = fetch_k(d, b, t0 + i / STAGED, hv, hk, (i % STAGED) * 4u);
#if STAGE_Q
            next_q[j] = fetch_q(d, b, t0 + i / STAGED, hv, hk, (i % STAGED) * 4u);
#endif
        }
    }
    #unroll
    for (var j = 0u; j < V_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i / ROWS < n {
            let dv = min(row_base + i % ROWS, d.value_dim - 1u);
            next_row[j] = fetch_row_value(v_index(d, b, t0 + i / ROWS, hv, dv));
        }
    }
    if li < n {
        next_gate = fetch_gate(d, b, t0 + li, hv);
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

// Fold steps 0 .. steps (uniform over the workgroup) chunk by chunk: fold_step for each.
fn run_chunks(d: GdnDims, tile: RowTile, hk: u32, steps: u32, li: u32, sg: u32) {
    fetch_chunk(d, tile.b, tile.hv, hk, tile.row_base, 0u, steps, li);
    for (var t0 = 0u; t0 < steps; t0 += CHUNK) {
        workgroupBarrier(); // the previous chunk has been read
        stage_chunk(li);
        workgroupBarrier();
        if t0 + CHUNK < steps {
            fetch_chunk(d, tile.b, tile.hv, hk, tile.row_base, t0 + CHUNK, steps, li);
        }
        let n = min(CHUNK, steps - t0);
        for (var c = 0u; c < n; c++) {
            fold_step(d, tile, c, t0 + c, li, sg);
        }
    }
}
