#import strides
#provides fetch_fold_chunk, stage_fold_chunk, fold_steps
#requires StateTile, k_stage, row_stage, gate_stage, STAGED, staged_row_index, qk_row, gate_index
#if FOLD
#requires raw_pending_k_grouped, unpack_pending_k_grouped, raw1_delta, unpack1_delta
#requires raw1_pending_g, unpack1_pending_g
#else
#requires raw1_tape_delta, unpack1_tape_delta, raw1_tape_g, unpack1_tape_g
#if HAS_TAPE_K_GROUPED
#requires raw_tape_k_grouped, unpack_tape_k_grouped
#else
#requires raw_tape_k, unpack_tape_k, tape_k_row
#endif
#if HAS_MASK
#requires load_mask, mask_index
#endif
#endif
// Replay's fold (docs/SPEC.md "replay"): S = S * g_t + k_t delta_t over the first
// `steps` steps of a tape, onto the state rows an invocation holds in registers (the
// tiling of tile_load.wgsl); no reduction. Replay folds its tape, a masked step
// keeping S (select); fold_record (FOLD) the pending tape's accepted steps before its
// own record steps, with record's vec4 gate_stage (g in x).
//
// Staged as record's steps are, CHUNK steps at a time in the root's k_stage, row_stage
// (the tape's delta) and gate_stage; the next chunk's global loads are issued
// (fetch_fold_chunk, into the next_fold_* registers) before the current chunk is folded.

#if FOLD
alias FoldKRaw = pending_k_grouped_raw;
alias FoldDeltaRaw = delta_raw1;
alias FoldGRaw = pending_g_raw1;
#else
#if HAS_TAPE_K_GROUPED
alias FoldKRaw = tape_k_grouped_raw;
#else
alias FoldKRaw = tape_k_raw;
#endif
alias FoldDeltaRaw = tape_delta_raw1;
alias FoldGRaw = tape_g_raw1;
#if HAS_MASK
var<private> next_fold_live: u32;
#endif
#endif
var<private> next_fold_k: array<FoldKRaw, KQ_ITEMS>;
var<private> next_fold_delta: array<FoldDeltaRaw, V_ITEMS>;
var<private> next_fold_g: FoldGRaw;

// Issue the global loads of the tape's steps t0 .. t0 + CHUNK (t0 < steps).
fn fetch_fold_chunk(d: GdnDims, b: u32, hv: u32, hk: u32, row_base: u32, t0: u32, steps: u32, li: u32) {
    let n = min(CHUNK, steps - t0);
    #unroll
    for (var j = 0u; j < KQ_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i / STAGED < n {
#if FOLD
            next_fold_k[j] = raw_pending_k_grouped(qk_row(d, b, t0 + i / STAGED, hk), (i % STAGED) * 4u, d.key_dim);
#else
#if HAS_TAPE_K_GROUPED
            next_fold_k[j] = raw_tape_k_grouped(qk_row(d, b, t0 + i / STAGED, hk), (i % STAGED) * 4u, d.key_dim);
#else
            next_fold_k[j] = raw_tape_k(tape_k_row(d, b, t0 + i / STAGED, hv), (i % STAGED) * 4u, d.key_dim);
#endif
#endif
        }
    }
    #unroll
    for (var j = 0u; j < V_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i / ROWS < n {
#if FOLD
            next_fold_delta[j] = raw1_delta(staged_row_index(d, b, hv, row_base, t0, i));
#else
            next_fold_delta[j] = raw1_tape_delta(staged_row_index(d, b, hv, row_base, t0, i));
#endif
        }
    }
    if li < n {
        let gi = gate_index(d, b, t0 + li, hv);
#if FOLD
        next_fold_g = raw1_pending_g(gi);
#else
        next_fold_g = raw1_tape_g(gi);
#if HAS_MASK
        next_fold_live = load_mask(mask_index(d, b, t0 + li));
#endif
#endif
    }
}

// Convert the fetched chunk t0 .. t0 + CHUNK into workgroup memory (a delta's element
// index only picks the half of a bf16 word). Slots past the last step hold stale values
// nobody reads.
fn stage_fold_chunk(d: GdnDims, b: u32, hv: u32, row_base: u32, t0: u32, li: u32) {
    #unroll
    for (var j = 0u; j < KQ_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i < CHUNK * STAGED {
            let col = (i % STAGED) * 4u;
#if FOLD
            k_stage[i] = unpack_pending_k_grouped(next_fold_k[j], col, d.key_dim);
#else
#if HAS_TAPE_K_GROUPED
            k_stage[i] = unpack_tape_k_grouped(next_fold_k[j], col, d.key_dim);
#else
            k_stage[i] = unpack_tape_k(next_fold_k[j], col, d.key_dim);
#endif
#endif
        }
    }
    #unroll
    for (var j = 0u; j < V_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i < CHUNK * ROWS {
            let vi = staged_row_index(d, b, hv, row_base, t0, i);
#if FOLD
            row_stage[i] = unpack1_delta(next_fold_delta[j], vi);
#else
            row_stage[i] = unpack1_tape_delta(next_fold_delta[j], vi);
#endif
        }
    }
    if li < CHUNK {
        let gi = gate_index(d, b, t0 + li, hv);
#if FOLD
        gate_stage[li] = vec4<f32>(unpack1_pending_g(next_fold_g, gi), 0.0, 0.0, 0.0);
#else
        // Unmasked kernels have no mask binding: every step is live.
#if HAS_MASK
        let live = next_fold_live != 0u;
#else
        let live = true;
#endif
        gate_stage[li] = vec2<f32>(select(1.0, unpack1_tape_g(next_fold_g, gi), live), select(0.0, 1.0, live));
#endif
    }
}

// Fold steps 0 .. steps onto s, this invocation's rows (first_row + rr, lane `lane`),
// chunk by chunk; the caller has fetched the first chunk (fetch_fold_chunk at t0 = 0).
// `steps` is uniform over the workgroup (accepted_steps).
fn fold_steps(s: ptr<function, StateTile>, d: GdnDims, b: u32, hv: u32, hk: u32, row_base: u32, first_row: u32, lane: u32, steps: u32, li: u32) {
    for (var ci = 0u; ci < strides(0u, steps, CHUNK); ci++) {
        let t0 = ci * CHUNK;
        workgroupBarrier(); // the previous chunk has been read
        stage_fold_chunk(d, b, hv, row_base, t0, li);
        workgroupBarrier();
        if t0 + CHUNK < steps {
            fetch_fold_chunk(d, b, hv, hk, row_base, t0 + CHUNK, steps, li);
        }
        let n = min(CHUNK, steps - t0);
        for (var c = 0u; c < n; c++) {
#if FOLD
            let g = gate_stage[c].x;
#else
            let gate = gate_stage[c];
            // Unmasked kernels know every step is live: the select folds away.
            let live = !HAS_MASK || gate.y != 0.0;
#endif
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
#if FOLD
                    (*s)[rr * GROUPS + m] = (*s)[rr * GROUPS + m] * g + kk * delta[rr];
#else
                    (*s)[rr * GROUPS + m] = select((*s)[rr * GROUPS + m], (*s)[rr * GROUPS + m] * gate.x + kk * delta[rr], live);
#endif
                }
            }
        }
    }
}
