#import shape
#if HAS_BF16
#import bf16
#endif
#import entry
#import staging
#import tile_load
#import tile_store
#import accepted_count
#import fold_steps
#provides row_kernel, k_stage, row_stage, gate_stage, load_start_state, store_end_state
#requires key_head, store_state_out
#if HAS_SNAPSHOT
#requires load_snapshot
#else
#requires load_state_out
#endif
// state_replay (docs/SPEC.md "replay"): fold the first accepted[b] steps of the tape
// onto the pre-draft snapshot, S = S * g_t + k_t delta_t; no reduction
// (wgsl/fold_steps.wgsl, staged as wgsl/staging.wgsl says). accepted[b] is data on the
// GPU-resident path and cannot be checked on the host: it is clamped to T and flagged
// in `status` when bound (wgsl/accepted_count.wgsl, shared with fold_record). In place
// (no snapshot bound: the state is read from state_out and written back): every valid
// row is read and written by the one invocation that holds it, reads before writes. An
// invocation whose row lies past Dv reads the clamped last row, which another
// invocation may be writing, and discards what it read.

var<workgroup> k_stage: array<vec4<f32>, CHUNK * STAGED>;
var<workgroup> row_stage: array<f32, CHUNK * ROWS>; // the tape's delta
var<workgroup> gate_stage: array<vec2<f32>, CHUNK>; // g, live

fn load_start_state(srow: u32, col: u32, key_dim: u32) -> vec4<f32> {
#if HAS_SNAPSHOT
    return load_snapshot(srow, col, key_dim);
#else
    return load_state_out(srow, col, key_dim);
#endif
}

fn store_end_state(srow: u32, col: u32, key_dim: u32, v: vec4<f32>) {
    store_state_out(srow, col, key_dim, v);
}

fn row_kernel(d: GdnDims, tile: RowTile, li: u32, sg: u32) {
#if HAS_TAPE_K_GROUPED
    let hk = key_head(params.gqa_layout, tile.hv, d.key_heads, d.value_heads);
#else
    let hk = 0u; // unused: the tape's k is expanded to value heads
#endif
    let first_dv = tile.row_base + tile.first_row;
    var s: StateTile;
    load_tile(&s, d, tile.b, tile.hv, first_dv, tile.lane);
    let steps = accepted_steps(d, tile.b, tile.hv, tile.row_base, li);
    fetch_fold_chunk(d, tile.b, tile.hv, hk, tile.row_base, 0u, steps, li);
    fold_steps(&s, d, tile.b, tile.hv, hk, tile.row_base, tile.first_row, tile.lane, steps, li);
    store_tile(&s, d, tile.b, tile.hv, first_dv, tile.lane);
}
