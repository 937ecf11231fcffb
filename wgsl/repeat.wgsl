// repeat (SPEC.md "repeat"): the GQA head broadcast dst[n, h, i] = src[n, hk(h), i].
// Each invocation writes one group of 4 consecutive dst elements, so a bf16 word always
// has a single writer. VEC4 (dim % 4 == 0): the group lies in one row.

struct RepeatParams {
    rows: u32,
    src_heads: u32,
    dst_heads: u32,
    dim: u32,
    gqa_layout: u32, // 0 = blocked, 1 = tiled
    dst_len: u32,    // rows * dst_heads * dim
    workgroups: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> params: RepeatParams;

// Index of src[n, hk(h), i] for dst element e.
fn repeat_src_index(e: u32) -> u32 {
    let row = e / params.dim;
    let n = row / params.dst_heads;
    let h = row % params.dst_heads;
    let hk = key_head(params.gqa_layout, h, params.src_heads, params.dst_heads);
    return (n * params.src_heads + hk) * params.dim + e % params.dim;
}

fn kernel_main(li: u32, wg: u32, sg: u32) {
    let e = (wg * WG_SIZE + li) * 4u;
    if wg >= params.workgroups || e >= params.dst_len {
        return;
    }
    var v: vec4<f32>;
    if VEC4 {
        v = load_src(repeat_src_index(e), 0u, 4u);
    } else {
        for (var c = 0u; c < 4u; c++) {
            v[c] = load1_src(repeat_src_index(min(e + c, params.dst_len - 1u)));
        }
    }
    store_dst(0u, e, params.dst_len, v);
}
