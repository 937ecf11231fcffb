#import shape
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
#import staging
#import state_rows
#provides kernel_main, params, fetch_k, fetch_q, fetch_row, fetch_gate, load_state_row
#requires load_k, load_q, load1_v, load1_g, load1_beta, load_state_in
#if HAS_TAPE_K_GROUPED
#requires store_tape_k_grouped, first_value_head
#endif
#if HAS_TAPE_G
#if GATE_BF16
#requires store2_tape_g
#else
#requires store1_tape_g
#endif
#endif
#requires row_sum3, emit_row, row_tile, lane_col, key_head, qk_row, v_index
// gated_delta_step_record (docs/SPEC.md "record"): the GatedDeltaNet forward step that also
// writes each step's delta to the innovation tape (and, when bound, the tape's copies of
// k and g, so that a draft is one dispatch; state_out only when bound).
//
// One workgroup serves ROWS rows dv of one (b, hv) head. LANES lanes share a row, and
// each invocation holds RPT rows (state_rows.wgsl). Per step and row one reduction gives
// the three dot products the step needs: with S' = S * g,
//   delta = (v - S'.k) * beta,  S'' = S' + k delta,  y = S''.q = S'.q + delta (k.q).
// Masked steps go through select (no divergent control flow around the reduction):
// S is kept, y and delta are written as zeros. The steps' k, q, v and gates are staged
// in workgroup memory (staging.wgsl).

@group(0) @binding(0) var<uniform> params: GdnParams;

fn load_state_row(srow: u32, col: u32, n: u32) -> vec4<f32> {
    return load_state_in(srow, col, n);
}

// k[b, t, hk, col..col + 4]. With the tape's k bound, its one writer per element is the
// first row block of the first value head that hk serves.
fn fetch_k(d: GdnDims, tile: RowTile, hk: u32, t: u32, col: u32) -> vec4<f32> {
    let row = qk_row(d, tile.b, t, hk);
    let k = load_k(row, col, d.key_dim);
#if HAS_TAPE_K_GROUPED
    if tile.row_base == 0u && tile.hv == first_value_head(params.gqa_layout, hk, d.key_heads, d.value_heads) {
        store_tape_k_grouped(row, col, d.key_dim, k);
    }
#endif
    return k;
}

fn fetch_q(d: GdnDims, tile: RowTile, hk: u32, t: u32, col: u32) -> vec4<f32> {
    return load_q(qk_row(d, tile.b, t, hk), col, d.key_dim);
}

fn fetch_row(i: u32) -> f32 {
    return load1_v(i);
}

// (g, or 1 where masked; beta; live; 0). With the tape's g bound, the first row block of
// each head writes its gate.
fn fetch_gate(d: GdnDims, tile: RowTile, gi: u32, live: bool) -> vec4<f32> {
    let g = load1_g(gi);
#if HAS_TAPE_G
    if tile.row_base == 0u {
#if GATE_BF16
        // A bf16 word holds two gates, maybe of two heads: its even element's writer
        // writes both halves (the odd one read from g, which nobody writes).
        if (gi & 1u) == 0u {
            store2_tape_g(gi, g, load1_g(gi + 1u));
        }
#else
        store1_tape_g(gi, g);
#endif
    }
#endif
    return vec4<f32>(select(1.0, g, live), load1_beta(gi), select(0.0, 1.0, live), 0.0);
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let d = params.dims;
    let tile = row_tile(d, params.row_blocks, wg, li);
    let hk = key_head(params.gqa_layout, tile.hv, d.key_heads, d.value_heads);
    let first_dv = tile.row_base + tile.first_row;
    var s = load_rows(d, tile);

    fetch_chunk(d, tile, hk, 0u, d.steps, li);
    for (var t0 = 0u; t0 < d.steps; t0 += CHUNK) {
        let n = next_chunk(d, tile, hk, t0, d.steps, li);
        for (var c = 0u; c < n; c++) {
            let t = t0 + c;
            let gate = gate_stage[c];
            // Unmasked kernels know every step is live: the selects fold away.
            let live = !HAS_MASK || gate.z != 0.0;
            let g = gate.x;
            let beta = gate.y;

            var kk: array<vec4<f32>, GROUPS>;
            var part = array<vec2<f32>, RPT>();
            var kq = 0.0;
            #unroll
            for (var m = 0u; m < GROUPS; m++) {
                kk[m] = k_stage[c * STAGED + m * LANES + tile.lane];
                let qq = q_stage[c * STAGED + m * LANES + tile.lane];
                kq += dot(kk[m], qq);
                #unroll
                for (var rr = 0u; rr < RPT; rr++) {
                    s[rr * GROUPS + m] = s[rr * GROUPS + m] * g;
                    part[rr] += vec2<f32>(dot(s[rr * GROUPS + m], kk[m]), dot(s[rr * GROUPS + m], qq));
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
                    s[rr * GROUPS + m] = s[rr * GROUPS + m] + select(vec4<f32>(0.0), kk[m] * delta, live);
                }
                let vi = v_index(d, tile.b, t, tile.hv, min(dv_unclamped, d.value_dim - 1u));
                let valid = dv_unclamped < d.value_dim;
                emit_row(li, tile.first_row + rr, vi, valid, select(0.0, y, live), select(0.0, delta, live), t);
            }
        }
    }
#if HAS_STATE_OUT
    store_rows(d, tile, s);
#endif
}
