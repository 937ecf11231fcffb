#import shape
#if HAS_BF16
#import bf16
#endif
#import entry
#import staging
#import state_rows
#provides kernel_main, params, fetch_k, fetch_row, fetch_gate, load_state_row
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
#if HAS_STATUS
#requires store_status
#endif
#requires row_tile
// state_replay (docs/SPEC.md "replay"): fold the first accepted[b] steps of the innovation
// tape onto the pre-draft snapshot, S = S * g_t + k_t delta_t. No reduction: as in
// record.wgsl, LANES lanes share a row and each invocation holds RPT rows
// (state_rows.wgsl); the steps' k rows, the workgroup's deltas and the gates are staged
// in workgroup memory (staging.wgsl). accepted[b] is data on the GPU-resident path and
// cannot be checked on the host: it is clamped to T here, and flagged in `status` when
// bound.
//
// In place (no snapshot bound: the state is read from state_out and written back):
// every valid row is read and written by the one invocation that holds it, reads
// before writes. An invocation whose row lies past Dv reads the clamped last row, which
// another invocation may be writing, and discards what it read.

@group(0) @binding(0) var<uniform> params: GdnParams;

var<workgroup> steps_shared: u32;

fn load_state_row(srow: u32, col: u32, n: u32) -> vec4<f32> {
#if HAS_SNAPSHOT
    return load_snapshot(srow, col, n);
#else
    return load_state_out(srow, col, n);
#endif
}

// The tape's k at step t: expanded to value heads, or at key heads through the layout.
fn fetch_k(d: GdnDims, tile: RowTile, hk: u32, t: u32, col: u32) -> vec4<f32> {
#if HAS_TAPE_K_GROUPED
    return load_tape_k_grouped(qk_row(d, tile.b, t, hk), col, d.key_dim);
#else
    return load_tape_k(tape_k_row(d, tile.b, t, tile.hv), col, d.key_dim);
#endif
}

fn fetch_row(i: u32) -> f32 {
    return load1_tape_delta(i);
}

fn fetch_gate(d: GdnDims, tile: RowTile, gi: u32, live: bool) -> vec4<f32> {
    return vec4<f32>(load1_tape_g(gi), 0.0, select(0.0, 1.0, live), 0.0);
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let d = params.dims;
    let tile = row_tile(d, params.row_blocks, wg, li);
#if HAS_TAPE_K_GROUPED
    let hk = key_head(params.gqa_layout, tile.hv, d.key_heads, d.value_heads);
#else
    let hk = 0u; // unused: the tape's k is expanded to value heads
#endif
    var s = load_rows(d, tile);

    // The whole workgroup is one sequence: its step count is uniform.
    if li == 0u {
        let given = load_accepted(tile.b);
        steps_shared = min(given, d.steps);
#if HAS_STATUS
        if given > d.steps && tile.hv == 0u && tile.row_base == 0u {
            store_status(tile.b, given);
        }
#endif
    }
    let steps = workgroupUniformLoad(&steps_shared);
    fetch_chunk(d, tile, hk, 0u, steps, li);
    for (var t0 = 0u; t0 < steps; t0 += CHUNK) {
        let n = next_chunk(d, tile, hk, t0, steps, li);
        for (var c = 0u; c < n; c++) {
            let gate = gate_stage[c];
            // Unmasked kernels know every step is live: the select folds away.
            let live = !HAS_MASK || gate.z != 0.0;
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
                    s[rr * GROUPS + m] = select(s[rr * GROUPS + m], s[rr * GROUPS + m] * gate.x + kk * delta[rr], live);
                }
            }
        }
    }
    store_rows(d, tile, s);
}
