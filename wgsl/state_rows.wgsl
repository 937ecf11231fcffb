// The state rows one invocation of record / replay holds, in registers for all steps:
// st[rr * GROUPS + m] is group m (columns lane_col(m, lane) .. + 4) of the local row
// first_row + rr (see row_tile). A private array indexed by constants once the loops
// over rr and m are unrolled. Loaded through the op's load_initial_state, stored to
// state_out (rows past Dv are loaded clamped and never stored).
#import shape
#provides st, load_state_rows, store_state_rows
#requires load_initial_state, store_state_out, GROUPS, RPT

var<private> st: array<vec4<f32>, GROUPS * RPT>;

fn load_state_rows(d: GdnDims, tile: RowTile) {
    let first_dv = tile.row_base + tile.first_row;
    #unroll
    for (var rr = 0u; rr < RPT; rr++) {
        let srow = state_row(d, tile.b, tile.hv, min(first_dv + rr, d.value_dim - 1u));
        #unroll
        for (var m = 0u; m < GROUPS; m++) {
            st[rr * GROUPS + m] = load_initial_state(srow, lane_col(m, tile.lane), d.key_dim);
        }
    }
}

fn store_state_rows(d: GdnDims, tile: RowTile) {
    let first_dv = tile.row_base + tile.first_row;
    #unroll
    for (var rr = 0u; rr < RPT; rr++) {
        if first_dv + rr < d.value_dim {
            let srow = state_row(d, tile.b, tile.hv, first_dv + rr);
            #unroll
            for (var m = 0u; m < GROUPS; m++) {
                store_state_out(srow, lane_col(m, tile.lane), d.key_dim, st[rr * GROUPS + m]);
            }
        }
    }
}
