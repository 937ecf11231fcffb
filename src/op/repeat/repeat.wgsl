#import shape
#if HAS_BF16
#import bf16
#endif
#import entry
#provides kernel_main, params, RepeatParams
#requires load_src, load1_src, store_dst, key_head
// repeat (SPEC.md "repeat"): the GQA head broadcast dst[n, h, i] = src[n, hk(h), i].
// Each invocation writes GROUPS groups of 4 consecutive dst elements (group m of
// workgroup w at ((w * GROUPS + m) * WG_SIZE + li) * 4, so every load and store of a
// subgroup is contiguous), and a bf16 word always has a single writer. VEC4
// (dim % 4 == 0): a group lies in one row.

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
    if wg >= params.workgroups {
        return;
    }
    // All loads first: GROUPS loads in flight per invocation keep the memory busy.
    var v: array<vec4<f32>, GROUPS>;
    #unroll
    for (var m = 0u; m < GROUPS; m++) {
        let e = ((wg * GROUPS + m) * WG_SIZE + li) * 4u;
        if e < params.dst_len {
            if VEC4 {
                v[m] = load_src(repeat_src_index(e), 0u, 4u);
            } else {
                for (var c = 0u; c < 4u; c++) {
                    v[m][c] = load1_src(repeat_src_index(min(e + c, params.dst_len - 1u)));
                }
            }
        }
    }
    #unroll
    for (var m = 0u; m < GROUPS; m++) {
        let e = ((wg * GROUPS + m) * WG_SIZE + li) * 4u;
        store_dst(0u, e, params.dst_len, v[m]);
    }
}
