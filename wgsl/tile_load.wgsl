#provides kernel_main, params, StateTile, load_tile
#requires row_tile, state_row, lane_col, load_start_state, row_kernel, GdnDims, GdnParams
#requires GROUPS, RPT
// The state-row kernels' tiling (record, replay, fold_record). One workgroup serves
// ROWS rows dv of one (b, hv) head (shape.wgsl's row_tile). LANES lanes share a row, and
// each invocation holds RPT rows: lane j keeps the state elements of groups
// i = (m * LANES + j) * 4, m < GROUPS, of each of its rows in registers for all T steps
// (the #unroll loops over m, rr and j keep every array index constant, so the arrays
// stay in registers). An invocation whose row lies past Dv holds the clamped last row
// and never stores it.

@group(0) @binding(0) var<uniform> params: GdnParams;

alias StateTile = array<vec4<f32>, GROUPS * RPT>;

// The entry's call (wgsl/entry.wgsl): workgroup `wg`'s tile, handed to the root's
// row_kernel (past the grid, nothing).
fn kernel_main(li: u32, wg: u32, sg: u32) {
    if wg >= params.workgroups {
        return;
    }
    let d = params.dims;
    row_kernel(d, row_tile(d, params.row_blocks, wg, li), li, sg);
}

// The rows first_dv .. first_dv + RPT of head (b, hv) into `s`, from the state the
// root's load_start_state reads.
fn load_tile(s: ptr<function, StateTile>, d: GdnDims, b: u32, hv: u32, first_dv: u32, lane: u32) {
    #unroll
    for (var rr = 0u; rr < RPT; rr++) {
        let srow = state_row(d, b, hv, min(first_dv + rr, d.value_dim - 1u));
        #unroll
        for (var m = 0u; m < GROUPS; m++) {
            (*s)[rr * GROUPS + m] = load_start_state(srow, lane_col(m, lane), d.key_dim);
        }
    }
}
