#provides state_as_stored
#if STATE_BF16
#requires bf16_pack2, bf16_lo, bf16_hi
#endif
// fold_record: a folded state value as the state dtype stores it, so that record goes
// on from the committed state exactly as a draft that loads it would.
fn state_as_stored(v: vec4<f32>) -> vec4<f32> {
#if STATE_BF16
    let w = vec2<u32>(bf16_pack2(v.x, v.y), bf16_pack2(v.z, v.w));
    return vec4<f32>(bf16_lo(w.x), bf16_hi(w.x), bf16_lo(w.y), bf16_hi(w.y));
#else
#if STATE_F16
    return vec4<f32>(vec4<f16>(v));
#else
    return v;
#endif
#endif
}
