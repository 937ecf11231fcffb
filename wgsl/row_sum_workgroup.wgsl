#provides row_sum3, row_sum4, row_partials
#requires LANES, WG_SIZE
// Sum over the LANES lanes of one row through workgroup memory alone: the variant for
// devices without Features::SUBGROUP (a host application's device, the GL backend).

var<workgroup> row_partials: array<vec4<f32>, WG_SIZE>;

fn row_sum3(x: vec3<f32>, li: u32, sg: u32) -> vec3<f32> {
    return row_sum4(vec4<f32>(x, 0.0), li, sg).xyz;
}

// row_sum3 of four values (record's steps taken several at a time).
fn row_sum4(x: vec4<f32>, li: u32, sg: u32) -> vec4<f32> {
    let lane = li % LANES;
    row_partials[li] = x;
    workgroupBarrier();
    for (var o = LANES >> 1u; o > 0u; o = o >> 1u) {
        if lane < o {
            row_partials[li] += row_partials[li + o];
        }
        workgroupBarrier();
    }
    let s = row_partials[li - lane];
    workgroupBarrier();
    return s;
}
