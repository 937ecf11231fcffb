#provides Head, head_at
#requires GdnDims, key_head
// The head (b, hv) a flat index head = b * Hv + hv names, and the key head serving hv
// (record_chunked's two passes number their workgroups by it).

struct Head {
    b: u32,
    hv: u32,
    hk: u32,
}

fn head_at(d: GdnDims, gqa_layout: u32, head: u32) -> Head {
    let hv = head % d.value_heads;
    return Head(head / d.value_heads, hv, key_head(gqa_layout, hv, d.key_heads, d.value_heads));
}
