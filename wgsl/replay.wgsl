#import shape
#if HAS_BF16
#import bf16
#endif
#import entry
#provides kernel_main, params
#requires load1_tape_delta, load1_tape_g, load_accepted, store_state_out
#if HAS_TAPE_K_GROUPED
#requires load_tape_k_grouped, qk_row, key_head
#else
#requires load_tape_k, tape_k_row
#endif
#if HAS_SNAPSHOT
#requires load_snapshot
#else
#requires load_state_out
#endif
#if HAS_MASK
#requires load_mask
#endif
#if HAS_STATUS
#requires store_status
#endif
#requires row_tile, lane_col, state_row, v_index, gate_index
// state_replay (docs/SPEC.md "replay"): fold the first accepted[b] steps of the innovation
// tape onto the pre-draft snapshot, S = S * g_t + k_t delta_t. No reduction: as in
// record.wgsl, LANES lanes share a row, each invocation holds RPT rows and lane j keeps
// the groups i = (m * LANES + j) * 4, m < GROUPS, of each in registers. The steps' k
// rows (the same for the whole head), the workgroup's deltas and the gates are staged
// CHUNK steps at a time in workgroup memory, the next chunk's global loads issued before
// the current chunk is folded; each staged k value an invocation reads serves its RPT
// rows. accepted[b] is data on the GPU-resident path and cannot be checked on the host:
// it is clamped to T here, and flagged in `status` when bound.
//
// In place (no snapshot bound: the state is read from state_out and written back):
// every valid row is read and written by the one invocation that holds it, reads
// before writes. An invocation whose row lies past Dv reads the clamped last row, which
// another invocation may be writing, and discards what it read.

@group(0) @binding(0) var<uniform> params: GdnParams;

const STAGED: u32 = GROUPS * LANES; // vec4s of one k row

var<workgroup> k_stage: array<vec4<f32>, CHUNK * STAGED>;
var<workgroup> delta_stage: array<f32, CHUNK * ROWS>;
var<workgroup> gate_stage: array<vec2<f32>, CHUNK>; // g, live
var<workgroup> steps_shared: u32;

// One invocation's share of the next chunk, on its way from global to workgroup memory
// (private: registers, once the loops over j are unrolled).
var<private> next_k: array<vec4<f32>, KQ_ITEMS>;
var<private> next_delta: array<f32, V_ITEMS>;
var<private> next_gate: vec2<f32>;

// Issue the global loads of the chunk of steps t0 .. t0 + CHUNK (t0 < steps).
fn fetch_chunk(d: GdnDims, b: u32, hv: u32, hk: u32, row_base: u32, t0: u32, steps: u32, li: u32) {
    let n = min(CHUNK, steps - t0);
    #unroll
    for (var j = 0u; j < KQ_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i / STAGED < n {
#if HAS_TAPE_K_GROUPED
            next_k[j] = load_tape_k_grouped(qk_row(d, b, t0 + i / STAGED, hk), (i % STAGED) * 4u, d.key_dim);
#else
            next_k[j] = load_tape_k(tape_k_row(d, b, t0 + i / STAGED, hv), (i % STAGED) * 4u, d.key_dim);
#endif
        }
    }
    #unroll
    for (var j = 0u; j < V_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i / ROWS < n {
            let dv = min(row_base + i % ROWS, d.value_dim - 1u);
            next_delta[j] = load1_tape_delta(v_index(d, b, t0 + i / ROWS, hv, dv));
        }
    }
    if li < n {
        // Unmasked kernels have no mask binding: every step is live.
#if HAS_MASK
        let live = load_mask(mask_index(d, b, t0 + li)) != 0u;
#else
        let live = true;
#endif
        next_gate = vec2<f32>(load1_tape_g(gate_index(d, b, t0 + li, hv)), select(0.0, 1.0, live));
    }
}

fn stage_chunk(li: u32) {
    #unroll
    for (var j = 0u; j < KQ_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i < CHUNK * STAGED {
            k_stage[i] = next_k[j];
        }
    }
    #unroll
    for (var j = 0u; j < V_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i < CHUNK * ROWS {
            delta_stage[i] = next_delta[j];
        }
    }
    if li < CHUNK {
        gate_stage[li] = next_gate;
    }
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let d = params.dims;
    let tile = row_tile(d, params.row_blocks, wg, li);
    let b = tile.b;
    let hv = tile.hv;
#if HAS_TAPE_K_GROUPED
    let hk = key_head(params.gqa_layout, hv, d.key_heads, d.value_heads);
#else
    let hk = 0u; // unused: the tape's k is expanded to value heads
#endif
    let lane = tile.lane;
    let row_base = tile.row_base;
    let first_row = tile.first_row;
    let first_dv = row_base + first_row;

    var s: array<vec4<f32>, GROUPS * RPT>;
    #unroll
    for (var rr = 0u; rr < RPT; rr++) {
        let srow = state_row(d, b, hv, min(first_dv + rr, d.value_dim - 1u));
        #unroll
        for (var m = 0u; m < GROUPS; m++) {
#if HAS_SNAPSHOT
            s[rr * GROUPS + m] = load_snapshot(srow, lane_col(m, lane), d.key_dim);
#else
            s[rr * GROUPS + m] = load_state_out(srow, lane_col(m, lane), d.key_dim);
#endif
        }
    }

    // The whole workgroup is one sequence: its step count is uniform.
    if li == 0u {
        let given = load_accepted(b);
        steps_shared = min(given, d.steps);
#if HAS_STATUS
        if given > d.steps && hv == 0u && row_base == 0u {
            store_status(b, given);
        }
#endif
    }
    let steps = workgroupUniformLoad(&steps_shared);
    fetch_chunk(d, b, hv, hk, row_base, 0u, steps, li);
    for (var t0 = 0u; t0 < steps; t0 += CHUNK) {
        workgroupBarrier(); // the previous chunk has been read
        stage_chunk(li);
        workgroupBarrier();
        if t0 + CHUNK < steps {
            fetch_chunk(d, b, hv, hk, row_base, t0 + CHUNK, steps, li);
        }
        let n = min(CHUNK, steps - t0);
        for (var c = 0u; c < n; c++) {
            let gate = gate_stage[c];
            // Unmasked kernels know every step is live: the select folds away.
            let live = !HAS_MASK || gate.y != 0.0;
            var delta = array<f32, RPT>();
            #unroll
            for (var rr = 0u; rr < RPT; rr++) {
                delta[rr] = delta_stage[c * ROWS + first_row + rr];
            }
            #unroll
            for (var m = 0u; m < GROUPS; m++) {
                let kk = k_stage[c * STAGED + m * LANES + lane];
                #unroll
                for (var rr = 0u; rr < RPT; rr++) {
                    s[rr * GROUPS + m] = select(s[rr * GROUPS + m], s[rr * GROUPS + m] * gate.x + kk * delta[rr], live);
                }
            }
        }
    }

    #unroll
    for (var rr = 0u; rr < RPT; rr++) {
        if first_dv + rr < d.value_dim {
            let srow = state_row(d, b, hv, first_dv + rr);
            #unroll
            for (var m = 0u; m < GROUPS; m++) {
                store_state_out(srow, lane_col(m, lane), d.key_dim, s[rr * GROUPS + m]);
            }
        }
    }
}
