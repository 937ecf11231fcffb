// state_replay (SPEC.md "replay"): fold the first accepted[b] steps of the innovation
// tape onto the pre-draft snapshot, S = S * g_t + k_t delta_t. No reduction: as in
// record.wgsl, LANES lanes share a row and each invocation holds RPT rows in registers
// (state_rows.wgsl). The steps' k rows, the workgroup's deltas and the gates are staged
// (stage.wgsl); each staged k value an invocation reads serves its RPT rows.
// accepted[b] is data on the GPU-resident path and cannot be checked on the host: it is
// clamped to T here.
#import shape
#import stage
#import state_rows
#if HAS_BF16
#import bf16
#endif
#import entry
#provides kernel_main, params, Gate, fetch_k, fetch_row_value, fetch_gate
#provides load_initial_state, fold_step, steps_shared
#requires load_tape_k, load1_tape_delta, load1_tape_g, load_snapshot, load_accepted

@group(0) @binding(0) var<uniform> params: GdnParams;

alias Gate = vec2<f32>; // g, live

var<workgroup> steps_shared: u32;

fn fetch_k(d: GdnDims, b: u32, t: u32, hv: u32, hk: u32, col: u32) -> vec4<f32> {
    return load_tape_k(tape_k_row(d, b, t, hv), col, d.key_dim);
}

fn fetch_row_value(i: u32) -> f32 {
    return load1_tape_delta(i);
}

fn fetch_gate(d: GdnDims, b: u32, t: u32, hv: u32) -> Gate {
    return vec2<f32>(load1_tape_g(gate_index(d, b, t, hv)), select(0.0, 1.0, step_live(d, b, t)));
}

fn load_initial_state(base: u32, i: u32, n: u32) -> vec4<f32> {
    return load_snapshot(base, i, n);
}

// Staged step c for the invocation's rows.
fn fold_step(d: GdnDims, tile: RowTile, c: u32, t: u32, li: u32, sg: u32) {
    let gate = gate_stage[c];
    // Unmasked kernels know every step is live: the select folds away.
    let live = !MASKED || gate.y != 0.0;
    var delta = array<f32, RPT>();
    #unroll
    for (var rr = 0u; rr < RPT; rr++) {
        delta[rr] = row_stage[c * ROWS + tile.first_row + rr];
    }
    #unroll
    for (var m = 0u; m < GROUPS; m++) {
        let kk = k_stage[c * STAGED + m * LANES + tile.lane];
        #unroll
        for (var rr = 0u; rr < RPT; rr++) {
            st[rr * GROUPS + m] = select(st[rr * GROUPS + m], st[rr * GROUPS + m] * gate.x + kk * delta[rr], live);
        }
    }
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let d = params.dims;
    let tile = row_tile(d, params.row_blocks, wg, li);
    load_state_rows(d, tile);
    // The whole workgroup is one sequence: its step count is uniform.
    if li == 0u {
        steps_shared = min(load_accepted(tile.b), d.steps);
    }
    run_chunks(d, tile, tile.hv, workgroupUniformLoad(&steps_shared), li, sg);
    store_state_rows(d, tile);
}
