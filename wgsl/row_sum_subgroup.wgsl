#import strides
#provides row_sum3, row_sum4, row_partials
#requires LANES, WG_SIZE
// Sum over the LANES lanes of one row (lanes li - li % LANES .. + LANES), returned to
// every lane of the row. Assumes what Metal guarantees and Vulkan drivers do: subgroups
// are consecutive runs of local_invocation_index of `sg` lanes (sg a power of two).

var<workgroup> row_partials: array<vec4<f32>, WG_SIZE>;

fn row_sum3(x: vec3<f32>, li: u32, sg: u32) -> vec3<f32> {
    if LANES <= sg {
        // The row lies inside one subgroup: butterfly over its lanes only.
        var s = x;
        for (var o = 1u; o < LANES; o = o << 1u) {
            s += subgroupShuffleXor(s, o);
        }
        return s;
    }
    // The row spans LANES / sg subgroups: one subgroupAdd each (Metal's simd_sum),
    // then the partial sums meet in workgroup memory.
    return row_sum_across(vec4<f32>(x, 0.0), li, sg).xyz;
}

// row_sum3 of four values (record's steps taken several at a time). Not the body of
// row_sum3: record's single step shuffles three values a level, not four.
fn row_sum4(x: vec4<f32>, li: u32, sg: u32) -> vec4<f32> {
    if LANES <= sg {
        var s = x;
        for (var o = 1u; o < LANES; o = o << 1u) {
            s += subgroupShuffleXor(s, o);
        }
        return s;
    }
    return row_sum_across(x, li, sg);
}

// A row over LANES / sg subgroups: one subgroupAdd each, then the partial sums meet in
// workgroup memory.
fn row_sum_across(x: vec4<f32>, li: u32, sg: u32) -> vec4<f32> {
    row_partials[li] = subgroupAdd(x);
    workgroupBarrier();
    let first = li - li % LANES;
    var s = vec4<f32>(0.0);
    for (var j = 0u; j < strides(0u, LANES, sg); j++) {
        s += row_partials[first + j * sg];
    }
    workgroupBarrier();
    return s;
}
