#provides main
#requires kernel_main, WG_SIZE
// Entry point for kernels that use no subgroup operations (and for devices without
// Features::SUBGROUP). Large grids are folded into two dimensions; `wg` is the linear
// workgroup index.

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(local_invocation_index) li: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    kernel_main(li, wid.x + wid.y * nwg.x, 0u);
}
