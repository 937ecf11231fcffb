#provides emit_row, emit_stage
#requires LANES, ROWS, store2_y, store2_delta
// record's per-step outputs when y or delta is bf16. Rows dv and dv + 1 (dv even) share
// a u32 word, and one word must have one writer: the two values meet in workgroup
// memory and the odd row's lane 0 writes both halves, after both were staged (with RPT
// rows per invocation the odd row is staged by a later call than the even one). ROWS is
// even and Dv is even (the host checks), so a pair never straddles two workgroups.
// Double-buffered by step parity so that one barrier per call suffices.

var<workgroup> emit_stage: array<vec2<f32>, 2 * ROWS>;

fn emit_row(li: u32, r: u32, at: u32, valid: bool, y: f32, delta: f32, t: u32) {
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
