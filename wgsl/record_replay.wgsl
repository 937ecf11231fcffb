#import shape
#if HAS_BF16
#import bf16
#endif
#if RECORD
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
#endif
#else
#import entry
#import accepted_count
#endif
#provides kernel_main, params
#requires row_tile, lane_col, state_row, v_index, gate_index
#if HAS_MASK
#requires load_mask
#endif
#if RECORD
#requires raw_k, unpack_k, raw_q, unpack_q, raw1_v, unpack1_v, raw1_g, unpack1_g, load1_g
#requires raw1_beta, unpack1_beta
#requires row_sum3, emit_row, qk_row, key_head, first_value_head
#if FOLD
#requires load_state, store_state, raw_pending_k_grouped, unpack_pending_k_grouped
#requires raw1_pending_g, unpack1_pending_g, raw1_delta, unpack1_delta, accepted_steps
#else
#requires load_state_in
#endif
#if HAS_STATE_OUT
#requires store_state_out
#endif
#if HAS_TAPE_K_GROUPED
#requires store_tape_k_grouped
#endif
#if HAS_TAPE_G
#if GATE_BF16
#requires store2_tape_g
#else
#requires store1_tape_g
#endif
#endif
#else
#requires raw1_tape_delta, unpack1_tape_delta, raw1_tape_g, unpack1_tape_g, accepted_steps
#requires store_state_out
#if HAS_TAPE_K_GROUPED
#requires raw_tape_k_grouped, unpack_tape_k_grouped, qk_row, key_head
#else
#requires raw_tape_k, unpack_tape_k, tape_k_row
#endif
#if HAS_SNAPSHOT
#requires load_snapshot
#else
#requires load_state_out
#endif
#endif
// The state-row kernels, one file (RECORD and FOLD pick the op): they share the tiling, the
// staging of each chunk of steps and the state's load and store; they differ in the step.
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
// onto the pre-draft snapshot, S = S * g_t + k_t delta_t; no reduction. accepted[b] is
// data on the GPU-resident path and cannot be checked on the host: it is clamped to T
// and flagged in `status` when bound (wgsl/accepted_count.wgsl, shared with
// fold_record). In place (no snapshot bound: the state is read from state_out and
// written back): every valid row is read and written by the one invocation that holds
// it, reads before writes. An invocation whose row lies past Dv reads the clamped
// last row, which another invocation may be writing, and discards what it read.
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
// The sharing is by #if only: sharing the staging through WGSL functions made f32
// record 5-19% slower on the H200 (benches/results/h200-2026-11-30-staging-ab.txt).

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

// One invocation's share of the next chunk, on its way from global to workgroup memory:
// the loads as stored (`raw_*`), converted only when staged, so that nothing waits for
// them before the current chunk is computed (a GPU issues in order: the first
// instruction that uses a loaded register stalls until the load lands).
#if RECORD
alias KRaw = k_raw;
#else
#if HAS_TAPE_K_GROUPED
alias KRaw = tape_k_grouped_raw;
#else
alias KRaw = tape_k_raw;
#endif
#endif
var<private> next_k: array<KRaw, KQ_ITEMS>;
#if RECORD
var<private> next_q: array<q_raw, KQ_ITEMS>;
var<private> next_row: array<v_raw1, V_ITEMS>;
var<private> next_g: g_raw1;
var<private> next_beta: beta_raw1;
#else
var<private> next_row: array<tape_delta_raw1, V_ITEMS>;
var<private> next_g: tape_g_raw1;
#endif
#if HAS_MASK
var<private> next_live: u32;
#endif
#if FOLD
var<private> next_fold_k: array<pending_k_grouped_raw, KQ_ITEMS>;
var<private> next_fold_delta: array<delta_raw1, V_ITEMS>;
var<private> next_fold_g: pending_g_raw1;

// fold_record: issue the global loads of the pending tape's steps t0 .. t0 + CHUNK
// (t0 < steps), as replay's fetch_chunk.
fn fetch_fold_chunk(d: GdnDims, b: u32, hv: u32, hk: u32, row_base: u32, t0: u32, steps: u32, li: u32) {
    let n = min(CHUNK, steps - t0);
    #unroll
    for (var j = 0u; j < KQ_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i / STAGED < n {
            next_fold_k[j] = raw_pending_k_grouped(qk_row(d, b, t0 + i / STAGED, hk), (i % STAGED) * 4u, d.key_dim);
        }
    }
    #unroll
    for (var j = 0u; j < V_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i / ROWS < n {
            let dv = min(row_base + i % ROWS, d.value_dim - 1u);
            next_fold_delta[j] = raw1_delta(v_index(d, b, t0 + i / ROWS, hv, dv));
        }
    }
    if li < n {
        next_fold_g = raw1_pending_g(gate_index(d, b, t0 + li, hv));
    }
}

// fold_record: a folded state value as the state dtype stores it, so that record goes
// on from the committed state exactly as a draft that loads it would.
fn state_as_stored(v: vec4<f32>) -> vec4<f32> {
#if STATE_BF16
    let w = vec2<u32>(bf16_pack2(v.x, v.y), bf16_pack2(v.z, v.w));
    return vec4<f32>(bf16_lo(w.x), bf16_hi(w.x), bf16_lo(w.y), bf16_hi(w.y));
#else
#if STATE_F16
    return vec4<f32>(vec4<f16>(v));
#else
    return v;
#endif
#endif
}

// fold_record: convert the fetched pending chunk into workgroup memory (k, delta, and
// g in gate_stage's x).
fn stage_fold_chunk(d: GdnDims, b: u32, hv: u32, row_base: u32, t0: u32, li: u32) {
    #unroll
    for (var j = 0u; j < KQ_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i < CHUNK * STAGED {
            k_stage[i] = unpack_pending_k_grouped(next_fold_k[j], (i % STAGED) * 4u, d.key_dim);
        }
    }
    #unroll
    for (var j = 0u; j < V_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i < CHUNK * ROWS {
            let vi = v_index(d, b, t0 + i / ROWS, hv, min(row_base + i % ROWS, d.value_dim - 1u));
            row_stage[i] = unpack1_delta(next_fold_delta[j], vi);
        }
    }
    if li < CHUNK {
        gate_stage[li] = vec4<f32>(unpack1_pending_g(next_fold_g, gate_index(d, b, t0 + li, hv)), 0.0, 0.0, 0.0);
    }
}
#endif

// Issue the global loads of the chunk of steps t0 .. t0 + CHUNK (t0 < steps).
#if RECORD
fn fetch_chunk(d: GdnDims, b: u32, hv: u32, hk: u32, row_base: u32, t0: u32, li: u32) {
    let n = min(CHUNK, d.steps - t0);
#else
fn fetch_chunk(d: GdnDims, b: u32, hv: u32, hk: u32, row_base: u32, t0: u32, steps: u32, li: u32) {
    let n = min(CHUNK, steps - t0);
#endif
    #unroll
    for (var j = 0u; j < KQ_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i / STAGED < n {
#if RECORD
            let kq = qk_row(d, b, t0 + i / STAGED, hk);
            next_k[j] = raw_k(kq, (i % STAGED) * 4u, d.key_dim);
            next_q[j] = raw_q(kq, (i % STAGED) * 4u, d.key_dim);
#else
#if HAS_TAPE_K_GROUPED
            next_k[j] = raw_tape_k_grouped(qk_row(d, b, t0 + i / STAGED, hk), (i % STAGED) * 4u, d.key_dim);
#else
            next_k[j] = raw_tape_k(tape_k_row(d, b, t0 + i / STAGED, hv), (i % STAGED) * 4u, d.key_dim);
#endif
#endif
        }
    }
    #unroll
    for (var j = 0u; j < V_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i / ROWS < n {
            let dv = min(row_base + i % ROWS, d.value_dim - 1u);
#if RECORD
            next_row[j] = raw1_v(v_index(d, b, t0 + i / ROWS, hv, dv));
#else
            next_row[j] = raw1_tape_delta(v_index(d, b, t0 + i / ROWS, hv, dv));
#endif
        }
    }
    if li < n {
        let gi = gate_index(d, b, t0 + li, hv);
#if RECORD
        next_g = raw1_g(gi);
        next_beta = raw1_beta(gi);
#else
        next_g = raw1_tape_g(gi);
#endif
#if HAS_MASK
        next_live = load_mask(mask_index(d, b, t0 + li));
#endif
    }
}

// Convert the fetched chunk t0 .. t0 + CHUNK into workgroup memory. Record also writes
// the tape's copies of k and g: k by the first row block of the first value head each
// key head serves, g by the first row block of each head, so every element has one
// writer. Slots past the draft's last step hold stale values nobody reads.
#if RECORD
fn stage_chunk(d: GdnDims, b: u32, hv: u32, hk: u32, row_base: u32, t0: u32, li: u32) {
    let n = min(CHUNK, d.steps - t0);
#if HAS_TAPE_K_GROUPED
    let k_writer = row_base == 0u && hv == first_value_head(params.gqa_layout, hk, d.key_heads, d.value_heads);
#endif
#else
fn stage_chunk(d: GdnDims, b: u32, hv: u32, row_base: u32, t0: u32, li: u32) {
#endif
    #unroll
    for (var j = 0u; j < KQ_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i < CHUNK * STAGED {
            let col = (i % STAGED) * 4u;
#if RECORD
            let kk = unpack_k(next_k[j], col, d.key_dim);
            k_stage[i] = kk;
            q_stage[i] = unpack_q(next_q[j], col, d.key_dim);
#if HAS_TAPE_K_GROUPED
            if k_writer && i / STAGED < n {
                store_tape_k_grouped(qk_row(d, b, t0 + i / STAGED, hk), col, d.key_dim, kk);
            }
#endif
#else
#if HAS_TAPE_K_GROUPED
            k_stage[i] = unpack_tape_k_grouped(next_k[j], col, d.key_dim);
#else
            k_stage[i] = unpack_tape_k(next_k[j], col, d.key_dim);
#endif
#endif
        }
    }
    #unroll
    for (var j = 0u; j < V_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i < CHUNK * ROWS {
            // The element index only picks the half of a bf16 word.
            let vi = v_index(d, b, t0 + i / ROWS, hv, min(row_base + i % ROWS, d.value_dim - 1u));
#if RECORD
            row_stage[i] = unpack1_v(next_row[j], vi);
#else
            row_stage[i] = unpack1_tape_delta(next_row[j], vi);
#endif
        }
    }
    if li < CHUNK {
        let gi = gate_index(d, b, t0 + li, hv);
        // Unmasked kernels have no mask binding: every step is live.
#if HAS_MASK
        let live = next_live != 0u;
#else
        let live = true;
#endif
#if RECORD
        let g = unpack1_g(next_g, gi);
        gate_stage[li] = vec4<f32>(select(1.0, g, live), unpack1_beta(next_beta, gi), select(0.0, 1.0, live), 0.0);
#if HAS_TAPE_G
        if row_base == 0u && li < n {
#if GATE_BF16
            // A bf16 word holds two gates, maybe of two heads: its even element's
            // writer writes both halves (the odd one read from g, which nobody writes).
            if (gi & 1u) == 0u {
                store2_tape_g(gi, g, load1_g(gi + 1u));
            }
#else
            store1_tape_g(gi, g);
#endif
        }
#endif
#else
        gate_stage[li] = vec2<f32>(select(1.0, unpack1_tape_g(next_g, gi), live), select(0.0, 1.0, live));
#endif
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
#if RECORD
#if FOLD
            s[rr * GROUPS + m] = load_state(srow, lane_col(m, lane), d.key_dim);
#else
            s[rr * GROUPS + m] = load_state_in(srow, lane_col(m, lane), d.key_dim);
#endif
#else
#if HAS_SNAPSHOT
            s[rr * GROUPS + m] = load_snapshot(srow, lane_col(m, lane), d.key_dim);
#else
            s[rr * GROUPS + m] = load_state_out(srow, lane_col(m, lane), d.key_dim);
#endif
#endif
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
    for (var t0 = 0u; t0 < folded; t0 += CHUNK) {
        workgroupBarrier(); // the previous chunk has been read
        stage_fold_chunk(d, b, hv, row_base, t0, li);
        workgroupBarrier();
        if t0 + CHUNK < folded {
            fetch_fold_chunk(d, b, hv, hk, row_base, t0 + CHUNK, folded, li);
        }
        let n = min(CHUNK, folded - t0);
        for (var c = 0u; c < n; c++) {
            let g = gate_stage[c].x;
            var delta = array<f32, RPT>();
            #unroll
            for (var rr = 0u; rr < RPT; rr++) {
                delta[rr] = row_stage[c * ROWS + first_row + rr];
            }
            #unroll
            for (var m = 0u; m < GROUPS; m++) {
                let kk = k_stage[c * STAGED + m * LANES + lane];
                #unroll
                for (var rr = 0u; rr < RPT; rr++) {
                    s[rr * GROUPS + m] = s[rr * GROUPS + m] * g + kk * delta[rr];
                }
            }
        }
    }
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
    fetch_chunk(d, b, hv, hk, row_base, 0u, steps, li);
    for (var t0 = 0u; t0 < steps; t0 += CHUNK) {
        workgroupBarrier(); // the previous chunk has been read
        stage_chunk(d, b, hv, row_base, t0, li);
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
                delta[rr] = row_stage[c * ROWS + first_row + rr];
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
