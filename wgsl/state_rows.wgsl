#provides StateRows, load_rows
#requires GROUPS, RPT, HAS_STATE_OUT, GdnDims, RowTile, state_row, lane_col, load_state_row
#if HAS_STATE_OUT
#provides store_rows
#requires store_state_out
#endif
// The state rows one invocation of record or replay holds for all its steps: RPT rows
// from dv = row_base + first_row, lane `lane` keeping the columns lane_col(m, lane) ..
// + 4 of each, m < GROUPS (the loops unroll, so the array stays in registers). The
// kernel file says where the rows come from (load_state_row).

alias StateRows = array<vec4<f32>, GROUPS * RPT>;

// Rows past Dv read the last row (and are never stored).
fn load_rows(d: GdnDims, tile: RowTile) -> StateRows {
    var s: StateRows;
    #unroll
    for (var rr = 0u; rr < RPT; rr++) {
        let dv = min(tile.row_base + tile.first_row + rr, d.value_dim - 1u);
        let srow = state_row(d, tile.b, tile.hv, dv);
        #unroll
        for (var m = 0u; m < GROUPS; m++) {
            s[rr * GROUPS + m] = load_state_row(srow, lane_col(m, tile.lane), d.key_dim);
        }
    }
    return s;
}

#if HAS_STATE_OUT
fn store_rows(d: GdnDims, tile: RowTile, s: StateRows) {
    #unroll
    for (var rr = 0u; rr < RPT; rr++) {
        let dv = tile.row_base + tile.first_row + rr;
        if dv < d.value_dim {
            let srow = state_row(d, tile.b, tile.hv, dv);
            #unroll
            for (var m = 0u; m < GROUPS; m++) {
                store_state_out(srow, lane_col(m, tile.lane), d.key_dim, s[rr * GROUPS + m]);
            }
        }
    }
}
#endif
