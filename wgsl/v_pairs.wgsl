#provides load2_v
#requires v_buf, load1_v
#if ACT_BF16
#requires bf16_lo, bf16_hi
#endif
// v's elements i and i + 1 as f32 (the fast path's first passes stage v in pairs): one
// word where bf16 pairs them (i even), else two loads.
fn load2_v(i: u32) -> vec2<f32> {
#if ACT_BF16
    if (i & 1u) == 0u {
        let w = v_buf[i >> 1u];
        return vec2(bf16_lo(w), bf16_hi(w));
    }
#endif
    return vec2(load1_v(i), load1_v(i + 1u));
}
