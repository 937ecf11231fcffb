#provides main, subgroup_width
#requires kernel_main, WG_SIZE
// Entry point for kernels that reduce with subgroup operations. The subgroup size is
// read at run time (Metal reports 4..64, lavapipe runs 4, 8 or 16, AMD 64) and made
// uniform through workgroupUniformLoad, so that row_sum3 may branch on it around
// barriers and subgroup operations.

var<workgroup> subgroup_width: u32;

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(local_invocation_index) li: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(subgroup_size) sg: u32,
) {
    if li == 0u {
        subgroup_width = sg;
    }
    let sg_uniform = workgroupUniformLoad(&subgroup_width);
    kernel_main(li, wid.x + wid.y * nwg.x, sg_uniform);
}
