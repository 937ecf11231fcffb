#provides emit_row
#requires LANES, store1_y, store1_delta
// record's per-step outputs when neither y nor delta is bf16: lane 0 of the invocations
// holding row r (local to the workgroup) writes its element of each.

fn emit_row(li: u32, r: u32, at: u32, valid: bool, y: f32, delta: f32, t: u32, sg: u32) {
    if valid && li % LANES == 0u {
        store1_y(at, y);
        store1_delta(at, delta);
    }
}
