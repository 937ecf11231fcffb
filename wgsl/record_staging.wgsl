#provides fetch_chunk, stage_chunk
#requires k_stage, q_stage, row_stage, gate_stage, STAGED, staged_row_index, params
#requires raw_k, unpack_k, raw_q, unpack_q, raw1_v, unpack1_v, raw1_g, unpack1_g, load1_g
#requires raw1_beta, unpack1_beta, qk_row, gate_index, first_value_head
#if HAS_MASK
#requires load_mask, mask_index
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
// Record's staging (record_steps.wgsl declares the workgroup stages): each chunk
// of CHUNK steps' k, q, v and gates (and the mask) fetched one chunk ahead into the
// next_* registers, then converted into workgroup memory, where record's steps read
// them; the tape's copies of k and g are written on the way.

// One invocation's share of the next chunk, on its way from global to workgroup memory:
// the loads as stored (`raw_*`), converted only when staged, so that nothing waits for
// them before the current chunk is computed (a GPU issues in order: the first
// instruction that uses a loaded register stalls until the load lands).
var<private> next_k: array<k_raw, KQ_ITEMS>;
var<private> next_q: array<q_raw, KQ_ITEMS>;
var<private> next_row: array<v_raw1, V_ITEMS>;
var<private> next_g: g_raw1;
var<private> next_beta: beta_raw1;
#if HAS_MASK
var<private> next_live: u32;
#endif

// Issue the global loads of the chunk of steps t0 .. t0 + CHUNK (t0 < T).
fn fetch_chunk(d: GdnDims, b: u32, hv: u32, hk: u32, row_base: u32, t0: u32, li: u32) {
    let n = min(CHUNK, d.steps - t0);
    #unroll
    for (var j = 0u; j < KQ_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i / STAGED < n {
            let kq = qk_row(d, b, t0 + i / STAGED, hk);
            next_k[j] = raw_k(kq, (i % STAGED) * 4u, d.key_dim);
            next_q[j] = raw_q(kq, (i % STAGED) * 4u, d.key_dim);
        }
    }
    #unroll
    for (var j = 0u; j < V_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i / ROWS < n {
            next_row[j] = raw1_v(staged_row_index(d, b, hv, row_base, t0, i));
        }
    }
    if li < n {
        let gi = gate_index(d, b, t0 + li, hv);
        next_g = raw1_g(gi);
        next_beta = raw1_beta(gi);
#if HAS_MASK
        next_live = load_mask(mask_index(d, b, t0 + li));
#endif
    }
}

// Convert the fetched chunk t0 .. t0 + CHUNK into workgroup memory, and write the
// tape's copies of k and g: k by the first row block of the first value head each key
// head serves, g by the first row block of each head, so every element has one writer.
// Slots past the draft's last step hold stale values nobody reads.
fn stage_chunk(d: GdnDims, b: u32, hv: u32, hk: u32, row_base: u32, t0: u32, li: u32) {
    let n = min(CHUNK, d.steps - t0);
#if HAS_TAPE_K_GROUPED
    let k_writer = row_base == 0u && hv == first_value_head(params.gqa_layout, hk, d.key_heads, d.value_heads);
#endif
    #unroll
    for (var j = 0u; j < KQ_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i < CHUNK * STAGED {
            let col = (i % STAGED) * 4u;
            let kk = unpack_k(next_k[j], col, d.key_dim);
            k_stage[i] = kk;
            q_stage[i] = unpack_q(next_q[j], col, d.key_dim);
#if HAS_TAPE_K_GROUPED
            if k_writer && i / STAGED < n {
                store_tape_k_grouped(qk_row(d, b, t0 + i / STAGED, hk), col, d.key_dim, kk);
            }
#endif
        }
    }
    #unroll
    for (var j = 0u; j < V_ITEMS; j++) {
        let i = li + j * WG_SIZE;
        if i < CHUNK * ROWS {
            // The element index only picks the half of a bf16 word.
            row_stage[i] = unpack1_v(next_row[j], staged_row_index(d, b, hv, row_base, t0, i));
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
    }
}
