#import staging
#import strides
#if HAS_LAYER
#import layer_staging
#else
#import record_staging
#endif
#if SUBGROUP
#import entry_subgroup
#import row_sum_subgroup
#else
#import entry
#import row_sum_workgroup
#endif
#if PAIRS_OUTPUTS
#if PAIRS_IN_THREAD
#import record_emit_pairs_local
#else
#import record_emit_pairs
#endif
#else
#import record_emit_direct
#endif
#provides k_stage, q_stage, row_stage, gate_stage, record_steps
#requires StateTile, RowTile, GdnDims, fetch_chunk, stage_chunk, row_sum3, emit_row
#requires v_index, HAS_MASK
// gated_delta_step_record (docs/SPEC.md "record") over every step of a draft, on the
// state rows an invocation holds (tile_load.wgsl): record's and fold_record's steps.
// Per step and row one reduction gives the three dot products the step needs: with
// S' = S * g,
//   delta = (v - S'.k) * beta,  S'' = S' + k delta,  y = S''.q = S'.q + delta (k.q).
// Masked steps go through select (no divergent control flow around the reduction): S
// is kept, y and delta are written as zeros. The steps' inputs are staged a chunk at a
// time (staging.wgsl, record_staging.wgsl).
//
// The staging picks its buffers by #if, not through hook functions shared with replay:
// shared staging measured f32 record 5-19% slower on the H200 at B >= 64, traced to the
// tape k writer test computed where unused (commit 28c208e). That A/B left
// benches/results in 2a44eae:
// `git show 2a44eae^:benches/results/h200-2026-11-30-staging-ab.txt`.

#if SCALED_STATE
// Record's state scale stays in (2^-40, 2^40) (see record_steps).
const SCALE_MIN: f32 = 9.094947e-13;
const SCALE_MAX: f32 = 1.0995116e12;
#endif

var<workgroup> k_stage: array<vec4<f32>, CHUNK * STAGED>;
var<workgroup> q_stage: array<vec4<f32>, CHUNK * STAGED>;
var<workgroup> row_stage: array<f32, CHUNK * ROWS>; // v (fold_record's fold: the delta)
var<workgroup> gate_stage: array<vec4<f32>, CHUNK>; // g (1 where masked), beta, live

#if SCALED_STATE
// The scale folded back into the state.
fn scale_tile(s: ptr<function, StateTile>, scale: f32) {
    #unroll
    for (var rr = 0u; rr < RPT; rr++) {
        #unroll
        for (var m = 0u; m < GROUPS; m++) {
            (*s)[rr * GROUPS + m] *= scale;
        }
    }
}
#endif

// Every step of the draft from the state in `s`; the first chunk has been fetched
// (fetch_chunk from step 0), so that a root can overlap its latency with other work.
fn record_steps(s: ptr<function, StateTile>, d: GdnDims, tile: RowTile, hk: u32, li: u32, sg: u32) {
    let b = tile.b;
    let hv = tile.hv;
    let lane = tile.lane;
    let row_base = tile.row_base;
    let first_row = tile.first_row;
    let first_dv = row_base + first_row;
#if SCALED_STATE
    // The state is scale * s (KernelKey::scaled_state): a step's decay multiplies the
    // scale, the head's and so the same for every row of the workgroup. It is folded
    // back into s when it leaves (SCALE_MIN, SCALE_MAX), so that s and delta / scale
    // stay far from f32's limits (at once when a gate is 0 or not finite, as S * g).
    var scale = 1.0;
#endif
    for (var ci = 0u; ci < strides(0u, d.steps, CHUNK); ci++) {
        let t0 = ci * CHUNK;
        workgroupBarrier(); // the previous chunk has been read
#if HAS_LAYER
        stage_chunk(d, b, hv, hk, row_base, t0, li, sg);
#else
        stage_chunk(d, b, hv, hk, row_base, t0, li);
#endif
        workgroupBarrier();
        if t0 + CHUNK < d.steps {
            fetch_chunk(d, b, hv, hk, row_base, t0 + CHUNK, li);
        }

        let n = min(CHUNK, d.steps - t0);
        for (var c = 0u; c < n; c++) {
            let t = t0 + c;
            let gate = gate_stage[c];
            // Unmasked kernels know every step is live: the selects fold away.
            let live = !HAS_MASK || gate.z != 0.0;
            let g = gate.x;
            let beta = gate.y;
#if SCALED_STATE
            scale *= g;
            if !(abs(scale) >= SCALE_MIN && abs(scale) <= SCALE_MAX) {
                scale_tile(s, scale);
                scale = 1.0;
            }
            let inv_scale = 1.0 / scale;
#endif

            var kk: array<vec4<f32>, GROUPS>;
            var part = array<vec2<f32>, RPT>();
            var kq = 0.0;
            #unroll
            for (var m = 0u; m < GROUPS; m++) {
                kk[m] = k_stage[c * STAGED + m * LANES + lane];
                let qq = q_stage[c * STAGED + m * LANES + lane];
                kq += dot(kk[m], qq);
                #unroll
                for (var rr = 0u; rr < RPT; rr++) {
#if !SCALED_STATE
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] * g;
#endif
                    part[rr] += vec2<f32>(dot((*s)[rr * GROUPS + m], kk[m]), dot((*s)[rr * GROUPS + m], qq));
                }
            }
            #unroll
            for (var rr = 0u; rr < RPT; rr++) {
#if SCALED_STATE
                // (S * g).k and (S * g).q: the decay is in the scale.
                let sums = row_sum3(vec3<f32>(part[rr] * scale, kq), li, sg);
#else
                let sums = row_sum3(vec3<f32>(part[rr], kq), li, sg);
#endif
                let dv_unclamped = first_dv + rr;
                let delta = (row_stage[c * ROWS + first_row + rr] - sums.x) * beta;
                let y = sums.y + delta * sums.z;
#if SCALED_STATE
                // A masked step's k may be NaN: selected away, not multiplied by 0.
                let step = delta * inv_scale;
                #unroll
                for (var m = 0u; m < GROUPS; m++) {
                    (*s)[rr * GROUPS + m] += select(vec4<f32>(0.0), kk[m] * step, live);
                }
#else
                #unroll
                for (var m = 0u; m < GROUPS; m++) {
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] + select(vec4<f32>(0.0), kk[m] * delta, live);
                }
#endif
                let vi = v_index(d, b, t, hv, min(dv_unclamped, d.value_dim - 1u));
                let valid = dv_unclamped < d.value_dim;
                emit_row(li, first_row + rr, vi, valid, select(0.0, y, live), select(0.0, delta, live), t);
            }
        }
    }
#if SCALED_STATE
    scale_tile(s, scale);
#endif
}
