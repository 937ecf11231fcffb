#import shape
#if HAS_BF16
#import bf16
#endif
#if RECORD
#import record_staging
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
#if FOLD
#import accepted_count
#import fold_steps
#import state_as_stored
#endif
#else
#import entry
#import accepted_count
#import fold_steps
#endif
#provides kernel_main, params, STAGED, k_stage, row_stage, gate_stage, staged_row_index
#requires row_tile, lane_col, state_row, v_index, key_head
#if RECORD
#provides q_stage
#requires fetch_chunk, stage_chunk, row_sum3, emit_row
#if FOLD
#requires load_state, store_state, accepted_steps, fold_steps, state_as_stored
#else
#requires load_state_in
#endif
#if HAS_STATE_OUT
#requires store_state_out
#endif
#else
#requires accepted_steps, fold_steps, store_state_out
#if HAS_SNAPSHOT
#requires load_snapshot
#else
#requires load_state_out
#endif
#endif
// The state-row kernels, one root file (RECORD and FOLD pick the op; the ops name their
// root on the Rust side, src/op/gdn.rs): they share the tiling, the workgroup stages of
// each chunk of steps and the state's load and store; they differ in the step. Record's
// step is here, its staging in wgsl/record_staging.wgsl; replay's fold, which
// fold_record runs before its record steps, is wgsl/fold_steps.wgsl.
//
// gated_delta_step_record (docs/SPEC.md "record"): the GatedDeltaNet forward step that
// also writes each step's delta to the innovation tape (and, when bound, the tape's
// copies of k and g, so that a draft is one dispatch; state_out only when bound).
// Per step and row one reduction gives the three dot products the step needs: with
// S' = S * g,
//   delta = (v - S'.k) * beta,  S'' = S' + k delta,  y = S''.q = S'.q + delta (k.q).
//
// fold_record (docs/SPEC.md "fold_record"): a deferred commit and the next draft in one
// pass over the state. Replay's fold of the pending tape's first accepted[b] steps onto
// the snapshot (in place, as replay's), the result stored as the committed state, then
// record's steps from it in registers. The pending delta is read and this draft's
// written in the same buffer: each element by one workgroup, the fold's reads staged
// before the barrier that opens record's first chunk. The pending k and g are other
// buffers than this draft's tape k and g, which one workgroup writes while all read.
//
// state_replay (docs/SPEC.md "replay"): fold the first accepted[b] steps of the tape
// onto the pre-draft snapshot, S = S * g_t + k_t delta_t; no reduction
// (wgsl/fold_steps.wgsl). accepted[b] is data on the GPU-resident path and cannot be
// checked on the host: it is clamped to T and flagged in `status` when bound
// (wgsl/accepted_count.wgsl, shared with fold_record). In place (no snapshot bound: the
// state is read from state_out and written back): every valid row is read and written
// by the one invocation that holds it, reads before writes. An invocation whose row lies
// past Dv reads the clamped last row, which another invocation may be writing, and
// discards what it read.
//
// One workgroup serves ROWS rows dv of one (b, hv) head. LANES lanes share a row, and
// each invocation holds RPT rows: lane j keeps the state elements of groups
// i = (m * LANES + j) * 4, m < GROUPS, of each of its rows in registers for all T steps
// (the #unroll loops over m, rr and j keep every array index constant, so the arrays
// stay in registers). Masked steps go through select (no divergent control flow around
// record's reduction): S is kept, y and delta are written as zeros.
//
// Everything a step reads besides the state (k, record's q, the row's v or delta, the
// gates, the mask) is staged CHUNK steps at a time in workgroup memory: k (and q) are
// the same for every row of the head, and each staged value an invocation reads serves
// its RPT rows. The next chunk's global loads are issued before the current chunk is
// computed and land in registers (the next_* variables), so their latency hides behind
// the arithmetic instead of stalling every step.
//
// Each op's staging picks its buffers by #if, not through hook functions: shared staging
// measured f32 record 5-19% slower on the H200 at B >= 64, traced to the tape k writer
// test computed where unused (commit 28c208e). That A/B left benches/results in 2a44eae:
// `git show 2a44eae^:benches/results/h200-2026-11-30-staging-ab.txt`.

@group(0) @binding(0) var<uniform> params: GdnParams;

const STAGED: u32 = GROUPS * LANES; // vec4s of one k (or q) row
#if SCALED_STATE
// Record's state scale stays in (2^-40, 2^40) (see kernel_main).
const SCALE_MIN: f32 = 9.094947e-13;
const SCALE_MAX: f32 = 1.0995116e12;
#endif

var<workgroup> k_stage: array<vec4<f32>, CHUNK * STAGED>;
#if RECORD
var<workgroup> q_stage: array<vec4<f32>, CHUNK * STAGED>;
#endif
var<workgroup> row_stage: array<f32, CHUNK * ROWS>; // record: v; replay: the tape's delta
#if RECORD
var<workgroup> gate_stage: array<vec4<f32>, CHUNK>; // g (1 where masked), beta, live
#else
var<workgroup> gate_stage: array<vec2<f32>, CHUNK>; // g, live
#endif

// Index of the v (or delta) element that slot i of a chunk staged from step t0 holds:
// step t0 + i / ROWS, row row_base + i % ROWS clamped to the head's last row.
fn staged_row_index(d: GdnDims, b: u32, hv: u32, row_base: u32, t0: u32, i: u32) -> u32 {
    return v_index(d, b, t0 + i / ROWS, hv, min(row_base + i % ROWS, d.value_dim - 1u));
}

// The state the op starts from: fold_record's committed state (the fold's result is
// stored in place), record's state_in, replay's snapshot or, in place, state_out.
fn load_start_state(srow: u32, col: u32, key_dim: u32) -> vec4<f32> {
#if FOLD
    return load_state(srow, col, key_dim);
#else
#if RECORD
    return load_state_in(srow, col, key_dim);
#else
#if HAS_SNAPSHOT
    return load_snapshot(srow, col, key_dim);
#else
    return load_state_out(srow, col, key_dim);
#endif
#endif
#endif
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let d = params.dims;
    let tile = row_tile(d, params.row_blocks, wg, li);
    let b = tile.b;
    let hv = tile.hv;
#if RECORD
    let hk = key_head(params.gqa_layout, hv, d.key_heads, d.value_heads);
#else
#if HAS_TAPE_K_GROUPED
    let hk = key_head(params.gqa_layout, hv, d.key_heads, d.value_heads);
#else
    let hk = 0u; // unused: the tape's k is expanded to value heads
#endif
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
            s[rr * GROUPS + m] = load_start_state(srow, lane_col(m, lane), d.key_dim);
        }
    }

#if RECORD
    fetch_chunk(d, b, hv, hk, row_base, 0u, li);
#if FOLD
    // The deferred commit, while record's first chunk is on its way: replay's fold
    // (the whole workgroup is one sequence, so its count is uniform), then the
    // committed state stored in place (not at all when nothing was accepted). On small
    // grids (EARLY_FOLD, see KernelKey::early_fold) the fold's first chunk is fetched
    // whole before the count, whose latency it then hides; elsewhere only the accepted
    // steps are fetched, after it (fewer bytes where the kernel waits on bandwidth).
#if EARLY_FOLD
    fetch_fold_chunk(d, b, hv, hk, row_base, 0u, d.steps, li);
    let folded = accepted_steps(d, b, hv, row_base, li);
#else
    let folded = accepted_steps(d, b, hv, row_base, li);
    fetch_fold_chunk(d, b, hv, hk, row_base, 0u, folded, li);
#endif
    fold_steps(&s, d, b, hv, hk, row_base, first_row, lane, folded, li);
    if folded > 0u {
        #unroll
        for (var rr = 0u; rr < RPT; rr++) {
            if first_dv + rr < d.value_dim {
                let srow = state_row(d, b, hv, first_dv + rr);
                #unroll
                for (var m = 0u; m < GROUPS; m++) {
                    s[rr * GROUPS + m] = state_as_stored(s[rr * GROUPS + m]);
                    store_state(srow, lane_col(m, lane), d.key_dim, s[rr * GROUPS + m]);
                }
            }
        }
    }
#endif
#if SCALED_STATE
    // The state is scale * s (KernelKey::scaled_state): a step's decay multiplies the
    // scale, the head's and so the same for every row of the workgroup. It is folded
    // back into s when it leaves (SCALE_MIN, SCALE_MAX), so that s and delta / scale
    // stay far from f32's limits (at once when a gate is 0 or not finite, as S * g).
    var scale = 1.0;
#endif
    for (var t0 = 0u; t0 < d.steps; t0 += CHUNK) {
        workgroupBarrier(); // the previous chunk has been read
        stage_chunk(d, b, hv, hk, row_base, t0, li);
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
                #unroll
                for (var rr = 0u; rr < RPT; rr++) {
                    #unroll
                    for (var m = 0u; m < GROUPS; m++) {
                        s[rr * GROUPS + m] *= scale;
                    }
                }
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
                    s[rr * GROUPS + m] = s[rr * GROUPS + m] * g;
#endif
                    part[rr] += vec2<f32>(dot(s[rr * GROUPS + m], kk[m]), dot(s[rr * GROUPS + m], qq));
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
                    s[rr * GROUPS + m] += select(vec4<f32>(0.0), kk[m] * step, live);
                }
#else
                #unroll
                for (var m = 0u; m < GROUPS; m++) {
                    s[rr * GROUPS + m] = s[rr * GROUPS + m] + select(vec4<f32>(0.0), kk[m] * delta, live);
                }
#endif
                let vi = v_index(d, b, t, hv, min(dv_unclamped, d.value_dim - 1u));
                let valid = dv_unclamped < d.value_dim;
                emit_row(li, first_row + rr, vi, valid, select(0.0, y, live), select(0.0, delta, live), t);
            }
        }
    }
#if SCALED_STATE
    #unroll
    for (var rr = 0u; rr < RPT; rr++) {
        #unroll
        for (var m = 0u; m < GROUPS; m++) {
            s[rr * GROUPS + m] *= scale;
        }
    }
#endif
#else
    let steps = accepted_steps(d, b, hv, row_base, li);
    fetch_fold_chunk(d, b, hv, hk, row_base, 0u, steps, li);
    fold_steps(&s, d, b, hv, hk, row_base, first_row, lane, steps, li);
#endif

#if HAS_STATE_OUT
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
#endif
}
