#provides bf16_lo, bf16_hi, bf16_bits, bf16_pack2
// bf16 does not exist in WGSL: two values share one u32, the even element in the low
// half. Unpacking is exact; packing rounds to nearest even, NaN stays NaN (as `half`).

fn bf16_lo(w: u32) -> f32 {
    return bitcast<f32>(w << 16u);
}

fn bf16_hi(w: u32) -> f32 {
    return bitcast<f32>(w & 0xffff0000u);
}

fn bf16_bits(x: f32) -> u32 {
    let u = bitcast<u32>(x);
    let is_nan = (u & 0x7fffffffu) > 0x7f800000u;
    let rounded = (u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u;
    return select(rounded, (u >> 16u) | 0x0040u, is_nan);
}

fn bf16_pack2(lo: f32, hi: f32) -> u32 {
    return bf16_bits(lo) | (bf16_bits(hi) << 16u);
}
