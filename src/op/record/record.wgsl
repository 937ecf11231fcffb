#import shape
#if HAS_BF16
#import bf16
#endif
#import tile_load
#import record_steps
#if HAS_OFFSETS
#import packed_sequences
#endif
#if HAS_STATE_OUT
#import tile_store
#endif
#provides row_kernel, load_start_state
#requires key_head, load_state_in
#if HAS_STATE_OUT
#provides store_end_state
#requires store_state_out
#endif
// record (docs/SPEC.md "record"): the GatedDeltaNet forward over a draft, from
// state_in, writing y and each step's delta to the innovation tape (and, when bound,
// the tape's copies of k and g, so that a draft is one dispatch; state_out only when
// bound). The steps are wgsl/record_steps.wgsl, the tiling wgsl/tile_load.wgsl.
// record_varlen is this kernel with the sequence offsets bound (HAS_OFFSETS): each
// workgroup's b is a packed sequence (wgsl/packed_sequences.wgsl).

fn load_start_state(srow: u32, col: u32, key_dim: u32) -> vec4<f32> {
    return load_state_in(srow, col, key_dim);
}

#if HAS_STATE_OUT
fn store_end_state(srow: u32, col: u32, key_dim: u32, v: vec4<f32>) {
    store_state_out(srow, col, key_dim, v);
}
#endif

fn row_kernel(call: GdnDims, tile: RowTile, li: u32, sg: u32) {
#if HAS_OFFSETS
    let d = sequence_dims(call, tile.b, li);
#else
    let d = call;
#endif
    let hk = key_head(params.gqa_layout, tile.hv, d.key_heads, d.value_heads);
    let first_dv = tile.row_base + tile.first_row;
    var s: StateTile;
    load_tile(&s, d, tile.b, tile.hv, first_dv, tile.lane);
    fetch_chunk(d, tile.b, tile.hv, hk, tile.row_base, 0u, li);
    record_steps(&s, d, tile, hk, li, sg);
#if HAS_STATE_OUT
#if HAS_OFFSETS
    if !sequence_skipped() {
        store_tile(&s, d, tile.b, tile.hv, first_dv, tile.lane);
    }
#else
    store_tile(&s, d, tile.b, tile.hv, first_dv, tile.lane);
#endif
#endif
}
