#provides emit_row, emit_stage
#requires LANES, ROWS, store2_y, store2_delta
// record's per-step outputs when y or delta is bf16. Rows dv and dv + 1 (dv even) share
// a u32 word, and one word must have one writer: the two values meet in workgroup
// memory and the odd row's lane 0 writes both halves, after both were staged (with RPT
// rows per invocation the odd row is staged by a later call than the even one). ROWS is
// even and Dv is even (the host checks), so a pair never straddles two workgroups.
// Double-buffered by step parity so that one barrier per call suffices. Where the
// kernel has subgroup operations and a pair's two rows lie in one subgroup
// (2 LANES <= sg; rows are LANES consecutive invocations each, row_tile), the even
// row's values reach the odd row's lane 0 by a shuffle instead: no barrier a step.

var<workgroup> emit_stage: array<vec2<f32>, 2 * ROWS>;

fn emit_row(li: u32, r: u32, at: u32, valid: bool, y: f32, delta: f32, t: u32, sg: u32) {
#if SUBGROUP
    if 2u * LANES <= sg {
        // Row r ^ 1's lane of the same index: LANES invocations away.
        let other = subgroupShuffleXor(vec2<f32>(y, delta), LANES);
        if valid && li % LANES == 0u && (r & 1u) == 1u {
            store2_y(at - 1u, other.x, y);
            store2_delta(at - 1u, other.y, delta);
        }
        return;
    }
#endif
    let slot = (t & 1u) * ROWS + r;
    if li % LANES == 0u {
        emit_stage[slot] = vec2<f32>(y, delta);
    }
    workgroupBarrier();
    if valid && li % LANES == 0u && (r & 1u) == 1u {
        let even = emit_stage[slot - 1u];
        store2_y(at - 1u, even.x, y);
        store2_delta(at - 1u, even.y, delta);
    }
}
