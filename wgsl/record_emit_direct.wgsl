// record's per-step outputs when neither y nor delta is bf16: the row's lane 0 writes
// its own element of each.

fn emit_row(li: u32, at: u32, valid: bool, y: f32, delta: f32, t: u32) {
    if valid && li % LANES == 0u {
        store1_y(at, y);
        store1_delta(at, delta);
    }
}
