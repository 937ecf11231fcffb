// gated_delta_step_record (SPEC.md "record"): the GatedDeltaNet forward step that also
// writes each step's delta to the innovation tape.
//
// One workgroup serves ROWS rows dv of one (b, hv) head. LANES lanes share a row, and
// each invocation holds RPT rows in registers (state_rows.wgsl). Per step and row one
// reduction gives the three dot products the step needs: with S' = S * g,
//   delta = (v - S'.k) * beta,  S'' = S' + k delta,  y = S''.q = S'.q + delta (k.q).
// Masked steps go through select (no divergent control flow around the reduction):
// S is kept, y and delta are written as zeros. k, q, v, g, beta and the mask are staged
// (stage.wgsl; each staged k / q value an invocation reads serves its RPT rows).
#import shape
#import stage
#import state_rows
#if HAS_BF16
#import bf16
#endif
#if SUBGROUP
#import entry_subgroup
#import row_sum_subgroup
#else
#import entry
#import row_sum_workgroup
#endif
#if PAIRS_OUTPUTS
#import record_emit_pairs
#else
#import record_emit_direct
#endif
#provides kernel_main, params, Gate, fetch_k, fetch_q, fetch_row_value, fetch_gate
#provides load_initial_state, fold_step
#requires load_k, load_q, load1_v, load1_g, load1_beta, load_state_in, row_sum3, emit_row

@group(0) @binding(0) var<uniform> params: GdnParams;

alias Gate = vec4<f32>; // g (1 where masked), beta, live

fn fetch_k(d: GdnDims, b: u32, t: u32, hv: u32, hk: u32, col: u32) -> vec4<f32> {
    return load_k(qk_row(d, b, t, hk), col, d.key_dim);
}

fn fetch_q(d: GdnDims, b: u32, t: u32, hv: u32, hk: u32, col: u32) -> vec4<f32> {
    return load_q(qk_row(d, b, t, hk), col, d.key_dim);
}

fn fetch_row_value(i: u32) -> f32 {
    return load1_v(i);
}

fn fetch_gate(d: GdnDims, b: u32, t: u32, hv: u32) -> Gate {
    let gi = gate_index(d, b, t, hv);
    let live = step_live(d, b, t);
    return vec4<f32>(select(1.0, load1_g(gi), live), load1_beta(gi), select(0.0, 1.0, live), 0.0);
}

fn load_initial_state(base: u32, i: u32, n: u32) -> vec4<f32> {
    return load_state_in(base, i, n);
}

// Staged step c (step t) for the invocation's rows.
fn fold_step(d: GdnDims, tile: RowTile, c: u32, t: u32, li: u32, sg: u32) {
    let first_dv = tile.row_base + tile.first_row;
    let gate = gate_stage[c];
    // Unmasked kernels know every step is live: the selects fold away.
    let live = !MASKED || gate.z != 0.0;
    let g = gate.x;
    let beta = gate.y;

    var kk = array<vec4<f32>, GROUPS>();
    var part = array<vec2<f32>, RPT>();
    var kq = 0.0;
    #unroll
    for (var m = 0u; m < GROUPS; m++) {
        kk[m] = k_stage[c * STAGED + m * LANES + tile.lane];
        let qq = q_stage[c * STAGED + m * LANES + tile.lane];
        kq += dot(kk[m], qq);
        #unroll
        for (var rr = 0u; rr < RPT; rr++) {
            st[rr * GROUPS + m] = st[rr * GROUPS + m] * g;
            part[rr] += vec2<f32>(dot(st[rr * GROUPS + m], kk[m]), dot(st[rr * GROUPS + m], qq));
        }
    }
    #unroll
    for (var rr = 0u; rr < RPT; rr++) {
        let sums = row_sum3(vec3<f32>(part[rr], kq), li, sg);
        let dv_unclamped = first_dv + rr;
        let delta = (row_stage[c * ROWS + tile.first_row + rr] - sums.x) * beta;
        let y = sums.y + delta * sums.z;
        #unroll
        for (var m = 0u; m < GROUPS; m++) {
            st[rr * GROUPS + m] = st[rr * GROUPS + m] + select(vec4<f32>(0.0), kk[m] * delta, live);
        }
        let vi = v_index(d, tile.b, t, tile.hv, min(dv_unclamped, d.value_dim - 1u));
        let valid = dv_unclamped < d.value_dim;
        emit_row(li, tile.first_row + rr, vi, valid, select(0.0, y, live), select(0.0, delta, live), t);
    }
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let d = params.dims;
    let tile = row_tile(d, params.row_blocks, wg, li);
    let hk = key_head(params.gqa_layout, tile.hv, d.key_heads, d.value_heads);
    load_state_rows(d, tile);
    run_chunks(d, tile, hk, d.steps, li, sg);
    store_state_rows(d, tile);
}
