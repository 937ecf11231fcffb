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
#else
#import entry
#endif
#provides kernel_main, params
#requires row_tile, lane_col, state_row, v_index, gate_index
#if HAS_MASK
#requires load_mask
#endif
#if RECORD
#requires load_k, load_q, load1_v, load1_g, load1_beta, load_state_in
#requires row_sum3, emit_row, qk_row, key_head, first_value_head
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
#endif
// The state-row kernels, one file (RECORD picks the op): they share the tiling, the
// staging of each chunk of steps and the state's load and store; they differ in the step.
//
// gated_delta_step_record (docs/SPEC.md "record"): the GatedDeltaNet forward step that
// also writes each step's delta to the innovation tape (and, when bound, the tape's
// copies of k and g, so that a draft is one dispatch; state_out only when bound).
// Per step and row one reduction gives the three dot products the step needs: with
// S' = S * g,
//   delta = (v - S'.k) * beta,  S'' = S' + k delta,  y = S''.q = S'.q + delta (k.q).
//
// state_replay (docs/SPEC.md "replay"): fold the first accepted[b] steps of the tape
// onto the pre-draft snapshot, S = S * g_t + k_t delta_t; no reduction. accepted[b] is
// data on the GPU-resident path and cannot be checked on the host: it is clamped to T
// here, and flagged in `status` when bound. In place (no snapshot bound: the state is
// read from state_out and written back): every valid row is read and written by the one
// invocation that holds it, reads before writes. An invocation whose row lies past Dv
// reads the clamped last row, which another invocation may be writing, and discards
// what it read.
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
// The kernels' text is what the H200 measurements in benches/results were taken on:
// sharing the staging through WGSL functions made f32 record 5-19% slower there
// (benches/results/h200-2026-11-30-staging-ab.txt), so the sharing is by #if only.

@group(0) @binding(0) var<uniform> params: GdnParams;

const STAGED: u32 = GROUPS * LANES; // vec4s of one k (or q) row

var<workgroup> k_stage: array<vec4<f32>, CHUNK * STAGED>;
#if RECORD
var<workgroup> q_stage: array<vec4<f32>, CHUNK * STAGED>;
#endif
var<workgroup> row_stage: array<f32, CHUNK * ROWS>; // record: v; replay: the tape's delta
#if RECORD
var<workgroup> gate_stage: array<vec4<f32>, CHUNK>; // g (1 where masked), beta, live
#else
var<workgroup> gate_stage: array<vec2<f32>, CHUNK>; // g, live
var<workgroup> steps_shared: u32;
#endif

// One invocation's share of the next chunk, on its way from global to workgroup memory
// (private: registers, once the loops over j are unrolled).
var<private> next_k: array<vec4<f32>, KQ_ITEMS>;
#if RECORD
var<private> next_q: array<vec4<f32>, KQ_ITEMS>;
#endif
var<private> next_row: array<f32, V_ITEMS>;
#if RECORD
var<private> next_gate: vec4<f32>;
#else
var<private> next_gate: vec2<f32>;
#endif

// Issue the global loads of the chunk of steps t0 .. t0 + CHUNK (t0 < steps). Record
// also writes the tape's copies of k and g: k by the first row block of the first value
// head each key head serves, g by the first row block of each head, so every element
// has one writer.
#if RECORD
fn fetch_chunk(d: GdnDims, b: u32, hv: u32, hk: u32, row_base: u32, t0: u32, li: u32) {
    let n = min(CHUNK, d.steps - t0);
#if HAS_TAPE_K_GROUPED
    let k_writer = row_base == 0u && hv == first_value_head(params.gqa_layout, hk, d.key_heads, d.value_heads);
#endif
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
            next_k[j] = load_k(kq, (i % STAGED) * 4u, d.key_dim);
            next_q[j] = load_q(kq, (i % STAGED) * 4u, d.key_dim);
#if HAS_TAPE_K_GROUPED
            if k_writer {
                store_tape_k_grouped(kq, (i % STAGED) * 4u, d.key_dim, next_k[j]);
            }
#endif
#else
#if HAS_TAPE_K_GROUPED
            next_k[j] = load_tape_k_grouped(qk_row(d, b, t0 + i / STAGED, hk), (i % STAGED) * 4u, d.key_dim);
#else
            next_k[j] = load_tape_k(tape_k_row(d, b, t0 + i / STAGED, hv), (i % STAGED) * 4u, d.key_dim);
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
            next_row[j] = load1_v(v_index(d, b, t0 + i / ROWS, hv, dv));
#else
            next_row[j] = load1_tape_delta(v_index(d, b, t0 + i / ROWS, hv, dv));
#endif
        }
    }
    if li < n {
#if RECORD
        let gi = gate_index(d, b, t0 + li, hv);
#endif
        // Unmasked kernels have no mask binding: every step is live.
#if HAS_MASK
        let live = load_mask(mask_index(d, b, t0 + li)) != 0u;
#else
        let live = true;
#endif
#if RECORD
        next_gate = vec4<f32>(select(1.0, load1_g(gi), live), load1_beta(gi), select(0.0, 1.0, live), 0.0);
#if HAS_TAPE_G
        let g = load1_g(gi);
        if row_base == 0u {
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
        next_gate = vec2<f32>(load1_tape_g(gate_index(d, b, t0 + li, hv)), select(0.0, 1.0, live));
#endif
    }
}

fn stage_chunk(li: u32) {
    #unroll
    for (var j = 0u; j < KQ_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i < CHUNK * STAGED {
            k_stage[i] = next_k[j];
#if RECORD
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
            s[rr * GROUPS + m] = load_state_in(srow, lane_col(m, lane), d.key_dim);
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
    for (var t0 = 0u; t0 < d.steps; t0 += CHUNK) {
        workgroupBarrier(); // the previous chunk has been read
        stage_chunk(li);
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
                    s[rr * GROUPS + m] = s[rr * GROUPS + m] * g;
                    part[rr] += vec2<f32>(dot(s[rr * GROUPS + m], kk[m]), dot(s[rr * GROUPS + m], qq));
                }
            }
            #unroll
            for (var rr = 0u; rr < RPT; rr++) {
                let sums = row_sum3(vec3<f32>(part[rr], kq), li, sg);
                let dv_unclamped = first_dv + rr;
                let delta = (row_stage[c * ROWS + first_row + rr] - sums.x) * beta;
                let y = sums.y + delta * sums.z;
                #unroll
                for (var m = 0u; m < GROUPS; m++) {
                    s[rr * GROUPS + m] = s[rr * GROUPS + m] + select(vec4<f32>(0.0), kk[m] * delta, live);
                }
                let vi = v_index(d, b, t, hv, min(dv_unclamped, d.value_dim - 1u));
                let valid = dv_unclamped < d.value_dim;
                emit_row(li, first_row + rr, vi, valid, select(0.0, y, live), select(0.0, delta, live), t);
            }
        }
    }
#else
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
