#import shape
#if HAS_BF16
#import bf16
#endif
#import tile_load
#import tile_store
#import record_steps
#import accepted_count
#import fold_steps
#import state_as_stored
#provides row_kernel, load_start_state, store_end_state
#requires key_head, load_state, store_state
// fold_record (docs/SPEC.md "fold_record"): a deferred commit and the next draft in one
// pass over the state. Replay's fold of the pending tape's first accepted[b] steps onto
// the snapshot (in place, as replay's: wgsl/fold_steps.wgsl), the result stored as the
// committed state, then record's steps from it in registers (wgsl/record_steps.wgsl).
// The pending delta is read and this draft's written in the same buffer: each element
// by one workgroup, the fold's reads staged before the barrier that opens record's
// first chunk. The pending k and g are other buffers than this draft's tape k and g,
// which one workgroup writes while all read.

fn load_start_state(srow: u32, col: u32, key_dim: u32) -> vec4<f32> {
    return load_state(srow, col, key_dim);
}

fn store_end_state(srow: u32, col: u32, key_dim: u32, v: vec4<f32>) {
    store_state(srow, col, key_dim, v);
}

fn row_kernel(d: GdnDims, tile: RowTile, li: u32, sg: u32) {
    let b = tile.b;
    let hv = tile.hv;
    let hk = key_head(params.gqa_layout, hv, d.key_heads, d.value_heads);
    let first_dv = tile.row_base + tile.first_row;
    var s: StateTile;
    load_tile(&s, d, b, hv, first_dv, tile.lane);
    fetch_chunk(d, b, hv, hk, tile.row_base, 0u, li);
    // The deferred commit, while record's first chunk is on its way: replay's fold
    // (the whole workgroup is one sequence, so its count is uniform), then the
    // committed state stored in place (not at all when nothing was accepted). On small
    // grids (EARLY_FOLD, see GdnClass::early_fold) the fold's first chunk is fetched
    // whole before the count, whose latency it then hides; elsewhere only the accepted
    // steps are fetched, after it (fewer bytes where the kernel waits on bandwidth).
#if EARLY_FOLD
    fetch_fold_chunk(d, b, hv, hk, tile.row_base, 0u, d.steps, li);
    let folded = accepted_steps(d, b, hv, tile.row_base, li);
#else
    let folded = accepted_steps(d, b, hv, tile.row_base, li);
    fetch_fold_chunk(d, b, hv, hk, tile.row_base, 0u, folded, li);
#endif
    fold_steps(&s, d, b, hv, hk, tile.row_base, tile.first_row, tile.lane, folded, li);
    if folded > 0u {
        // Rounded as the state dtype stores it, so that record goes on from the
        // committed state exactly as a draft that loads it would.
        #unroll
        for (var rr = 0u; rr < RPT; rr++) {
            #unroll
            for (var m = 0u; m < GROUPS; m++) {
                s[rr * GROUPS + m] = state_as_stored(s[rr * GROUPS + m]);
            }
        }
        store_tile(&s, d, b, hv, first_dv, tile.lane);
    }
    record_steps(&s, d, tile, hk, li, sg);
}
