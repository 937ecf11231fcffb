#provides store_tile
#requires state_row, lane_col, store_end_state, StateTile, GdnDims, GROUPS, RPT
// The state rows an invocation holds (tile_load.wgsl), stored by the root's
// store_end_state: only the rows that lie inside the head, each by the one invocation
// that holds it.
fn store_tile(s: ptr<function, StateTile>, d: GdnDims, b: u32, hv: u32, first_dv: u32, lane: u32) {
    #unroll
    for (var rr = 0u; rr < RPT; rr++) {
        if first_dv + rr < d.value_dim {
            let srow = state_row(d, b, hv, first_dv + rr);
            #unroll
            for (var m = 0u; m < GROUPS; m++) {
                store_end_state(srow, lane_col(m, lane), d.key_dim, (*s)[rr * GROUPS + m]);
            }
        }
    }
}
