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
#requires StateTile, RowTile, GdnDims, fetch_chunk, stage_chunk, row_sum3, row_sum4, emit_row
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
// With STEPS_PER_SUM = M > 1 (MULTI_STEP: a class of record's for grids too small to
// hide a step's latency, where the row's reduction is the chain each step waits on; the
// table's default is one step) the steps go M at a time from the state S they start
// from, one reduction for the group's M. With P_j the product of the group's gates
// through step j and D_ji that of steps i + 1 .. j (running products, no ratios: zero
// gates stay exact), a_j = S.k_j and b_j = S.q_j:
//   delta_j = beta_j (v_j - P_j a_j) - sum_{i<j} beta_j D_ji (k_i.k_j) delta_i
//   y_j     = P_j b_j + sum_{i<=j} D_ji (k_i.q_j) delta_i
//   S      <- P_{M-1} S + sum_j D_{M-1,j} delta_j k_j
// The dot products of the group's k and q with each other are the same for every row:
// the workgroup computes them once a chunk (stage_groups), with the gates' products.
// src/op/record/cpu.rs checks the identity against the step-by-step form.
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

#if MULTI_STEP
// M; a row's values per group (a_j and b_j of its M steps: STEP_VALUES, 2 M) and the
// vec4 sums they make (STEP_SUMS, M / 2) are defines too, as #unroll bounds.
const SPS: u32 = STEPS_PER_SUM;
// Per group of M staged steps from slot c, entry c M + a M + b (a, b < M): for a > b
// beta_a D_ab (k_b.k_a), for a <= b D_ba (k_a.q_b); 0 where step a or b is dead.
var<workgroup> mix_stage: array<f32, CHUNK * SPS>;
// Per staged step j of the group from c: P_j, D_{c + M - 1, j}, whether it is live (a
// step of the draft and not masked), beta_j.
var<workgroup> step_coef: array<vec4<f32>, CHUNK>;

// Step slot j's gate as the group multiplies it: 1 where masked (the staging's) or past
// the draft's last step (n: the chunk's steps).
fn group_gate(j: u32, n: u32) -> f32 {
    return select(1.0, gate_stage[j].x, j < n);
}

fn step_live(j: u32, n: u32) -> bool {
    return j < n && gate_stage[j].z != 0.0;
}

// mix_stage and step_coef of the staged chunk of n steps (after its staging barrier;
// read after the next one).
fn stage_groups(n: u32, li: u32) {
    for (var e = li; e < CHUNK * SPS; e += WG_SIZE) {
        let c = e / (SPS * SPS) * SPS;
        let a = e / SPS % SPS;
        let b = e % SPS;
        let lower = a > b;
        // Four partial sums, so the loop's chain is a quarter as long.
        var acc = vec4<f32>(0.0);
        for (var w = 0u; w < STAGED; w++) {
            let other = select(q_stage[(c + b) * STAGED + w], k_stage[(c + b) * STAGED + w], lower);
            acc += k_stage[(c + a) * STAGED + w] * other;
        }
        let lo = min(a, b);
        let hi = max(a, b);
        var decay = 1.0;
        for (var l = 0u; l < SPS; l++) {
            if l > lo && l <= hi {
                decay *= group_gate(c + l, n);
            }
        }
        let coef = select(decay, gate_stage[c + a].y * decay, lower);
        let live = step_live(c + a, n) && step_live(c + b, n);
        mix_stage[e] = select(0.0, coef * (acc.x + acc.y + acc.z + acc.w), live);
    }
    if li < CHUNK {
        let c = li - li % SPS;
        let j = li % SPS;
        var through = 1.0;
        var after = 1.0;
        for (var l = 0u; l < SPS; l++) {
            let g = group_gate(c + l, n);
            if l <= j {
                through *= g;
            } else {
                after *= g;
            }
        }
        let live = select(0.0, 1.0, step_live(li, n));
        step_coef[li] = vec4<f32>(through, after, live, gate_stage[li].y);
    }
}
#endif

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
        let n = min(CHUNK, d.steps - t0);
#if MULTI_STEP
        stage_groups(n, li);
        workgroupBarrier();
#endif
        if t0 + CHUNK < d.steps {
            fetch_chunk(d, b, hv, hk, row_base, t0 + CHUNK, li);
        }

#if MULTI_STEP
        for (var gi = 0u; gi < strides(0u, n, SPS); gi++) {
            group_steps(s, d, tile, gi * SPS, t0, n, li, sg);
        }
#else
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
                emit_row(li, first_row + rr, vi, valid, select(0.0, y, live), select(0.0, delta, live), t, sg);
            }
        }
#endif
    }
#if SCALED_STATE
    scale_tile(s, scale);
#endif
}

#if MULTI_STEP
// The group of M steps from chunk slot c (t0 + c: the draft's step) on the rows in `s`
// (the identity at the top of this file).
fn group_steps(s: ptr<function, StateTile>, d: GdnDims, tile: RowTile, c: u32, t0: u32, n: u32, li: u32, sg: u32) {
    let lane = tile.lane;
    let first_row = tile.first_row;
    let first_dv = tile.row_base + first_row;
    // a_j (slots 0 .. M) and b_j (M .. 2M) of each row against the group's start, as
    // scalars (an array index the unrolling makes constant; a vector's component index
    // may not be folded before registers are allocated).
    var sums = array<array<f32, STEP_VALUES>, RPT>();
    #unroll
    for (var m = 0u; m < GROUPS; m++) {
        #unroll
        for (var j = 0u; j < STEPS_PER_SUM; j++) {
            let kk = k_stage[(c + j) * STAGED + m * LANES + lane];
            let qq = q_stage[(c + j) * STAGED + m * LANES + lane];
            #unroll
            for (var rr = 0u; rr < RPT; rr++) {
                let x = (*s)[rr * GROUPS + m];
                sums[rr][j] += dot(x, kk);
                sums[rr][STEPS_PER_SUM + j] += dot(x, qq);
            }
        }
    }
    #unroll
    for (var rr = 0u; rr < RPT; rr++) {
        #unroll
        for (var w = 0u; w < STEP_SUMS; w++) {
            let at = 4u * w;
            let part = vec4<f32>(sums[rr][at], sums[rr][at + 1u], sums[rr][at + 2u], sums[rr][at + 3u]);
            let total = row_sum4(part, li, sg);
            sums[rr][at] = total.x;
            sums[rr][at + 1u] = total.y;
            sums[rr][at + 2u] = total.z;
            sums[rr][at + 3u] = total.w;
        }
    }
    // The deltas in order, then y; each row's lanes compute the same values.
    var deltas = array<array<f32, SPS>, RPT>();
    var ys = array<array<f32, SPS>, RPT>();
    #unroll
    for (var rr = 0u; rr < RPT; rr++) {
        #unroll
        for (var j = 0u; j < STEPS_PER_SUM; j++) {
            let coef = step_coef[c + j];
            var x = (row_stage[(c + j) * ROWS + first_row + rr] - coef.x * sums[rr][j]) * coef.w;
            #unroll
            for (var i = 0u; i < STEPS_PER_SUM; i++) {
                if i < j {
                    x -= mix_stage[(c + j) * SPS + i] * deltas[rr][i];
                }
            }
            deltas[rr][j] = select(0.0, x, coef.z != 0.0);
        }
        #unroll
        for (var j = 0u; j < STEPS_PER_SUM; j++) {
            var y = step_coef[c + j].x * sums[rr][STEPS_PER_SUM + j];
            #unroll
            for (var i = 0u; i < STEPS_PER_SUM; i++) {
                if i <= j {
                    y += mix_stage[(c + i) * SPS + j] * deltas[rr][i];
                }
            }
            ys[rr][j] = select(0.0, y, step_coef[c + j].z != 0.0);
        }
    }
    // Step by step, each step's rows in order (bf16 pairs meet row after row).
    #unroll
    for (var j = 0u; j < STEPS_PER_SUM; j++) {
        if c + j < n {
            let t = t0 + c + j;
            #unroll
            for (var rr = 0u; rr < RPT; rr++) {
                let dv_unclamped = first_dv + rr;
                let vi = v_index(d, tile.b, t, tile.hv, min(dv_unclamped, d.value_dim - 1u));
                emit_row(li, first_row + rr, vi, dv_unclamped < d.value_dim, ys[rr][j], deltas[rr][j], t, sg);
            }
        }
    }
    let keep = step_coef[c + SPS - 1u].x;
    #unroll
    for (var m = 0u; m < GROUPS; m++) {
        #unroll
        for (var rr = 0u; rr < RPT; rr++) {
            (*s)[rr * GROUPS + m] *= keep;
        }
        #unroll
        for (var j = 0u; j < STEPS_PER_SUM; j++) {
            let coef = step_coef[c + j];
            let kk = k_stage[(c + j) * STAGED + m * LANES + lane];
            #unroll
            for (var rr = 0u; rr < RPT; rr++) {
                // A masked step's k may be NaN: selected away, not multiplied by 0.
                // Unmasked, a slot past the draft's end (delta 0) holds an earlier
                // step's k or 0 (the staging writes every slot), finite unless the
                // state already is not: no select on the hot path.
                let add = kk * (coef.y * deltas[rr][j]);
                (*s)[rr * GROUPS + m] += select(vec4<f32>(0.0), add, !HAS_MASK || coef.z != 0.0);
            }
        }
    }
}
#endif
