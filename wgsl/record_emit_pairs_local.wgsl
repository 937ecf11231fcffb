#provides emit_row
#requires LANES, store2_y, store2_delta
// record's per-step outputs when y or delta is bf16 and each invocation holds an even
// number of rows: rows dv and dv + 1 (dv even) share a u32 word, and both belong to the
// same invocation (its first row is even), which sees the even row first. Lane 0 keeps
// the even row's values and writes both halves with the odd row: no workgroup memory and
// no barrier (record_emit_pairs.wgsl is the variant for one row per invocation).

var<private> pending: vec2<f32>;

fn emit_row(li: u32, r: u32, at: u32, valid: bool, y: f32, delta: f32, t: u32, sg: u32) {
    if (r & 1u) == 0u {
        pending = vec2<f32>(y, delta);
    } else if valid && li % LANES == 0u {
        store2_y(at - 1u, pending.x, y);
        store2_delta(at - 1u, pending.y, delta);
    }
}
